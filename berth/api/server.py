"""The API served by uvicorn from a thread of its own, beside whatever the
process does (``berth serve --api`` runs the writers in the main thread)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import threading
import time
from http import HTTPStatus

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from berth.api.cluster import layout
from berth.api.problems import MAX_TARGET_BYTES, Problem
from berth.api.routes import create_app
from berth.api.service import Api

_log = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.0001
"""How long a thread holding the GIL may keep a woken one waiting, in a
process that serves an API (``sys.setswitchinterval``)."""


class _Protocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 on httptools, but a request it cannot parse gets a
    problem document like every other error, and a target over the bound a
    414 (httptools cannot parse one past 64 KiB: the app would never see it)."""

    _too_long = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._too_long = False

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_TARGET_BYTES:
            self._too_long = True
            raise ValueError("request target too long")  # the parser stops; see below

    def send_400_response(self, msg: str) -> None:
        problem = (
            Problem(HTTPStatus.REQUEST_URI_TOO_LONG, f"the target is over {MAX_TARGET_BYTES} bytes")
            if self._too_long
            else Problem(HTTPStatus.BAD_REQUEST, f"not an HTTP/1.1 request: {msg}")
        )
        body = problem.response().body
        head = (
            f"HTTP/1.1 {int(problem.status)} {problem.status.phrase}\r\n"
            f"content-type: application/problem+json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + bytes(body))
        self.transport.close()


TICK_S = 1.0
"""How often an idle uvicorn wakes: to renew the Date header, which names
the second (uvicorn's own loop wakes ten times a second for it)."""


class _QuietServer(uvicorn.Server):
    """uvicorn's server, whose loop wakes once a second rather than ten
    times, and at once when told to stop: an idle API uses no CPU."""

    _loop: asyncio.AbstractEventLoop | None = None
    _stopping: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            # uvicorn renews the Date header on the ticks counted 0 mod 10
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), TICK_S)

    def stop(self) -> None:
        """From another thread: exit now, not at the next tick."""
        self.should_exit = True
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(stopping.set)


class UvicornThread:
    """uvicorn running ``config`` in a daemon thread of its own (the HTTP API
    and the Placement API both): started, told where it listens, stopped."""

    def __init__(
        self, config: uvicorn.Config, name: str, sockets: list[socket.socket] | None = None
    ) -> None:
        """``sockets``: listen on these, bound already, rather than on the
        config's host and port."""
        self._name = name
        self._server = _QuietServer(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": sockets}, name=name, daemon=True
        )

    def start(self, timeout_s: float = 30.0) -> tuple[str, int]:
        """Start serving; where it listens. RuntimeError when it cannot."""
        # this process's other threads (berth serve's writers and scheduler)
        # hold the GIL for up to the switch interval (5 ms by default) when a
        # thread of the API wakes for an answer: a short one lets it run
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        # uvicorn says it has started by a flag, not an event: polled, with a deadline
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self._name} did not start listening")
            time.sleep(0.01)
        listening = self._server.servers[0].sockets[0]
        host, port = listening.getsockname()[:2]
        return str(host), int(port)

    def stop(self) -> None:
        self._server.stop()
        self._thread.join(timeout=30)


class Server:
    """uvicorn serving one :class:`Api` on ``host:port`` (port 0: any free)."""

    def __init__(self, api: Api, host: str, port: int) -> None:
        config = uvicorn.Config(
            create_app(api),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,  # a request log is the proxy's business
            lifespan="off",
            # a kept-alive connection the client leaves idle is closed after this
            timeout_keep_alive=30,
            http=_Protocol,
        )
        self._api = api
        self._uvicorn = UvicornThread(config, "berth-api")

    def start(self, timeout_s: float = 30.0) -> tuple[str, int]:
        """Start serving; where it listens. RuntimeError when it cannot."""
        where = self._uvicorn.start(timeout_s)
        threading.Thread(target=self._warm, name="berth-api-warm", daemon=True).start()
        return where

    def _warm(self) -> None:
        """Read the view's snapshot, and encode the dashboard's grid, once
        now, so that the first page (or headroom) does not wait for them
        (2 s at 10,000 providers)."""
        try:
            layout(self._api.snapshot())
        except Exception as error:  # the first request meets it again, as a 503
            _log.warning("api: the view could not be read ahead: %s", error)

    def stop(self) -> None:
        self._uvicorn.stop()


def serve(api: Api, host: str, port: int) -> tuple[Server, tuple[str, int]]:
    """Serve ``api`` from a thread; the server, and where it listens."""
    server = Server(api, host, port)
    return server, server.start()
