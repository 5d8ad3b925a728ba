"""The gabbi fixtures Placement's API tests name, for a Berth server that the
runner (``bench.placement_gabbits``) has started empty for the file.

Upstream's ``APIFixture`` configures an in-process Placement and sets the
environment variables its YAML files read (``$ENVIRON['RP_UUID']`` and the
like); here the server is already running, so the fixture only sets those
variables, each a fresh UUID per file as upstream's are. The fixtures that
write into Placement's database before the tests (allocations, shared
storage, NUMA trees) are not rebuilt through the API yet: the runner skips
the files that need them and says so."""

from __future__ import annotations

import os
import uuid

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
