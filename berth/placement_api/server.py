"""The Placement API served by uvicorn from a thread of its own, beside the
partition writers that ``berth serve`` runs in its main thread."""

from __future__ import annotations

import threading
import time

import uvicorn

from berth.placement_api.app import create_app
from berth.placement_api.service import PlacementService


class PlacementServer:
    """uvicorn serving the Placement API on ``host:port`` (port 0: any free)."""

    def __init__(self, service: PlacementService, host: str, port: int) -> None:
        config = uvicorn.Config(
            create_app(service),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=30,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, name="berth-placement-api", daemon=True
        )

    def start(self, timeout_s: float = 30.0) -> tuple[str, int]:
        """Start serving; where it listens. RuntimeError when it cannot."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the Placement API did not start listening")
            time.sleep(0.01)
        socket = self._server.servers[0].sockets[0]
        host, port = socket.getsockname()[:2]
        return str(host), int(port)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
