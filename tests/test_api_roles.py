"""Who may do what, over HTTP: every operation by every role (admin,
operator, and two projects), each cell checked. The API refuses what a role
may not ask for (403, nothing appended); what reaches the log carries the
acting project, and the writer refuses a project's consume, release, renew
or consumer release of another project's reservation (PROJECT_MISMATCH,
nothing changed)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.api import Api
from berth.api.credentials import Credentials, digest
from berth.app import App, Settings
from tests.builders import provider
from tests.http_calls import call, deciding, serving

ROLES = ("admin", "operator", "project:a", "project:b")
TOKENS = {role: f"token-of-{role}" for role in ROLES}
NOW = int(time.time() * 1000)


def _claim(rid: str, project: str, consumer: str | None = None) -> dict[str, Any]:
    return {
        "type": "claim",
        "event_id": f"claim-{rid}",
        "ts_ms": NOW,
        "partition_key": "n1",
        "reservation_id": rid,
        "consumer_id": consumer or f"vm-{rid}",
        "project_id": project,
        "items": [{"provider_id": "n1", "resources": {"VCPU": 1}}],
        "lease_ms": 600_000,
    }


def _on(kind: str, rid: str, **more: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "event_id": f"{kind}-{rid}",
        "ts_ms": NOW,
        "partition_key": "n1",
        **({"reservation_id": rid} if kind != "release_consumer" else {"consumer_id": rid}),
        **more,
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, App]]:
    """The API with a credential for each role, a provider, and for each
    role its own reservations of project a to act on (``ROLE-consume`` ...)."""
    data: Path = tmp_path_factory.mktemp("roles") / "data"
    credentials = Credentials({digest(token): role for role, token in TOKENS.items()})
    with (
        App(Settings(data_dir=data, partitions=2)) as app,
        deciding(app),
        serving(Api(app, credentials=credentials)) as url,
    ):
        setup = [json.loads(e.model_dump_json()) for e in provider("n1", ts=NOW, VCPU=64)]
        for role in (r.replace(":", "-") for r in ROLES):
            for action in ("consume", "release", "renew"):
                setup.append(_claim(f"{role}-{action}", "a"))
            setup.append(_claim(f"{role}-rc", "a", consumer=f"vm-{role}"))
        setup.append(_claim("b-own", "b"))
        setup.append(_claim("b-tries", "a"))
        status, reply = call(url, "/v1/events?wait=30", setup, token=TOKENS["admin"])
        assert status == 200, reply
        # b's failed attempt on a's reservation, here so that the reads test
        # does not depend on the writes test having run first in its worker
        status, reply = call(
            url, "/v1/events?wait=30", _on("release", "b-tries"), token=TOKENS["project:b"]
        )
        assert status == 200, reply
        yield url, app


# (what, method and path, body for a role, expected status by role, the
# writer's decision on it by role for those appended)
def _cells() -> list[tuple[str, str, Any, dict[str, int], dict[str, str]]]:
    def each(make: Any) -> Any:
        return make

    return [
        ("provider state", "/v1/events?wait=30", each(lambda r: {
            "type": "provider_state_set", "event_id": f"state-{r}", "ts_ms": NOW,
            "partition_key": "n1", "provider_id": "n1", "state": "enabled"}),
         {"admin": 200, "operator": 200, "project:a": 403, "project:b": 403},
         {"admin": "applied", "operator": "applied"}),
        ("pool", "/v1/events?wait=30", each(lambda r: {
            "type": "pool_defined", "event_id": f"pool-{r}", "ts_ms": NOW,
            "partition_key": f"pool-{r}", "pool_id": f"pool-{r}", "kind": "vlan"}),
         {"admin": 200, "operator": 200, "project:a": 403, "project:b": 403},
         {"admin": "applied", "operator": "applied"}),
        ("tick", "/v1/events", each(lambda r: {
            "type": "tick", "event_id": f"tick-{r}", "ts_ms": NOW, "partition_key": "n1"}),
         {"admin": 202, "operator": 202, "project:a": 403, "project:b": 403}, {}),
        ("transaction decision", "/v1/events?wait=30", each(lambda r: {
            "type": "transaction_decision", "event_id": f"txn-{r}", "ts_ms": NOW,
            "partition_key": "n1", "transaction_id": f"t-{r}", "commit": False}),
         {"admin": 200, "operator": 403, "project:a": 403, "project:b": 403},
         {"admin": "noop"}),
        ("claim for a", "/v1/events?wait=30", each(lambda r: _claim(f"new-{r}", "a")),
         {"admin": 200, "operator": 403, "project:a": 200, "project:b": 403},
         {"admin": "accepted", "project:a": "accepted"}),
        ("consume a's", "/v1/events?wait=30", each(lambda r: _on("consume", f"{r}-consume")),
         {"admin": 200, "operator": 403, "project:a": 200, "project:b": 200},
         {"admin": "consumed", "project:a": "consumed", "project:b": "rejected"}),
        ("release a's", "/v1/events?wait=30", each(lambda r: _on("release", f"{r}-release")),
         {"admin": 200, "operator": 403, "project:a": 200, "project:b": 200},
         {"admin": "released", "project:a": "released", "project:b": "rejected"}),
        ("renew a's", "/v1/events?wait=30",
         each(lambda r: _on("renew", f"{r}-renew", lease_ms=900_000)),
         {"admin": 200, "operator": 403, "project:a": 200, "project:b": 200},
         {"admin": "renewed", "project:a": "renewed", "project:b": "rejected"}),
        ("release a's consumer", "/v1/events?wait=30",
         each(lambda r: _on("release_consumer", f"vm-{r}")),
         {"admin": 200, "operator": 403, "project:a": 200, "project:b": 200},
         {"admin": "released", "project:a": "released", "project:b": "rejected"}),
        ("request for a", "/v1/requests?wait=30", each(lambda r: {
            "request_id": f"req-{r}", "ts_ms": NOW, "project_id": "a",
            "resources": {"VCPU": 1}}),
         {"admin": 200, "operator": 403, "project:a": 200, "project:b": 403}, {}),
    ]  # fmt: skip


@pytest.mark.parametrize("role", ROLES)
def test_every_operation_by_every_role(served: tuple[str, App], role: str) -> None:
    url, app = served
    topic = app.settings.topics.events
    for what, path, make, statuses, decided in _cells():
        body = make(role.replace(":", "-"))
        ends = [app.log.end_offset(topic, p) for p in range(2)]
        status, reply = call(url, path, body, token=TOKENS[role])
        assert status == statuses[role], (what, role, reply)
        if status == 403:
            assert reply["type"] == "urn:berth:problem:forbidden"
            assert [app.log.end_offset(topic, p) for p in range(2)] == ends, (what, role)
        if role in decided:
            (outcomes,) = reply["decisions"].values()
            assert [o["kind"] for o in outcomes] == [decided[role]], (what, role, outcomes)
            if decided[role] == "rejected":
                assert outcomes[0]["reasons"][0]["code"] == "PROJECT_MISMATCH"


@pytest.mark.parametrize("role", ROLES)
def test_what_each_role_reads(served: tuple[str, App], role: str) -> None:
    url, _ = served
    token = TOKENS[role]
    status, found = call(url, "/v1/history/admin-renew", token=token)
    if role == "project:b":
        assert status == 404  # another project's: as if there were nothing
    else:
        assert status == 200 and found["reservations"][0]["project_id"] == "a"
    status, found = call(url, "/v1/history/n1", token=token)  # a provider
    if role.startswith("project:"):
        assert status == 404
    else:
        assert status == 200 and found["provider"]["provider_id"] == "n1"
    # b's failed attempt on a's reservation is b's to see, not a's
    history = call(url, "/v1/history/b-tries", token=token)[1].get("history", [])
    attempts = [s for s in history if s["kind"] == "rejected"]
    assert len(attempts) == (0 if role == "project:a" else 1)
    assert call(url, "/v1/status", token=token)[0] == (200 if role in ROLES[:2] else 403)
    assert call(url, "/v1/queue", token=token)[0] == 200
    assert call(url, "/v1/headroom?resources=VCPU=1", token=token)[0] == 200
    assert call(url, "/v1/status", token="nobody's")[0] == 401
