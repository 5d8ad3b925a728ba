"""The Placement API end to end, through real ``berth serve`` processes:
its model survives a restart and is decided again alike by replay;
generations refuse a stale write and nothing of it is applied; Berth's own
claims and Placement's allocations count against one capacity."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.placement_gabbits import forked_berth_server

LATEST = {"x-auth-token": "admin", "openstack-api-version": "placement latest"}


def _client(address: tuple[str, int]) -> httpx.Client:
    host, port = address
    return httpx.Client(base_url=f"http://{host}:{port}", headers=LATEST, timeout=30)


def _provider(api: httpx.Client, vcpus: int) -> str:
    rp = str(uuid.uuid4())
    assert (
        api.post("/resource_providers", json={"name": f"node-{rp}", "uuid": rp}).status_code == 200
    )
    inventories = {"VCPU": {"total": vcpus}, "MEMORY_MB": {"total": 4096, "max_unit": 2048}}
    put = api.put(
        f"/resource_providers/{rp}/inventories",
        json={"resource_provider_generation": 0, "inventories": inventories},
    )
    assert put.status_code == 200, put.text
    return rp


def _allocate(
    api: httpx.Client, consumer: str, rp: str, vcpus: int, generation: Any
) -> httpx.Response:
    body = {
        "allocations": {rp: {"resources": {"VCPU": vcpus}}},
        "project_id": "p1",
        "user_id": "u1",
        "consumer_generation": generation,
        "consumer_type": "INSTANCE",
    }
    return api.put(f"/allocations/{consumer}", json=body)


def test_the_model_survives_a_restart_and_replays_alike(tmp_path: Path) -> None:
    data = tmp_path / "data"
    consumer = str(uuid.uuid4())
    with forked_berth_server(data) as address, _client(address) as api:
        rp = _provider(api, vcpus=8)
        assert api.put("/traits/CUSTOM_GOLD").status_code == 201
        traits = api.put(
            f"/resource_providers/{rp}/traits",
            json={"resource_provider_generation": 1, "traits": ["CUSTOM_GOLD", "HW_CPU_X86_AVX"]},
        )
        assert traits.status_code == 200, traits.text
        assert _allocate(api, consumer, rp, 3, None).status_code == 204
        before = api.get(f"/resource_providers/{rp}").json()
        assert before["generation"] == 3  # inventories, traits, the allocation
    with forked_berth_server(data) as address, _client(address) as api:
        assert api.get(f"/resource_providers/{rp}").json() == before
        assert api.get(f"/resource_providers/{rp}/usages").json()["usages"] == {
            "VCPU": 3,
            "MEMORY_MB": 0,
        }
        assert api.get(f"/resource_providers/{rp}/traits").json()["traits"] == [
            "CUSTOM_GOLD",
            "HW_CPU_X86_AVX",
        ]
        mine = api.get(f"/allocations/{consumer}").json()
        assert mine["consumer_generation"] == 1
        assert mine["allocations"][rp]["resources"] == {"VCPU": 3}
        stale = _allocate(api, consumer, rp, 4, 0)
        assert stale.status_code == 409
        assert stale.json()["errors"][0]["code"] == "placement.concurrent_update"
        assert _allocate(api, consumer, rp, 4, 1).status_code == 204
        assert api.get(f"/resource_providers/{rp}/usages").json()["usages"]["VCPU"] == 4
    replay = subprocess.run(
        [sys.executable, "-m", "berth.cli", "replay", "--data-dir", str(data), "--verify"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr


def test_a_stale_generation_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    with forked_berth_server(tmp_path / "data") as address, _client(address) as api:
        rp = _provider(api, vcpus=4)
        stale = api.put(
            f"/resource_providers/{rp}/inventories",
            json={"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 64}}},
        )
        assert stale.status_code == 409
        assert stale.json()["errors"][0]["code"] == "placement.concurrent_update"
        shown = api.get(f"/resource_providers/{rp}/inventories").json()
        assert shown["resource_provider_generation"] == 1
        assert shown["inventories"]["VCPU"]["total"] == 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_berth_claims_and_placement_allocations_share_one_capacity(tmp_path: Path) -> None:
    """On one partition a Berth claim names the Placement provider itself:
    what it holds is what a Placement allocation can no longer get."""
    port = _free_port()
    extra = ("--partitions", "1", "--api", f"127.0.0.1:{port}")
    with forked_berth_server(tmp_path / "data", *extra) as address, _client(address) as api:
        rp = _provider(api, vcpus=4)
        assert _candidates(api, "resources=VCPU:2") == [rp]
        claim = {
            "type": "claim",
            "event_id": "claim-1",
            "ts_ms": int(time.time() * 1000),
            "partition_key": rp,
            "reservation_id": "vm-1",
            "consumer_id": "vm-1",
            "project_id": "berth",
            "items": [{"provider_id": rp, "resources": {"VCPU": 3}}],
        }
        held = httpx.post(f"http://127.0.0.1:{port}/v1/events?wait=30", json=claim, timeout=30)
        assert held.status_code == 200, held.text
        assert held.json()["decisions"]["claim-1"][-1]["kind"] == "accepted"
        over = _allocate(api, str(uuid.uuid4()), rp, 2, None)
        assert over.status_code == 409
        assert "exceed the capacity" in over.json()["errors"][0]["detail"]
        # answered once the view holds the refusal, and so the claim before it
        assert _candidates(api, "resources=VCPU:2") == []
        assert _candidates(api, "resources=VCPU:1") == [rp]
        assert _allocate(api, str(uuid.uuid4()), rp, 1, None).status_code == 204
        assert api.get(f"/resource_providers/{rp}/usages").json()["usages"]["VCPU"] == 4


def _candidates(api: httpx.Client, query: str) -> list[str]:
    """The providers of each allocation request, in the order answered."""
    answer = api.get(f"/allocation_candidates?{query}")
    assert answer.status_code == 200, answer.text
    return [uuid for r in answer.json()["allocation_requests"] for uuid in sorted(r["allocations"])]


def test_a_provider_deleted_is_not_taken_for_one_that_exists(tmp_path: Path) -> None:
    # the API remembers the providers a write named once found, until a
    # provider is deleted: a write naming it afterwards hears it is gone
    with forked_berth_server(tmp_path / "data") as address, _client(address) as api:
        rp, other = _provider(api, vcpus=8), _provider(api, vcpus=8)
        consumer = str(uuid.uuid4())
        assert _allocate(api, consumer, rp, 1, None).status_code == 204
        assert _allocate(api, str(uuid.uuid4()), other, 1, None).status_code == 204
        assert api.delete(f"/allocations/{consumer}").status_code == 204
        assert api.delete(f"/resource_providers/{rp}").status_code == 204
        gone = _allocate(api, str(uuid.uuid4()), rp, 1, None)
        assert gone.status_code == 400, gone.text
        detail = gone.json()["errors"][0]["detail"]
        # worded by the API's own check, as Placement words it, not the writer's refusal
        assert detail.endswith(
            f"\n\n Allocation for resource provider '{rp}' that does not exist.  "
        )
        # the other is found again, read from the view once more
        assert _allocate(api, str(uuid.uuid4()), other, 1, None).status_code == 204


def test_candidates_follow_every_write(tmp_path: Path) -> None:
    """The index candidates are found from is kept up to date, not rebuilt:
    each write (an allocation, traits, a new provider, a deletion) shows in
    the next answer, in creation order, with ``limit``."""
    with forked_berth_server(tmp_path / "data") as address, _client(address) as api:
        first, second = _provider(api, vcpus=4), _provider(api, vcpus=4)
        assert _candidates(api, "resources=VCPU:3") == [first, second]
        assert _candidates(api, "resources=VCPU:3&limit=1") == [first]
        assert _allocate(api, str(uuid.uuid4()), first, 2, None).status_code == 204
        assert _candidates(api, "resources=VCPU:3") == [second]
        assert _candidates(api, "resources=VCPU:2") == [first, second]
        traits = api.put(
            f"/resource_providers/{second}/traits",
            json={"resource_provider_generation": 1, "traits": ["HW_CPU_X86_AVX2"]},
        )
        assert traits.status_code == 200, traits.text
        assert _candidates(api, "resources=VCPU:1&required=HW_CPU_X86_AVX2") == [second]
        assert _candidates(api, "resources=VCPU:1&required=!HW_CPU_X86_AVX2") == [first]
        third = _provider(api, vcpus=8)
        assert _candidates(api, "resources=VCPU:5") == [third]
        assert api.delete(f"/resource_providers/{second}").status_code == 204
        assert _candidates(api, "resources=VCPU:1") == [first, third]
        assert _candidates(api, "resources=VCPU:1&limit=1") == [first]


def test_concurrent_writers_never_overcommit(tmp_path: Path) -> None:
    """Eight clients race new consumers onto five 4-VCPU providers (20
    slots, 48 attempts): every 204 is counted once, no provider holds more
    than it has, and every refusal is Placement's capacity conflict."""
    from concurrent.futures import ThreadPoolExecutor

    with forked_berth_server(tmp_path / "data") as address, _client(address) as api:
        rps = [_provider(api, vcpus=4) for _ in range(5)]

        def client(n: int) -> list[int]:
            with _client(address) as mine:
                return [
                    _allocate(mine, str(uuid.uuid4()), rps[(n + i) % 5], 1, None).status_code
                    for i in range(6)
                ]

        with ThreadPoolExecutor(8) as pool:
            statuses = [s for found in pool.map(client, range(8)) for s in found]
        assert set(statuses) <= {204, 409}
        used = [api.get(f"/resource_providers/{rp}/usages").json()["usages"]["VCPU"] for rp in rps]
        assert all(u <= 4 for u in used)
        assert sum(used) == statuses.count(204) == 20


def test_each_client_reads_its_own_writes_at_once(tmp_path: Path) -> None:
    """A write is answered once its writer decided it, before the view
    commits it: a read sent right after its answer (its consumer's
    allocations, its provider's usages) still finds it, for eight clients
    writing at once, over and over."""
    from concurrent.futures import ThreadPoolExecutor

    with forked_berth_server(tmp_path / "data") as address, _client(address) as api:
        rps = [_provider(api, vcpus=64) for _ in range(4)]

        def client(n: int) -> list[str]:
            wrong = []
            with _client(address) as mine:
                for i in range(12):
                    consumer, rp = str(uuid.uuid4()), rps[(n + i) % 4]
                    before = mine.get(f"/resource_providers/{rp}/usages").json()["usages"]
                    assert _allocate(mine, consumer, rp, 1, None).status_code == 204
                    held = mine.get(f"/allocations/{consumer}").json()["allocations"]
                    if held != {
                        rp: {
                            "generation": held.get(rp, {}).get("generation"),
                            "resources": {"VCPU": 1},
                        }
                    }:
                        wrong.append(f"{consumer}: {held}")
                    after = mine.get(f"/resource_providers/{rp}/usages").json()["usages"]
                    if after["VCPU"] < before["VCPU"] + 1:  # others may add theirs too
                        wrong.append(f"{rp}: {before} then {after}")
            return wrong

        with ThreadPoolExecutor(8) as pool:
            wrong = [w for found in pool.map(client, range(8)) for w in found]
        assert wrong == []
        used = [api.get(f"/resource_providers/{rp}/usages").json()["usages"] for rp in rps]
        assert sum(u["VCPU"] for u in used) == 8 * 12


def test_on_postgresql_the_model_survives_a_restart(tmp_path: Path) -> None:
    """The view on PostgreSQL: the same model back after a restart, and its
    generations still guarding writes."""
    from tests.postgres import scratch_database

    consumer = str(uuid.uuid4())
    with scratch_database() as url:
        data = tmp_path / "data"
        with forked_berth_server(data, "--db", url) as address, _client(address) as api:
            rp = _provider(api, vcpus=8)
            assert _allocate(api, consumer, rp, 5, None).status_code == 204
            renamed = api.put(f"/resource_providers/{rp}", json={"name": "renamed"})
            assert renamed.status_code == 200, renamed.text
            before = api.get(f"/resource_providers/{rp}").json()
        with forked_berth_server(data, "--db", url) as address, _client(address) as api:
            assert api.get(f"/resource_providers/{rp}").json() == before
            assert api.get(f"/resource_providers/{rp}/usages").json()["usages"]["VCPU"] == 5
            assert _allocate(api, consumer, rp, 4, 0).status_code == 409
            assert _allocate(api, consumer, rp, 4, 1).status_code == 204
            assert api.get(f"/resource_providers/{rp}/usages").json()["usages"]["VCPU"] == 4
