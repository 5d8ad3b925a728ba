"""Calling Berth's HTTP API from a test, over real HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from berth.api import Api, serve


def call(
    url: str, path: str, body: Any = None, raw: bytes | None = None, token: str | None = None
) -> tuple[int, Any]:
    """``(status, JSON reply)`` of a GET, or a POST when a body is given."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path, data=data, method="GET" if data is None else "POST"
    )
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@contextmanager
def serving(api: Api) -> Iterator[str]:
    """``api`` served on a free port of the loopback for the block; its URL."""
    server, _ = serve(api, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
