"""Bad input over HTTP: every refusal is a problem document, nothing of it
is appended, nothing answers 500, and the server keeps serving others
(200 idle connections held open while another client gets its answers)."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.api import Api
from berth.app import App, Settings
from tests.http_calls import call, serving

NOW = int(time.time() * 1000)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, App]]:
    data: Path = tmp_path_factory.mktemp("bad") / "data"
    with App(Settings(data_dir=data, partitions=2)) as app, serving(Api(app)) as url:
        yield url, app


def _raw(url: str, method: str, target: str, body: bytes | None = None, **headers: str) -> Any:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.putrequest(method, target, skip_accept_encoding=True)
    for name, value in headers.items():
        connection.putheader(name.replace("_", "-"), value)
    if body is not None and not {"Transfer_Encoding", "Content_Length"} & headers.keys():
        connection.putheader("Content-Length", str(len(body)))
    connection.endheaders()
    if body is not None:
        connection.send(body)
    response = connection.getresponse()
    assert response.getheader("Content-Type") == "application/problem+json"
    problem = json.loads(response.read())
    assert problem["status"] == response.status
    return response.status, problem, response


def _claim(**more: Any) -> dict[str, Any]:
    return {
        "type": "claim",
        "event_id": "c1",
        "ts_ms": NOW,
        "partition_key": "n1",
        "reservation_id": "r1",
        "consumer_id": "vm",
        "project_id": "p",
        "items": [{"provider_id": "n1", "resources": {"VCPU": 1}}],
        **more,
    }


def test_every_refusal_is_a_problem_and_nothing_is_appended(served: tuple[str, App]) -> None:
    url, app = served
    topic = app.settings.topics.events
    ends = [app.log.end_offset(topic, p) for p in range(2)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in [b"[" + b" " * 1_000_000] * 18)

    assert _raw(url, "GET", "/v1/nowhere")[:2] == (
        404,
        {"type": "about:blank", "title": "Not Found", "status": 404, "detail": "no such resource"},
    )
    status, problem, response = _raw(url, "TRACE", "/v1/events")
    assert status == 405 and response.getheader("Allow") == "POST"
    assert _raw(url, "POST", "/v1/events", b"[", Content_Length=str(17 << 20))[0] == 413
    assert (
        _raw(url, "POST", "/v1/events", chunked + b"0\r\n\r\n", Transfer_Encoding="chunked")[0]
        == 413
    )
    status, problem, _ = _raw(url, "GET", "/v1/history/" + "x" * 100_000)
    assert status == 414
    status, problem, _ = _raw(url, "POST", "/v1/events", b"[" * 100_000)
    assert status == 400 and "recursion limit" in problem["detail"]
    status, problem = call(url, "/v1/events", {**_claim(), "items": [{"resources": {"VCPU": 3.5}}]})
    assert status == 422 and {e["pointer"] for e in problem["errors"]} == {
        "/items/0/provider_id",
        "/items/0/resources/VCPU",
    }
    # valid by the document, refused by a rule it cannot state
    status, problem = call(url, "/v1/events", _claim(ts_ms=NOW + 3_600_000))
    assert status == 409 and problem["type"] == "urn:berth:problem:rule"
    assert "ahead of this edge's clock" in problem["detail"]
    status, problem = call(url, "/v1/events", _claim(partition_key="elsewhere-7"))
    assert status == 409 and "a claim spanning partitions is a transaction" in problem["detail"]
    assert [app.log.end_offset(topic, p) for p in range(2)] == ends
    # a whole number written as a float is a whole number, as the schema says
    assert (
        call(url, "/v1/events", _claim(items=[{"provider_id": "n1", "resources": {"VCPU": 3.0}}]))[
            0
        ]
        == 202
    )


HOLD_S = 30.0
IDLE = 200


def test_idle_connections_do_not_stop_other_clients(served: tuple[str, App]) -> None:
    url, _ = served
    host, port = url.removeprefix("http://").split(":")
    idle: list[socket.socket] = []
    try:
        for n in range(IDLE):
            conn = socket.create_connection((host, int(port)), timeout=10)
            if n % 2:  # half say nothing at all, half stop in the middle of their headers
                conn.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")
            idle.append(conn)
        slowest = 0.0
        answered = 0
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:
            started = time.monotonic()
            status, _ = call(url, "/v1/queue")
            slowest = max(slowest, time.monotonic() - started)
            assert status == 200
            answered += 1
            time.sleep(0.25)
        assert answered > HOLD_S * 2 and slowest < 2.0, (answered, slowest)
    finally:
        for conn in idle:
            conn.close()
