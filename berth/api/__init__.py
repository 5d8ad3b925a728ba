"""Berth over HTTP, for services that cannot use the Python client: on the
embedded default the log is files in Berth's own format, so this is how a
service in another language publishes to it. Both logs work the same.

The API is an edge, like :mod:`berth.client`: it validates, appends and
reads; the partition writers decide, elsewhere (``berth serve`` or ``berth
projector``). FastAPI routes (:mod:`berth.api.routes`) over the operations
(:mod:`berth.api.service`), for callers with a role
(:mod:`berth.api.credentials`), who see what their role may
(:mod:`berth.api.visibility`); errors are problem documents
(:mod:`berth.api.problems`); decisions and answers also stream
(:mod:`berth.api.streams`); :mod:`berth.api.client` is a typed client.
docs/api.md has the endpoints.
"""

from berth.api.server import Server, serve
from berth.api.service import Api

__all__ = ["Api", "Server", "serve"]
