"""Calling Berth's HTTP API from a test, over real HTTP."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from berth.api import Api, serve
from berth.app import App
from consumers.partition_writer import catch_up_all, step_all
from scheduling.config import SchedulerConfig


def call(
    url: str,
    path: str,
    body: Any = None,
    raw: bytes | None = None,
    token: str | None = None,
    method: str | None = None,
) -> tuple[int, Any]:
    """``(status, JSON reply)`` of a GET, or a POST when a body is given; an
    error's problem document checked for its media type and members."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path, data=data, method=method or ("GET" if data is None else "POST")
    )
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        problem = json.loads(error.read())
        assert error.headers["Content-Type"] == "application/problem+json", error.headers
        assert problem["status"] == error.code and {"type", "title", "detail"} <= problem.keys()
        return error.code, problem


@contextmanager
def serving(api: Api) -> Iterator[str]:
    """``api`` served on a free port of the loopback for the block; its URL."""
    server, (host, port) = serve(api, "127.0.0.1", 0)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@contextmanager
def deciding(app: App) -> Iterator[None]:
    """The app's writers and a scheduler worker stepping in a thread for the
    block, as ``berth serve`` runs them."""
    writers = app.writers()
    worker = app.scheduler_worker(SchedulerConfig.default(), lambda: catch_up_all(writers))
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            busy = step_all(writers)
            if not (worker.step() or busy):
                stop.wait(0.005)

    thread = threading.Thread(target=loop, name="deciding")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
