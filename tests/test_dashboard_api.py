"""The JSON the web dashboard reads, over real HTTP from a served API with
its writers and scheduler running: the cluster as columns (the view's
numbers, the attributes sent again only when they changed), a request's
page, the caller's role; and the page and its files, served to anyone
from the package."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.api import Api
from berth.api.credentials import Credentials, digest
from berth.app import App, Settings
from tests.builders import provider
from tests.http_calls import call, deciding, serving
from tests.polling import wait_for

TOKENS = {"admin": "d-admin", "operator": "d-operator", "project:a": "d-a", "project:b": "d-b"}
NOW = int(time.time() * 1000)


def _described(pid: str, zone: str, state: str = "enabled") -> list[dict[str, Any]]:
    events = [json.loads(e.model_dump_json()) for e in provider(pid, ts=NOW, VCPU=16, DISK_GB=100)]
    base = {"ts_ms": NOW, "partition_key": pid, "provider_id": pid}
    events.append(
        {**base, "type": "provider_described", "event_id": f"az-{pid}", "availability_zone": zone}
    )
    events.append({**base, "type": "traits_set", "event_id": f"t-{pid}", "traits": ["HW_" + zone]})
    if state != "enabled":
        events.append(
            {**base, "type": "provider_state_set", "event_id": f"s-{pid}", "state": state}
        )
    return events


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data: Path = tmp_path_factory.mktemp("dashboard-api") / "data"
    credentials = Credentials({digest(token): role for role, token in TOKENS.items()})
    with (
        App(Settings(data_dir=data, partitions=2)) as app,
        deciding(app),
        serving(Api(app, credentials=credentials)) as url,
    ):
        setup = (
            _described("n1", "az1") + _described("n2", "az2") + _described("n3", "az1", "disabled")
        )
        status, reply = call(url, "/v1/events?wait=30", setup, token=TOKENS["admin"])
        assert status == 200, reply
        request = {"request_id": "r-a", "ts_ms": NOW, "project_id": "a", "resources": {"VCPU": 4}}
        status, reply = call(url, "/v1/requests?wait=30", request, token=TOKENS["project:a"])
        assert status == 200 and reply["answers"]["r-a"]["placed"], reply

        def held() -> bool:
            # answered once the writer decided, which is just before its view commits
            found = call(url, "/v1/cluster?resource_class=VCPU", token=TOKENS["admin"])[1]
            return len(found["ids"]) == 3 and sum(found["used"]) == 4

        wait_for(held, "the view to hold r-a", timeout_s=10)
        yield url


def test_the_cluster_as_columns(served: str) -> None:
    status, found = call(served, "/v1/cluster?resource_class=VCPU", token=TOKENS["project:b"])
    assert status == 200, found
    assert found["classes"] == ["DISK_GB", "VCPU"] and found["resource_class"] == "VCPU"
    rows = {pid: n for n, pid in enumerate(found["ids"])}
    assert set(rows) == {"n1", "n2", "n3"} and found["providers"] == 3
    zone = {pid: found["zones"][found["zone"][n]] for pid, n in rows.items()}
    assert zone == {"n1": "az1", "n2": "az2", "n3": "az1"}
    state = {pid: found["states"][found["state"][n]] for pid, n in rows.items()}
    assert state == {"n1": "enabled", "n2": "enabled", "n3": "disabled"}
    traits = {pid: [found["traits"][t] for t in found["trait"][n]] for pid, n in rows.items()}
    assert traits == {"n1": ["HW_az1"], "n2": ["HW_az2"], "n3": ["HW_az1"]}
    assert sorted(found["capacity"]) == [16, 16, 16]
    assert sum(found["used"]) == 4  # r-a's one instance, wherever it went
    # the caller holds this layout: usage only, of the class asked for
    status, again = call(
        served, f"/v1/cluster?resource_class=DISK_GB&layout={found['layout']}", token="d-b"
    )
    assert status == 200 and again["layout"] == found["layout"]
    assert "ids" not in again and again["capacity"] == [100, 100, 100]
    # an unknown class: the first
    assert call(served, "/v1/cluster?resource_class=GPU", token="d-b")[1]["resource_class"] == (
        "DISK_GB"
    )


def test_the_layout_changes_with_the_providers(served: str) -> None:
    _, before = call(served, "/v1/cluster", token=TOKENS["admin"])
    event = {
        "type": "provider_state_set",
        "event_id": "drain-n2",
        "ts_ms": NOW,
        "partition_key": "n2",
        "provider_id": "n2",
        "state": "offline",
    }
    assert call(served, "/v1/events?wait=30", event, token=TOKENS["operator"])[0] == 200
    found: dict[str, Any] = {}

    def changed() -> bool:
        # a decision is published just before the view commits it
        _, after = call(served, f"/v1/cluster?layout={before['layout']}", token=TOKENS["admin"])
        found.update(after)
        return bool(after["layout"] != before["layout"])

    wait_for(changed, "the view to commit the new state", timeout_s=10)
    assert found["states"][found["state"][found["ids"].index("n2")]] == "offline"


def test_a_request_s_page(served: str) -> None:
    status, page = call(served, "/v1/requests/r-a", token=TOKENS["project:a"])
    assert status == 200, page
    assert page["request"]["resources"] == {"VCPU": 4}
    (answer,) = page["answers"]
    assert answer["placed"]
    ((reservation_id, provider_id),) = answer["reservations"]
    (held,) = page["reservations"]
    assert held["subject"] == reservation_id
    assert held["reservations"][0]["items"][0]["provider_id"] == provider_id
    assert [step["kind"] for step in held["history"]] == ["accepted"]
    explained = page["explanation"]
    assert explained["considered"] == 3
    # those not enabled (n3, and n2 once another test took it offline) are
    # removed by a filter, and the others ranked
    _, found = call(served, "/v1/cluster", token=TOKENS["admin"])
    states = {pid: found["states"][n] for pid, n in zip(found["ids"], found["state"], strict=True)}
    down = {pid for pid, state in states.items() if state != "enabled"}
    assert "n3" in down
    assert {e["provider_id"] for e in explained["eliminations"]} == down
    assert {r["provider_id"] for r in explained["ranking"]} == set(states) - down
    # another project's request is not b's to see; an unknown one is nobody's
    assert call(served, "/v1/requests/r-a", token=TOKENS["project:b"])[0] == 404
    assert call(served, "/v1/requests/nothing", token=TOKENS["admin"])[0] == 404


def test_who_am_i(served: str) -> None:
    for role, token in TOKENS.items():
        status, me = call(served, "/v1/whoami", token=token)
        assert status == 200 and me["role"] == role
        assert me["writes_providers"] == (role in ("admin", "operator"))
        assert me["credentials_required"]
    assert call(served, "/v1/whoami")[0] == 401


def test_the_page_and_its_files_need_no_token(served: str) -> None:
    with urllib.request.urlopen(served + "/") as response:
        page = response.read().decode()
        assert response.headers["Content-Type"].startswith("text/html")
    scripts = ["/static/style.css", "/static/js/app.js"]
    assert all(path in page for path in scripts)
    for path in scripts:
        with urllib.request.urlopen(served + path) as response:
            assert response.status == 200 and response.read()
    # nothing fetched from elsewhere: every file the page loads is the server's own
    static = Path(__file__).parent.parent / "berth" / "api" / "static"
    for file in static.rglob("*"):
        if file.is_file():
            assert "http://" not in file.read_text() and "https://" not in file.read_text(), file
