"""The Placement API served by uvicorn from a thread of its own, beside the
partition writers that ``berth serve`` runs in its main thread."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import uvicorn

from berth.api.server import UvicornThread
from berth.placement_api.app import create_app
from berth.placement_api.cors import Cors
from berth.placement_api.http import Caller
from berth.placement_api.policy import Policy
from berth.placement_api.service import PlacementService


class PlacementServer:
    """uvicorn serving the Placement API on ``host:port`` (port 0: any free)."""

    def __init__(
        self,
        service: PlacementService,
        host: str,
        port: int,
        policy: Policy | None = None,
        cors: Cors | None = None,
        caller_of: Callable[[Mapping[str, str]], Caller | None] | None = None,
    ) -> None:
        config = uvicorn.Config(
            create_app(service, policy, cors, caller_of),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=30,
        )
        self._uvicorn = UvicornThread(config, "berth-placement-api")

    def start(self, timeout_s: float = 30.0) -> tuple[str, int]:
        """Start serving; where it listens. RuntimeError when it cannot."""
        return self._uvicorn.start(timeout_s)

    def stop(self) -> None:
        self._uvicorn.stop()
