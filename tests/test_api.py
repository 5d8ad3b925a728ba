"""The HTTP API, over real HTTP: in process on SQLite and PostgreSQL, and
from a ``berth serve --api`` process whose writers and scheduler answer."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from berth.api import Api
from berth.api.credentials import Caller, Credentials, digest
from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from tests.builders import claim, provider
from tests.conftest import Cli
from tests.http_calls import call, serving
from tests.polling import wait_for
from tests.processes import berth_running


def _events(*events: Any) -> list[Any]:
    return [json.loads(e.model_dump_json()) for e in events]


def test_the_api_publishes_and_reads_in_process(tmp_path: Path, view_url: str) -> None:
    settings = Settings(data_dir=tmp_path / "data", db_url=view_url, partitions=2)
    with App(settings) as app, serving(Api(app)) as url:
        topic = settings.topics.events
        ends = [app.log.end_offset(topic, p) for p in range(2)]
        status, reply = call(url, "/v1/events", _events(*provider("n1", ts=1, VCPU=8)))
        assert status == 202 and len(reply["appended"]) == 2

        # refused whole: nothing of it is appended
        before = [app.log.end_offset(topic, p) for p in range(2)]
        bad = [*_events(claim("r9", "n1", ts=2, VCPU=1)), {"type": "claim", "event_id": "x"}]
        status, reply = call(url, "/v1/events", bad)
        assert status == 422 and reply["type"] == "urn:berth:problem:validation"
        assert {"pointer": "/1/reservation_id", "detail": "/1/reservation_id: Field required"} in (
            reply["errors"]
        )
        assert [app.log.end_offset(topic, p) for p in range(2)] == before != ends
        assert call(url, "/v1/events", raw=b"{not json")[0] == 400
        status, reply = call(url, "/v1/events", [1, 2])
        assert status == 422 and [e["pointer"] for e in reply["errors"]] == ["/0", "/1"]

        # no writer runs here: a wait ends with the event still undecided
        held = claim("r1", "n1", ts=3, VCPU=2, lease_ms=600_000)
        status, reply = call(url, "/v1/events?wait=0", _events(held))
        assert status == 202 and reply["pending"] == [held.event_id]
        catch_up_all(app.writers())

        status, reply = call(url, "/v1/history/r1")
        assert status == 200 and [s["kind"] for s in reply["history"]] == ["accepted"]
        assert reply["history"][0]["record"]["type"] == "claim"
        assert call(url, "/v1/history/r1?records=0")[1]["history"][0].get("record") is None
        assert call(url, "/v1/history/nobody") == (
            404,
            {
                "type": "about:blank",
                "title": "Not Found",
                "status": 404,
                "detail": "the view holds nothing about 'nobody'",
            },
        )
        status, reply = call(url, "/v1/status")
        assert status == 200 and reply["reservations"] == {"held": 1}
        assert reply["behind"] == 0
        assert "resources" not in call(url, "/v1/status?lag=1")[1]
        assert call(url, "/v1/queue") == (200, {})
        assert call(url, "/v1/headroom?resources=VCPU=2") == (
            200,
            {"instances": 3, "providers": {"n1": 3}},
        )
        assert call(url, "/v1/headroom?resources=VCPU=2&availability_zone=elsewhere")[1] == {
            "instances": 0,
            "providers": {},
        }
        assert call(url, "/v1/headroom")[0] == 422
        assert call(url, "/v1/headroom?resources=VCPU")[1]["errors"][0]["parameter"] == "resources"
        assert call(url, "/v1/requests", {"request_id": "x"})[0] == 422
        before = [app.log.end_offset(topic, p) for p in range(2)]
        status, reply = call(url, "/v1/events?wait=forever", _events(claim("r8", "n1", VCPU=1)))
        assert status == 422 and [e["parameter"] for e in reply["errors"]] == ["wait"]
        assert [app.log.end_offset(topic, p) for p in range(2)] == before
        assert call(url, "/v1/elsewhere")[0] == 404
        assert call(url, "/v1/events")[:1] == (405,)


def test_an_unreadable_view_is_a_503_not_a_dropped_connection(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings, migrate=False) as app, serving(Api(app)) as url:
        status, reply = call(url, "/v1/status")
    assert status == 503 and reply["detail"].startswith("the view cannot be read")


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_serve_with_the_api_answers_requests_and_decides_events(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    serve_argv = ("serve", "--data-dir", str(data), "--partitions", "2")
    with berth_running(*serve_argv, "--api", f"127.0.0.1:{port}", ready=lambda: _listening(port)):
        now = int(time.time() * 1000)
        events = _events(*provider("n1", ts=now, VCPU=4), *provider("n2", ts=now, VCPU=4))
        status, reply = call(url, "/v1/events?wait=30", events)
        assert status == 200
        assert {o["kind"] for outcomes in reply["decisions"].values() for o in outcomes} == {
            "applied"
        }
        requests = [
            {"request_id": "a", "ts_ms": now, "project_id": "p", "resources": {"VCPU": 3}},
            {"request_id": "b", "ts_ms": now, "project_id": "p", "resources": {"VCPU": 3}},
            {"request_id": "c", "ts_ms": now, "project_id": "p", "resources": {"VCPU": 3}},
        ]
        status, reply = call(url, "/v1/requests?wait=30", requests)
        assert status == 200
        answers = reply["answers"]
        assert {rid: answers[rid]["placed"] for rid in "abc"} == {"a": True, "b": True, "c": False}
        assert {answers[rid]["reservations"][0][1] for rid in "ab"} == {"n1", "n2"}
        (rid, pid) = answers["a"]["reservations"][0]
        history: list[Any] = []

        def in_the_view() -> bool:
            # the answer is durable once replied; the view commits the claim
            # just after the reply went out (docs/performance.md, Latency)
            history[:] = call(url, f"/v1/history/{rid}")
            return history[0] == 200 and bool(history[1]["reservations"])

        wait_for(in_the_view, "the view to hold the placement")
        assert history[1]["reservations"][0]["items"][0]["provider_id"] == pid


def test_berth_api_runs_beside_the_writers(tmp_path: Path, cli: Cli) -> None:
    data = tmp_path / "data"
    with App(Settings(data_dir=data, partitions=2)) as app:
        Publisher(app.log, app.settings.topics).publish([*provider("n1", ts=1, VCPU=8)])
        catch_up_all(app.writers())
    port = _free_port()
    listen = ("--listen", f"127.0.0.1:{port}")
    with berth_running("api", "--data-dir", str(data), *listen, ready=lambda: _listening(port)):
        status, reply = call(f"http://127.0.0.1:{port}", "/v1/status")
    assert status == 200 and reply["providers"] == {"enabled": 1}
    code, _, err = cli("api", "--data-dir", str(data), "--listen", "8480")
    assert code == 2 and err == "berth: the API listens on HOST:PORT, not '8480'\n"


def test_with_a_token_only_requests_that_carry_it_are_answered(tmp_path: Path, cli: Cli) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app, serving(Api(app, credentials=_admin("s3cret"))) as url:
        refused = (
            401,
            {
                "type": "urn:berth:problem:unauthorized",
                "title": "Unauthorized",
                "status": 401,
                "detail": "this API needs Authorization: Bearer <token>",
            },
        )
        assert call(url, "/v1/status") == refused
        assert call(url, "/v1/status", token="guess") == refused
        end = app.log.end_offset(settings.topics.events, 0)
        assert call(url, "/v1/events", _events(*provider("n1", ts=1, VCPU=8))) == refused
        assert app.log.end_offset(settings.topics.events, 0) == end  # nothing appended
        assert call(url, "/v1/status", token="s3cret")[0] == 200
        status, _ = call(url, "/v1/events", _events(*provider("n1", VCPU=8)), token="s3cret")
        assert status == 202 and app.log.end_offset(settings.topics.events, 0) == end + 2
    empty = tmp_path / "token"
    empty.write_text("\n")
    data = ["--data-dir", str(tmp_path / "data")]
    code, _, err = cli("api", *data, "--listen", "127.0.0.1:0", "--token-file", str(empty))
    assert code == 2 and err == f"berth: the API token file {empty} is empty\n"


def _admin(token: str) -> Credentials:
    return Credentials({digest(token): "admin"})


def test_the_credentials_come_from_files_else_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BERTH_API_TOKEN", raising=False)
    monkeypatch.delenv("BERTH_API_CREDENTIALS", raising=False)
    assert not Credentials.load(None, None).required
    monkeypatch.setenv("BERTH_API_TOKEN", "from-env")
    assert Credentials.load(None, None).caller("from-env") == Caller("admin")
    monkeypatch.setenv("BERTH_API_CREDENTIALS", f"project:p1 sha256:{digest('p1')}")
    assert Credentials.load(None, None).caller("p1") == Caller("project:p1")
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    lines = tmp_path / "credentials"
    lines.write_text(f"# who\noperator sha256:{digest('on-call-7f3a')}  # the on-call\n")
    loaded = Credentials.load(str(lines), str(secret))
    assert loaded.caller("from-file") == Caller("admin")
    assert loaded.caller("on-call-7f3a") == Caller("operator")
    assert loaded.caller("p1") is None and loaded.caller(None) is None
    assert "on-call-7f3a" not in lines.read_text()  # only its digest is kept
    with pytest.raises(ValueError, match=r"the API token file: .*No such file"):
        Credentials.load(None, str(tmp_path / "missing"))
    lines.write_text("root 1234\n")
    with pytest.raises(ValueError, match=r"line 1: expected ROLE sha256:HEX"):
        Credentials.load(str(lines), None)
