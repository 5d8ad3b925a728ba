"""The gabbi fixtures Placement's API tests name, for a Berth server that the
runner (``bench.placement_gabbits``) has started empty for the file.

Upstream's ``APIFixture`` configures an in-process Placement and sets the
environment variables its YAML files read (``$ENVIRON['RP_UUID']`` and the
like); here the server is already running, so the fixture only sets those
variables, each a fresh UUID per file as upstream's are. The fixtures that
write into Placement's database before the tests (allocations, shared
storage, NUMA trees) are rebuilt through the API, with the same data, the
same environment variables and the same resulting generations, as far as
they are here (``AllocationFixture``); the runner skips the files that
need the others and says so."""

from __future__ import annotations

import os
import uuid
from typing import Any

import httpx
from gabbi.fixture import GabbiFixture

_UUIDS = (
    "RP_UUID",
    "RP_NAME",
    "RP_UUID1",
    "RP_NAME1",
    "RP_UUID2",
    "RP_NAME2",
    "PROJECT_ID",
    "ADMIN_PROJECT_ID",
    "SERVICE_PROJECT_ID",
    "USER_ID",
    "PROJECT_ID_ALT",
    "USER_ID_ALT",
    "INSTANCE_UUID",
    "MIGRATION_UUID",
    "CONSUMER_UUID",
    "PARENT_PROVIDER_UUID",
    "ALT_PARENT_PROVIDER_UUID",
)


class APIFixture(GabbiFixture):  # type: ignore[misc]
    """The environment of upstream's basic fixture: fresh ids, three custom
    resource class names."""

    def start_fixture(self) -> None:
        for name in _UUIDS:
            os.environ[name] = str(uuid.uuid4())
        os.environ["CUSTOM_RES_CLASS"] = "CUSTOM_IRON_NFV"
        os.environ["CUSTOM_RES_CLASS1"] = "CUSTOM_IRON_NFV1"
        os.environ["CUSTOM_RES_CLASS2"] = "CUSTOM_IRON_NFV2"

    def stop_fixture(self) -> None:
        pass


SERVER: list[str] = []
"""The base URL of the server the runner started for the current file."""


def _api() -> httpx.Client:
    return httpx.Client(
        base_url=SERVER[0],
        headers={"x-auth-token": "admin", "openstack-api-version": "placement latest"},
        timeout=30,
    )


def _ok(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        raise RuntimeError(f"{response.request.method} {response.request.url}: {response.text}")
    return response


def create_provider(api: httpx.Client, name: str, uuid_: str, parent: str | None = None) -> str:
    body: dict[str, Any] = {"name": name, "uuid": uuid_}
    if parent is not None:
        body["parent_provider_uuid"] = parent
    _ok(api.post("/resource_providers", json=body))
    return uuid_


def add_inventory(api: httpx.Client, rp: str, rc: str, total: int, **fields: Any) -> None:
    """One class more, as upstream's helper adds it: its own write, its own
    generation; max_unit the total unless given."""
    if rc.startswith("CUSTOM_"):
        _ok(api.put(f"/resource_classes/{rc}"))
    fields.setdefault("max_unit", total)
    _ok(
        api.post(
            f"/resource_providers/{rp}/inventories",
            json={"resource_class": rc, "total": total, **fields},
        )
    )


def set_allocation(
    api: httpx.Client, rp: str, consumer: str, project: str, user: str, used: dict[str, int]
) -> None:
    """A new consumer's allocation on one provider (consumer generation null)."""
    body = {
        "allocations": {rp: {"resources": used}},
        "project_id": project,
        "user_id": user,
        "consumer_generation": None,
    }
    # 1.37: a consumer of no type, as upstream's fixture makes them
    headers = {"openstack-api-version": "placement 1.37"}
    _ok(api.put(f"/allocations/{consumer}", json=body, headers=headers))


class AllocationFixture(APIFixture):
    """Upstream's allocation fixture rebuilt through the API, with its data
    and its resulting generations: a provider with DISK_GB 2048 (steps and
    units of 10, at most 1000) and VCPU 10, three consumers on it (DISK_GB
    1000; VCPU 6; and another user's DISK_GB 20 + VCPU 1)."""

    def start_fixture(self) -> None:
        super().start_fixture()
        os.environ["ALT_USER_ID"] = str(uuid.uuid4())
        project, user = os.environ["PROJECT_ID"], os.environ["USER_ID"]
        with _api() as api:
            rp = create_provider(api, os.environ["RP_NAME"], os.environ["RP_UUID"])
            add_inventory(api, rp, "DISK_GB", 2048, step_size=10, min_unit=10, max_unit=1000)
            add_inventory(api, rp, "VCPU", 10, max_unit=10)
            os.environ["CONSUMER_0"] = str(uuid.uuid4())
            set_allocation(api, rp, os.environ["CONSUMER_0"], project, user, {"DISK_GB": 1000})
            os.environ["CONSUMER_ID"] = str(uuid.uuid4())
            set_allocation(api, rp, os.environ["CONSUMER_ID"], project, user, {"VCPU": 6})
            os.environ["ALT_CONSUMER_ID"] = str(uuid.uuid4())
            alt = os.environ["ALT_USER_ID"]
            used = {"DISK_GB": 20, "VCPU": 1}
            set_allocation(api, rp, os.environ["ALT_CONSUMER_ID"], project, alt, used)
        os.environ["ALT_RP_UUID"] = str(uuid.uuid4())
        os.environ["ALT_RP_NAME"] = str(uuid.uuid4())


def set_aggregates(api: httpx.Client, rp: str, *aggregates: str) -> None:
    """As upstream's helper: the provider's generation does not move (1.18)."""
    headers = {"openstack-api-version": "placement 1.18"}
    _ok(api.put(f"/resource_providers/{rp}/aggregates", json=list(aggregates), headers=headers))


def set_traits(api: httpx.Client, rp: str, *traits: str) -> None:
    for trait in traits:
        if trait.startswith("CUSTOM_"):
            _ok(api.put(f"/traits/{trait}"))
    generation = _ok(api.get(f"/resource_providers/{rp}")).json()["generation"]
    body = {"traits": list(traits), "resource_provider_generation": generation}
    _ok(api.put(f"/resource_providers/{rp}/traits", json=body))


class NonSharedStorageFixture(APIFixture):
    """Upstream's three compute nodes with local storage (VCPU 24, MEMORY_MB
    128 GiB, DISK_GB 2000 each), rebuilt through the API; three aggregate
    ids for the tests to use."""

    def start_fixture(self) -> None:
        super().start_fixture()
        for name in ("AGGA_UUID", "AGGB_UUID", "AGGC_UUID"):
            os.environ[name] = str(uuid.uuid4())
        with _api() as api:
            for n in (1, 2, 3):
                cn = create_provider(api, f"cn{n}", str(uuid.uuid4()))
                os.environ[f"CN{n}_UUID"] = cn
                add_inventory(api, cn, "VCPU", 24)
                add_inventory(api, cn, "MEMORY_MB", 128 * 1024)
                add_inventory(api, cn, "DISK_GB", 2000)


class SharedStorageFixture(APIFixture):
    """Upstream's two compute nodes (one with local disk), each with two NUMA
    children and a PF under each, and two sharing storage providers, all in
    one aggregate; rebuilt through the API with its data and variables."""

    def start_fixture(self) -> None:
        super().start_fixture()
        agg = os.environ["AGG_UUID"] = str(uuid.uuid4())
        with _api() as api:
            made: dict[str, str] = {}
            for name in ("cn1", "cn2", "ss", "ss2"):
                made[name] = create_provider(api, name, str(uuid.uuid4()))
                set_aggregates(api, made[name], agg)
            for numa, parent in (
                ("numa1_1", "cn1"),
                ("numa1_2", "cn1"),
                ("numa2_1", "cn2"),
                ("numa2_2", "cn2"),
            ):
                made[numa] = create_provider(api, numa, str(uuid.uuid4()), made[parent])
            for pf, parent in (
                ("pf1_1", "numa1_1"),
                ("pf1_2", "numa1_2"),
                ("pf2_1", "numa2_1"),
                ("pf2_2", "numa2_2"),
            ):
                made[pf] = create_provider(api, pf, str(uuid.uuid4()), made[parent])
            for name, uuid_ in made.items():
                os.environ[f"{name.upper()}_UUID"] = uuid_
            for cn in ("cn1", "cn2"):
                add_inventory(api, made[cn], "VCPU", 24, allocation_ratio=16.0)
                add_inventory(api, made[cn], "MEMORY_MB", 128 * 1024, allocation_ratio=1.5)
            set_traits(api, made["cn1"], "HW_CPU_X86_SSE", "HW_CPU_X86_SSE2")
            add_inventory(api, made["cn2"], "DISK_GB", 2000, reserved=100, allocation_ratio=1.0)
            for shared in ("ss", "ss2"):
                add_inventory(api, made[shared], "DISK_GB", 2000, reserved=100)
                set_traits(api, made[shared], "MISC_SHARES_VIA_AGGREGATE")
            for pf in ("pf1_1", "pf1_2", "pf2_1", "pf2_2"):
                add_inventory(api, made[pf], "SRIOV_NET_VF", 8, allocation_ratio=1.0)
