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
