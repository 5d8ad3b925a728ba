"""A real client: the OpenStack client (``openstack``) with its placement
plugin (``osc-placement``) drives a real ``berth serve --placement-api``
process as an operator would, and its output is what Placement's would be.

The client authenticates with keystoneauth's ``admin_token`` plugin: a fixed
endpoint and the noauth2 token ``admin``, the configuration a Nova without
Keystone uses (docs/placement.md). ``--os-auth-type none`` is no substitute:
it still sends a token that is not ``admin`` and so is refused by policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from bench.placement_gabbits import forked_berth_server

AGGREGATE = "6a1e3c2b-7d4f-4e1a-9b2c-0f1e2d3c4b5a"


class Openstack:
    """The ``openstack`` command pointed at one Berth, at one microversion."""

    def __init__(self, address: tuple[str, int], version: str = "1.39") -> None:
        host, port = address
        self.base = [
            sys.executable,
            "-m",
            "openstackclient.shell",
            "--os-auth-type",
            "admin_token",
            "--os-endpoint",
            f"http://{host}:{port}",
            "--os-token",
            "admin",
            "--os-placement-api-version",
            version,
        ]
        # the caller's OS_* settings (a cloud, a region) must not leak in
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.base, *args], capture_output=True, text=True, env=self.env, timeout=120
        )

    def json(self, *args: str) -> Any:
        done = self.run(*args, "-f", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def test_providers_inventories_traits_aggregates(tmp_path: Path) -> None:
    with forked_berth_server(tmp_path / "data") as address:
        osc = Openstack(address)
        made = osc.json("resource", "provider", "create", "cn1")
        rp = made["uuid"]
        assert made["name"] == "cn1" and made["generation"] == 0
        assert made["root_provider_uuid"] == rp and made["parent_provider_uuid"] is None
        listed = osc.json("resource", "provider", "list")
        assert [(p["uuid"], p["name"]) for p in listed] == [(rp, "cn1")]
        assert osc.json("resource", "provider", "show", rp) == made

        osc.json(
            "resource", "provider", "inventory", "set", rp,
            "--resource", "VCPU=8", "--resource", "VCPU:allocation_ratio=2.0",
            "--resource", "MEMORY_MB=4096",
        )  # fmt: skip
        inventories = {i["resource_class"]: i for i in osc.json(
            "resource", "provider", "inventory", "list", rp
        )}  # fmt: skip
        assert inventories["VCPU"]["total"] == 8
        assert inventories["VCPU"]["allocation_ratio"] == 2.0
        assert inventories["MEMORY_MB"]["total"] == 4096
        assert all(i["used"] == 0 for i in inventories.values())

        assert osc.run("trait", "create", "CUSTOM_GOLD").returncode == 0
        traits = osc.json(
            "resource", "provider", "trait", "set", rp,
            "--trait", "CUSTOM_GOLD", "--trait", "HW_CPU_X86_AVX",
        )  # fmt: skip
        assert sorted(t["name"] for t in traits) == ["CUSTOM_GOLD", "HW_CPU_X86_AVX"]

        # from 1.19 an aggregate write names the provider's generation: the
        # inventories and the traits made it 2; a stale one is refused (409)
        stale = osc.run(
            "resource", "provider", "aggregate", "set", rp,
            "--aggregate", AGGREGATE, "--generation", "1",
        )  # fmt: skip
        assert stale.returncode != 0 and "409" in stale.stderr, stale.stderr
        aggregates = osc.json(
            "resource", "provider", "aggregate", "set", rp,
            "--aggregate", AGGREGATE, "--generation", "2",
        )  # fmt: skip
        assert aggregates == [{"uuid": AGGREGATE}]
        assert osc.json("resource", "provider", "show", rp)["generation"] == 3


def test_allocations_candidates_and_usages(tmp_path: Path) -> None:
    with forked_berth_server(tmp_path / "data") as address:
        osc = Openstack(address)
        rp = osc.json("resource", "provider", "create", "cn1")["uuid"]
        osc.json(
            "resource", "provider", "inventory", "set", rp,
            "--resource", "VCPU=4", "--resource", "MEMORY_MB=2048",
        )  # fmt: skip
        consumer = str(uuid.uuid4())
        allocation = _allocate(osc, consumer, rp, "VCPU=3,MEMORY_MB=512")
        assert osc.json("resource", "provider", "allocation", "show", consumer) == allocation
        assert allocation == [
            {
                "resource_provider": rp,
                "generation": 2,
                "resources": {"VCPU": 3, "MEMORY_MB": 512},
                "project_id": "p1",
                "user_id": "u1",
                "consumer_type": "INSTANCE",
            }
        ]

        # one VCPU is left: a second consumer asking for two is refused
        refused = osc.run(*_allocation_args(str(uuid.uuid4()), rp, "VCPU=2"))
        assert refused.returncode != 0 and "409" in refused.stderr, refused.stderr
        assert "exceed the capacity" in refused.stderr

        candidates = osc.json("allocation", "candidate", "list", "--resource", "VCPU=1")
        assert [(c["resource provider"], c["allocation"]) for c in candidates] == [(rp, "VCPU=1")]
        assert candidates[0]["inventory used/capacity"] == "MEMORY_MB=512/2048,VCPU=3/4"
        assert osc.json("allocation", "candidate", "list", "--resource", "VCPU=2") == []

        usages = osc.json("resource", "provider", "usage", "show", rp)
        assert {u["resource_class"]: u["usage"] for u in usages} == {"VCPU": 3, "MEMORY_MB": 512}
        project = osc.json("resource", "usage", "show", "p1")
        assert project == [
            {
                "resource_class": "INSTANCE",
                "usage": {"consumer_count": 1, "VCPU": 3, "MEMORY_MB": 512},
            }
        ]

        assert osc.run("resource", "provider", "allocation", "delete", consumer).returncode == 0
        assert osc.json("resource", "provider", "allocation", "show", consumer) == []


def _allocation_args(consumer: str, rp: str, resources: str) -> list[str]:
    return [
        "resource", "provider", "allocation", "set", consumer,
        "--allocation", f"rp={rp},{resources}",
        "--project-id", "p1", "--user-id", "u1", "--consumer-type", "INSTANCE",
    ]  # fmt: skip


def _allocate(osc: Openstack, consumer: str, rp: str, resources: str) -> Any:
    return osc.json(*_allocation_args(consumer, rp, resources))
