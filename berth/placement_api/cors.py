"""CORS for the Placement API as Placement deploys it: oslo.middleware's
CORS (the one every OpenStack service configures with ``[cors]
allowed_origin``), applied to each answer with the request it answers, so
its rules (preflights answered 200 whatever the route says, headers only
for an allowed origin) are Placement's to the letter."""

from __future__ import annotations

from collections.abc import Mapping

import webob
from oslo_config import cfg
from oslo_middleware import cors


class Cors:
    """Cross-origin requests from ``origins``, which may send ``allow_headers``."""

    def __init__(self, origins: list[str], allow_headers: list[str]) -> None:
        # its [cors] options, their defaults oslo's (methods, max age, ...)
        conf = cfg.ConfigOpts()
        conf.register_opts(cors.CORS_OPTS, "cors")
        conf([], project="berth-placement", default_config_files=[])
        conf.set_override("allowed_origin", origins, "cors")
        conf.set_override("allow_headers", allow_headers, "cors")
        self.middleware = cors.CORS(None, conf)

    def apply(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        answer: tuple[int, dict[str, str], bytes],
    ) -> tuple[int, dict[str, str], bytes]:
        """The answer with CORS's headers (or, to a preflight, CORS's answer)."""
        status, out, body = answer
        request = webob.Request.blank(
            path + (f"?{query}" if query else ""),
            method=method,
            headers={k: v for k, v in headers.items() if not k.startswith(":")},
        )
        response = webob.Response(status=status, headerlist=list(out.items()), body=body)
        result = self.middleware.process_response(response, request)
        return result.status_code, dict(result.headerlist), result.body
