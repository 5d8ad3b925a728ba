"""Everything a request can say reaches the engine, live: submitted on the
requests topic, answered by the scheduler worker on a view built from
events. A hint that names nothing is refused at the edge."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from scheduling.config import SchedulerConfig
from schemas.events import Event
from schemas.requests import PlacementRequest, request_from_json
from tests.builders import describe, provider, traits
from tests.placements import placement_answers

NOW_MS = 10**12

LXD_EXAMPLE = """
def instance_placement(request, candidate_members):
        log_info("instance_placement started: ", request)

        if request.name == "foo":
                log_error("Invalid name supplied: ", request.name)
                return "Invalid name"

        for candidate in candidate_members:
                server = candidate["server_name"]
                log_info("targeting ", server, " for ", request.reason, " instance ", request.name)
                set_target(server)
                break

        return # No error
"""
"""The LXD seed's example, with a loop over the candidates' member names
added (the example stops at logging them)."""


def _cluster() -> list[Event]:
    qemu = {
        "hypervisor_type": "QEMU",
        "hypervisor_version": 8002000,
        "supported_instances": [["x86_64", "qemu", "hvm"]],
    }
    arm = {**qemu, "supported_instances": [["aarch64", "qemu", "hvm"]]}
    return [
        *provider("n1", ts=1, VCPU=8, MEMORY_MB=8192),
        *provider("n2", ts=1, VCPU=8, MEMORY_MB=8192),
        *provider("n3", ts=1, VCPU=8, MEMORY_MB=8192),
        describe("n1", ts=1, availability_zone="az1", host_ip="10.0.1.5", capabilities=qemu),
        describe("n2", ts=1, availability_zone="az1", host_ip="10.0.2.5", capabilities=arm),
        describe("n3", ts=1, availability_zone="az2", host_ip="10.0.1.9", capabilities=qemu),
        traits("n3", "HW_GPU", ts=1),
    ]


def _answers(
    tmp_path: Path, requests: list[PlacementRequest], config: SchedulerConfig
) -> dict[str, dict[str, Any]]:
    with App(Settings(data_dir=tmp_path / "data", partitions=2)) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        edge.publish(_cluster())
        writers = app.writers()
        catch_up_all(writers)
        edge.submit(requests)
        worker = app.scheduler_worker(config, lambda: catch_up_all(writers))
        while worker.step():
            pass
        return {str(a["request_id"]): a for a in placement_answers(app)}


def _request(rid: str, **fields: Any) -> PlacementRequest:
    return PlacementRequest(
        request_id=rid, ts_ms=NOW_MS, project_id="p", resources={"VCPU": 1}, **fields
    )


def _where(answer: dict[str, Any]) -> list[str]:
    return [pid for _, pid in answer["reservations"]]


def test_the_filters_read_what_the_request_says(tmp_path: Path) -> None:
    config = SchedulerConfig.from_mapping(
        {
            "filters": {
                "enabled": [
                    "ComputeFilter",
                    "ResourceFilter",
                    "AvailabilityZoneFilter",
                    "TraitsFilter",
                    "ComputeCapabilitiesFilter",
                    "ImagePropertiesFilter",
                    "SimpleCIDRAffinityFilter",
                    "JsonFilter",
                ]
            }
        }
    )
    answers = _answers(
        tmp_path,
        [
            _request("zone", availability_zone="az2"),
            _request("arm", image_properties={"hw_architecture": "aarch64"}),
            _request("near", build_near_host_ip="10.0.2.77", cidr="/24"),
            _request("gpu", required_traits=frozenset({"HW_GPU"})),
            _request("not-gpu-az1", forbidden_traits=frozenset({"HW_GPU"}), name="web-1"),
            _request("spec", extra_specs={"capabilities:hypervisor_type": "s== QEMU"}),
            _request("none", extra_specs={"capabilities:hypervisor_type": "s== Xen"}),
            _request("query", query=json.dumps(["=", "$host_ip", "10.0.1.9"])),
        ],
        config,
    )
    assert _where(answers["zone"]) == ["n3"]
    assert _where(answers["arm"]) == ["n2"]
    assert _where(answers["near"]) == ["n2"]
    assert _where(answers["gpu"]) == ["n3"]
    assert _where(answers["not-gpu-az1"])[0] in {"n1", "n2"}
    assert answers["spec"]["placed"] and not answers["none"]["placed"]
    assert "ComputeCapabilitiesFilter removed 3" in answers["none"]["reason"]
    assert _where(answers["query"]) == ["n3"]


def test_the_lxd_example_runs_with_its_names(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = SchedulerConfig.from_mapping({"scriptlet": {"source": LXD_EXAMPLE}})
    with caplog.at_level(logging.INFO, logger="berth.scriptlet"):
        answers = _answers(
            tmp_path,
            [_request("a", name="foo"), _request("b", name="web-2", reason="evacuation")],
            config,
        )
    assert not answers["a"]["placed"]
    assert answers["a"]["reason"].startswith("refused by the placement scriptlet: Invalid name")
    assert answers["b"]["placed"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("Invalid name supplied: foo" in m for m in messages)
    assert any(
        f"targeting {_where(answers['b'])[0]} for evacuation instance web-2" in m for m in messages
    )


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"cidr": "/24"}, "cidr without build_near_host_ip says nothing"),
        ({"build_near_host_ip": "10.0.0.300"}, "does not appear to be an IPv4 or IPv6 address"),
        ({"build_near_host_ip": "10.0.0.1", "cidr": "/40"}, "longer than an address"),
        ({"query": "[=, 1"}, "not JSON"),
        ({"query": '{"a": 1}'}, "a JsonFilter query is a list"),
        ({"group_policy": "affinity"}, "group_policy without group_id names no group"),
        ({"group_id": "g", "group_policy": "together"}, "group_policy"),
        ({"reason": "whim"}, "reason"),
        ({"scheduler_hints": {"group": "g"}}, "Extra inputs are not permitted"),
    ],
)
def test_a_request_that_names_nothing_is_refused(fields: dict[str, Any], why: str) -> None:
    body = {"request_id": "r", "ts_ms": 1, "project_id": "p", "resources": {"VCPU": 1}, **fields}
    with pytest.raises(ValidationError, match=why):
        request_from_json(json.dumps(body))


def test_reason_and_name_travel_through_the_log() -> None:
    body = {
        "request_id": "r",
        "ts_ms": 1,
        "project_id": "p",
        "resources": {"VCPU": 1},
        "name": "web-1",
        "reason": "relocation",
        "build_near_host_ip": "fd00::1",
        "cidr": "64",
    }
    request = request_from_json(json.dumps(body))
    assert isinstance(request, PlacementRequest)
    again = request_from_json(request.model_dump_json(exclude_defaults=True))
    assert again == request and again.reason == "relocation" and again.name == "web-1"
