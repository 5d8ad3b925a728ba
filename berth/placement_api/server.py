"""The Placement API served by uvicorn from a thread of its own, beside the
partition writers that ``berth serve`` runs in its main thread."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Mapping

import uvicorn

from berth.api.server import UvicornThread
from berth.placement_api.app import create_app
from berth.placement_api.cors import Cors
from berth.placement_api.http import Caller
from berth.placement_api.policy import Policy
from berth.placement_api.pump import WritePump
from berth.placement_api.service import PlacementService

SWITCH_INTERVAL_S = 0.001
"""The interpreter's switch interval while the pump runs (5 ms by default):
the race's placements per second, median of six alternated runs at load
8-9, were 851 with 1 ms against 595 with 5 ms."""


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
        reuse_port: bool = False,
    ) -> None:
        """``reuse_port``: listen with ``SO_REUSEPORT``, so that several
        processes serve one address, the kernel sharing the connections out."""
        # the writes of allocations batched, when their writer runs in this process
        self._pump = WritePump(service) if service.handoff is not None else None
        config = uvicorn.Config(
            create_app(service, policy, cors, caller_of, self._pump),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=30,
        )
        sockets = [_reusing(host, port)] if reuse_port else None
        self._uvicorn = UvicornThread(config, "berth-placement-api", sockets)

    def start(self, timeout_s: float = 30.0) -> tuple[str, int]:
        """Start serving; where it listens. RuntimeError when it cannot."""
        if self._pump is not None:
            # the event loop begins the writes and runs for as long as
            # requests keep arriving; the pump's threads, back from an
            # fsync, would each wait out the loop's turn with the GIL
            sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        return self._uvicorn.start(timeout_s)

    def stop(self) -> None:
        self._uvicorn.stop()
        if self._pump is not None:
            self._pump.stop()


def _reusing(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` that other processes may bind
    too (``SO_REUSEPORT``); RuntimeError when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listening.bind((host, port))
    except OSError as error:
        listening.close()
        raise RuntimeError(f"cannot listen with SO_REUSEPORT: {error}") from None
    return listening
