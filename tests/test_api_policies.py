"""Scheduling policies over HTTP: set, read, assign and delete through
``/v1/policies`` and ``/v1/policy-assignments`` as an operator (a project
may read, not write), refused completely at the edge with nothing appended,
and picked up by the running scheduler at its next request; the units a
policy may name listed with their options at ``/v1/policy-units``."""

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

TOKENS = {"operator": "op-token", "project:a": "a-token"}
OPERATOR, PROJECT = TOKENS["operator"], TOKENS["project:a"]
NOW = int(time.time() * 1000)
PACKING = {"weighers": {"RAMWeigher": -1.0}}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, App]]:
    data: Path = tmp_path_factory.mktemp("policies") / "data"
    credentials = Credentials({digest(token): role for role, token in TOKENS.items()})
    with (
        App(Settings(data_dir=data, partitions=2)) as app,
        deciding(app),
        serving(Api(app, credentials=credentials)) as url,
    ):
        setup = [
            json.loads(e.model_dump_json())
            for name, ram in (("small", 4096), ("big", 65536))
            for e in provider(name, ts=NOW, VCPU=64, MEMORY_MB=ram)
        ]
        status, reply = call(url, "/v1/events?wait=30", setup, token=OPERATOR)
        assert status == 200, reply
        yield url, app


def _policy_end(app: App) -> int:
    return app.log.end_offset(app.settings.topics.policies, 0)


def _place(url: str, rid: str) -> dict[str, Any]:
    """The answer to a request of project a; with where it was placed."""
    request = {"request_id": rid, "ts_ms": NOW, "project_id": "a", "resources": {"MEMORY_MB": 512}}
    status, reply = call(url, "/v1/requests?wait=30", request, token=PROJECT)
    assert status == 200, reply
    answer: dict[str, Any] = reply["answers"][rid]
    assert answer["placed"], answer
    answer["providers"] = [pid for _, pid in answer["reservations"]]
    return answer


def test_a_policy_set_over_http_places_the_projects_next_request(
    served: tuple[str, App],
) -> None:
    url, _ = served
    assert _place(url, "before")["providers"] == ["big"]  # spreading: the most free RAM

    status, reply = call(url, "/v1/policies/packing", PACKING, token=OPERATOR, method="PUT")
    assert status == 200, reply
    version = reply["version"]
    assert call(url, "/v1/policies/packing", token=PROJECT) == (
        200,
        {"name": "packing", "version": version, "policy": PACKING},
    )
    body = {"policy": "packing"}
    status, assigned = call(url, "/v1/policy-assignments/a", body, token=OPERATOR, method="PUT")
    assert status == 200, assigned
    status, listing = call(url, "/v1/policies", token=OPERATOR)
    assert status == 200 and listing["policies"]["packing"] == version
    assert listing["projects"] == {"a": "packing"}

    answer = _place(url, "after")
    assert answer["providers"] == ["small"] and answer["policy"] == f"packing@{version}"

    back = {"policy": "default"}
    assert call(url, "/v1/policy-assignments/a", back, token=OPERATOR, method="PUT")[0] == 200
    assert _place(url, "again")["providers"] == ["big"]


@pytest.mark.parametrize(
    ("body", "status", "why"),
    [
        ({"filters": {"enabled": ["NoSuchFilter"]}}, 409, "NoSuchFilter"),
        ({"scriptlet": {"source": "def instance_placement(request, candidates)\n"}}, 409, ":1:"),
        ({"filters": {"NumInstancesFilter": {"max": 1}}}, 409, "not enabled"),
        ({"tables": {}}, 422, "tables"),
        ({"weighers": {"RAMWeigher": "heavy"}}, 422, "weighers.RAMWeigher"),
        ([1, 2], 422, "JSON object"),
    ],
)
def test_a_bad_policy_is_refused_with_its_reason_and_nothing_appended(
    served: tuple[str, App], body: object, status: int, why: str
) -> None:
    url, app = served
    before = _policy_end(app)
    got, problem = call(url, "/v1/policies/bad", body, token=OPERATOR, method="PUT")
    assert got == status and why in problem["detail"], problem
    raw = b"{not json"
    assert call(url, "/v1/policies/bad", raw=raw, token=OPERATOR, method="PUT")[0] == 400
    assert _policy_end(app) == before
    assert call(url, "/v1/policies/bad", token=OPERATOR)[0] == 404


def test_a_project_reads_policies_but_may_not_write_them(served: tuple[str, App]) -> None:
    url, app = served
    before = _policy_end(app)
    for path, body, method in (
        ("/v1/policies/mine", PACKING, "PUT"),
        ("/v1/policy-assignments/a", {"policy": None}, "PUT"),
        ("/v1/policies/default", None, "DELETE"),
    ):
        status, problem = call(url, path, body, token=PROJECT, method=method)
        assert status == 403 and "operator" in problem["detail"], (path, problem)
    assert _policy_end(app) == before
    assert call(url, "/v1/policies", token=PROJECT)[0] == 200


def test_delete_refuses_the_default_and_what_does_not_exist(served: tuple[str, App]) -> None:
    url, _ = served
    assert call(url, "/v1/policies/default", PACKING, token=OPERATOR, method="PUT")[0] == 200
    assert call(url, "/v1/policies/default", token=OPERATOR, method="DELETE")[0] == 409
    assert call(url, "/v1/policies/nothing", token=OPERATOR, method="DELETE")[0] == 404
    assert call(url, "/v1/policies/gone", PACKING, token=OPERATOR, method="PUT")[0] == 200
    status, reply = call(url, "/v1/policies/gone", token=OPERATOR, method="DELETE")
    assert status == 200 and reply["version"] > 0
    assert call(url, "/v1/policies/gone", token=OPERATOR)[0] == 404
    body = {"policy": "gone"}
    assert call(url, "/v1/policy-assignments/b", body, token=OPERATOR, method="PUT")[0] == 409
    # back to the configuration's default, for the other tests' spreading
    assert call(url, "/v1/policies/default", {}, token=OPERATOR, method="PUT")[0] == 200


def test_policy_units_lists_every_unit_with_its_options_and_the_plugins_in_use(
    served: tuple[str, App],
) -> None:
    url, _ = served
    plugged = {
        "filters": {
            "enabled": ["ResourceFilter", "tests.plugins:RackFilter"],
            "tests.plugins:RackFilter": {"rack": "r2"},
        }
    }
    assert call(url, "/v1/policies/racks", plugged, token=OPERATOR, method="PUT")[0] == 200
    status, units = call(url, "/v1/policy-units", token=PROJECT)
    assert status == 200
    filters = {u["name"]: u for u in units["filters"]}
    assert filters["NumInstancesFilter"]["options"] == {
        "max_instances_per_host": {"required": False, "default": 50}
    }
    assert filters["ResourceFilter"]["description"]
    weighers = {u["name"]: u for u in units["weighers"]}
    assert weighers["IoOpsWeigher"]["options"]["multiplier"]["default"] == -1.0
    balance = {u["name"] for u in units["balance"]}
    assert {"evenly_distributed", "power_saving", "vm_evenly_distributed"} <= balance
    (plugin,) = units["plugins"]
    assert plugin["name"] == "tests.plugins:RackFilter" and plugin["kind"] == "filter"
    assert "rack" in plugin["options"]
    assert call(url, "/v1/policies/racks", token=OPERATOR, method="DELETE")[0] == 200


def test_explain_answers_for_a_past_request_from_the_log(served: tuple[str, App]) -> None:
    url, _ = served
    answer = _place(url, "explained")
    status, story = call(url, "/v1/explain/explained?provider=small", token=PROJECT)
    assert status == 200, story
    assert story["recorded"] == answer["providers"] and story["same"], story
    assert story["policy"] == answer["policy"] and story["provider"]["provider_id"] == "small"
    assert call(url, "/v1/explain/never-asked", token=PROJECT)[0] == 404


def test_a_policy_assigned_to_an_aggregate_places_the_requests_for_its_zone(
    served: tuple[str, App],
) -> None:
    url, _ = served
    zone = {"metadata": {"availability_zone": "b,c"}}  # Nova splits it on commas
    status, reply = call(url, "/v1/aggregates/zone-bc?wait=30", zone, token=OPERATOR, method="PUT")
    assert status == 200, reply
    joins = [
        {
            "type": "aggregate_member_added",
            "event_id": f"join-{pid}",
            "ts_ms": NOW,
            "partition_key": pid,
            "provider_id": pid,
            "aggregate_id": "zone-bc",
        }
        for pid in ("small", "big")
    ]
    assert call(url, "/v1/events?wait=30", joins, token=OPERATOR)[0] == 200
    assert call(url, "/v1/policies/zonal", PACKING, token=OPERATOR, method="PUT")[0] == 200
    body = {"policy": "zonal"}
    status, reply = call(url, "/v1/aggregates/zone-bc/policy", body, token=OPERATOR, method="PUT")
    assert status == 200, reply
    assert call(url, "/v1/policies", token=PROJECT)[1]["aggregates"] == {"zone-bc": "zonal"}

    def placed(rid: str, zone: str | None) -> dict[str, Any]:
        request = {"request_id": rid, "ts_ms": NOW, "project_id": "a", "resources": {"VCPU": 1}}
        if zone is not None:
            request["availability_zone"] = zone
        status, reply = call(url, "/v1/requests?wait=30", request, token=PROJECT)
        assert status == 200, reply
        answer: dict[str, Any] = reply["answers"][rid]
        return answer

    in_zone = placed("zonal-c", "c")
    assert in_zone["policy"].startswith("zonal@") and in_zone["reservations"][0][1] == "small"
    anywhere = placed("zoneless", None)
    assert anywhere["policy"].startswith("default@") and anywhere["reservations"][0][1] == "big"
    back = {"policy": None}
    assert call(url, "/v1/aggregates/zone-bc/policy", back, token=OPERATOR, method="PUT")[0] == 200
    assert placed("zonal-again", "b")["policy"].startswith("default@")
