"""The Placement API on the scale configuration: ``berth serve
--placement-api`` on the tansu Kafka broker the suite starts and on the real
PostgreSQL server, through real processes. Providers in a tree,
inventories, traits, allocations with provider and consumer generations, a
stale generation refused with nothing of it applied, several consumers at
once, candidates and usages; the same model after a restart, and decided
again alike by ``berth replay --verify`` from the Kafka log."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench.placement_gabbits import forked_berth_server
from tests.kafka_broker import running_tansu
from tests.postgres import scratch_database

LATEST = {"x-auth-token": "admin", "openstack-api-version": "placement latest"}
PARTITIONS = "3"
"""More than one partition: Placement's model lives in one of them (that of
the key ``placement``), the others stay Berth's own."""


@contextmanager
def _kafka_postgres(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A broker of this test's own (the topics are Berth's default names) and
    a fresh database; their URLs as ``berth`` takes them."""
    with running_tansu() as bootstrap, scratch_database() as url:
        yield f"kafka://{bootstrap}", url


@contextmanager
def _serving(data: Path, log: str, db: str) -> Iterator[httpx.Client]:
    options = ("--log", log, "--db", db, "--partitions", PARTITIONS)
    with (
        forked_berth_server(data, *options) as (host, port),
        httpx.Client(base_url=f"http://{host}:{port}", headers=LATEST, timeout=60) as api,
    ):
        yield api


def _ok(answer: httpx.Response, status: int = 200) -> Any:
    assert answer.status_code == status, (
        f"{answer.request.method} {answer.request.url}: {answer.text}"
    )
    return answer.json() if answer.content else None


def _code(answer: httpx.Response) -> str:
    return str(answer.json()["errors"][0]["code"])


def _inventory(api: httpx.Client, rp: str, generation: int, **totals: int) -> dict[str, Any]:
    body = {
        "resource_provider_generation": generation,
        "inventories": {rc: {"total": total} for rc, total in totals.items()},
    }
    return dict(_ok(api.put(f"/resource_providers/{rp}/inventories", json=body)))


def _allocation(rp: str, generation: int | None, **resources: int) -> dict[str, Any]:
    return {
        "allocations": {rp: {"resources": resources}},
        "project_id": "p1",
        "user_id": "u1",
        "consumer_generation": generation,
        "consumer_type": "INSTANCE",
    }


def test_the_placement_api_on_kafka_and_postgresql(tmp_path: Path) -> None:
    root, child, other = (str(uuid.uuid4()) for _ in range(3))
    vm1, vm2, vm3 = (str(uuid.uuid4()) for _ in range(3))
    data = tmp_path / "data"
    with _kafka_postgres(tmp_path) as (log, db):
        with _serving(data, log, db) as api:
            # a tree: a compute node and its NUMA child; and a second node
            _ok(api.post("/resource_providers", json={"name": "cn1", "uuid": root}))
            made = _ok(
                api.post(
                    "/resource_providers",
                    json={"name": "cn1-numa0", "uuid": child, "parent_provider_uuid": root},
                )
            )
            assert (made["root_provider_uuid"], made["parent_provider_uuid"]) == (root, root)
            _ok(api.post("/resource_providers", json={"name": "cn2", "uuid": other}))
            duplicate = api.post("/resource_providers", json={"name": "cn2"})
            assert duplicate.status_code == 409, duplicate.text
            assert _code(duplicate) == "placement.duplicate_name"
            tree = _ok(api.get("/resource_providers", params={"in_tree": child}))
            assert sorted(p["uuid"] for p in tree["resource_providers"]) == sorted([root, child])

            assert _inventory(api, root, 0, DISK_GB=100)["resource_provider_generation"] == 1
            assert (
                _inventory(api, child, 0, VCPU=4, MEMORY_MB=2048)["resource_provider_generation"]
                == 1
            )
            assert (
                _inventory(api, other, 0, VCPU=8, MEMORY_MB=4096, DISK_GB=100)[
                    "resource_provider_generation"
                ]
                == 1
            )
            # a stale provider generation is refused, and nothing of it applied
            stale = api.put(
                f"/resource_providers/{child}/inventories",
                json={"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 64}}},
            )
            assert stale.status_code == 409, stale.text
            assert _code(stale) == "placement.concurrent_update"
            shown = _ok(api.get(f"/resource_providers/{child}/inventories"))
            assert (
                shown["resource_provider_generation"],
                shown["inventories"]["VCPU"]["total"],
            ) == (
                1,
                4,
            )
            _ok(api.put("/traits/CUSTOM_FAST"), 201)
            traits = {"resource_provider_generation": 1, "traits": ["CUSTOM_FAST"]}
            _ok(api.put(f"/resource_providers/{other}/traits", json=traits))

            # allocations with consumer generations: new (null), then current
            assert (
                api.put(f"/allocations/{vm1}", json=_allocation(child, None, VCPU=3)).status_code
                == 204
            )
            over = api.put(f"/allocations/{vm2}", json=_allocation(child, None, VCPU=2))
            assert over.status_code == 409, over.text
            assert "exceed the capacity" in over.json()["errors"][0]["detail"]
            stale_consumer = api.put(f"/allocations/{vm1}", json=_allocation(child, 0, VCPU=1))
            assert stale_consumer.status_code == 409
            assert _code(stale_consumer) == "placement.concurrent_update"
            assert _ok(api.get(f"/allocations/{vm1}"))["consumer_generation"] == 1
            # several consumers at once: vm1 moves to the other node, vm2 lands on the child
            both = {
                vm1: {**_allocation(other, 1, VCPU=3, DISK_GB=10)},
                vm2: {**_allocation(child, None, VCPU=4)},
            }
            _ok(api.post("/allocations", json=both), 204)
            refused = {
                vm2: _allocation(child, 1, VCPU=1),
                vm3: _allocation(other, None, VCPU=6),  # 3 of 8 taken by vm1
            }
            assert api.post("/allocations", json=refused).status_code == 409
            assert _ok(api.get(f"/allocations/{vm2}"))["allocations"][child]["resources"] == {
                "VCPU": 4
            }
            assert _ok(api.get(f"/allocations/{vm3}"))["allocations"] == {}

            candidates = _ok(
                api.get(
                    "/allocation_candidates",
                    params={"resources": "VCPU:2,DISK_GB:5", "required": "CUSTOM_FAST"},
                )
            )
            assert [list(r["allocations"]) for r in candidates["allocation_requests"]] == [[other]]
            assert candidates["provider_summaries"][other]["resources"]["VCPU"] == {
                "capacity": 8,
                "used": 3,
            }
            none_fit = _ok(api.get("/allocation_candidates", params={"resources": "VCPU:6"}))
            assert none_fit["allocation_requests"] == []
            usages = _ok(api.get("/usages", params={"project_id": "p1"}))["usages"]
            before = {
                "child": _ok(api.get(f"/resource_providers/{child}")),
                "other": _ok(api.get(f"/resource_providers/{other}/usages")),
                "vm1": _ok(api.get(f"/allocations/{vm1}")),
            }
            assert usages["INSTANCE"] == {"VCPU": 7, "DISK_GB": 10, "consumer_count": 2}
            assert before["other"]["usages"] == {"VCPU": 3, "MEMORY_MB": 0, "DISK_GB": 10}

        # a restart resumes from the view on PostgreSQL and the log on Kafka
        with _serving(data, log, db) as api:
            assert _ok(api.get(f"/resource_providers/{child}")) == before["child"]
            assert _ok(api.get(f"/resource_providers/{other}/usages")) == before["other"]
            assert _ok(api.get(f"/allocations/{vm1}")) == before["vm1"]
            assert (
                api.put(f"/allocations/{vm1}", json=_allocation(other, 0, VCPU=1)).status_code
                == 409
            )
            assert (
                api.put(f"/allocations/{vm1}", json=_allocation(other, 2, VCPU=1)).status_code
                == 204
            )
            assert _ok(api.get(f"/resource_providers/{other}/usages"))["usages"]["VCPU"] == 1

        backend = ("--data-dir", str(data), "--log", log, "--db")
        with scratch_database() as fresh:
            replay = subprocess.run(
                [sys.executable, "-m", "berth.cli", "replay", "--verify", *backend, fresh],
                capture_output=True,
                text=True,
                timeout=300,
            )
        assert replay.returncode == 0, replay.stdout + replay.stderr
