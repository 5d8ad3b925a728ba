"""The gabbi fixtures Placement's API tests name, for a Berth server that the
runner (``bench.placement_gabbits``) has started empty for the file.

Upstream's ``APIFixture`` configures an in-process Placement and sets the
environment variables its YAML files read (``$ENVIRON['RP_UUID']`` and the
like); here the server is already running, so the fixture only sets those
variables, each a fresh UUID per file as upstream's are. The fixtures that
write into Placement's database before the tests (allocations, shared
and non-shared storage, NUMA aggregates, NUMA and network trees and their
deeper variant, granular, Neutron's multi-segment QoS) are rebuilt through
the API, with the same data, the same environment variables and the same
resulting generations. The runner skips the files that need a server
option (policy, CORS) Berth's runner does not set, and says so."""

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


def _provider(api: httpx.Client, name: str, *aggregates: str, parent: str | None = None) -> str:
    """As upstream's ``create_provider``: a fresh uuid, then its aggregates
    set without moving its generation."""
    uuid_ = create_provider(api, name, str(uuid.uuid4()), parent)
    if aggregates:
        set_aggregates(api, uuid_, *aggregates)
    return uuid_


class NUMAAggregateFixture(APIFixture):
    """Upstream's two compute nodes with no inventory of their own, each with
    two NUMA children of VCPU, and two sharing storage providers: ss1 in
    aggregate A with both compute nodes, ss2 in aggregate C with cn1's
    first NUMA node; cn2 also in aggregate B."""

    def start_fixture(self) -> None:
        super().start_fixture()
        agg_a, agg_b, agg_c = (str(uuid.uuid4()) for _ in range(3))
        with _api() as api:
            made = {
                "cn1": _provider(api, "cn1", agg_a),
                "cn2": _provider(api, "cn2", agg_a, agg_b),
                "ss1": _provider(api, "ss1", agg_a),
                "ss2": _provider(api, "ss2", agg_c),
            }
            made["numa1_1"] = _provider(api, "numa1_1", agg_c, parent=made["cn1"])
            made["numa1_2"] = _provider(api, "numa1_2", parent=made["cn1"])
            made["numa2_1"] = _provider(api, "numa2_1", parent=made["cn2"])
            made["numa2_2"] = _provider(api, "numa2_2", parent=made["cn2"])
            os.environ.update(AGGA_UUID=agg_a, AGGB_UUID=agg_b, AGGC_UUID=agg_c)
            for name, uuid_ in made.items():
                os.environ[f"{name.upper()}_UUID"] = uuid_
            for numa in ("numa1_1", "numa1_2", "numa2_1", "numa2_2"):
                add_inventory(api, made[numa], "VCPU", 24, allocation_ratio=16.0)
            for ss in ("ss1", "ss2"):
                add_inventory(api, made[ss], "DISK_GB", 2000, reserved=100, allocation_ratio=1.0)
                set_traits(api, made[ss], "MISC_SHARES_VIA_AGGREGATE")


class NUMANetworkFixture(APIFixture):
    """Upstream's NUMA and network trees: cn1 (no inventory, sharing disk
    from ss1 through aggregate A) with two NUMA nodes and their devices and
    two network agents with their bridges; cn2 (VCPU, memory, disk) with
    three NICs and their PFs of VFs on two physnets. Two allocations of a
    consumer of project ``numafx-project``, user ``numafx-user``."""

    def start_fixture(self) -> None:
        super().start_fixture()
        with _api() as api:
            self.make_entities(api, None, None)

    def make_entities(self, api: httpx.Client, cn1: str | None, cn2: str | None) -> None:
        agg_a = os.environ["AGGA_UUID"] = str(uuid.uuid4())
        ss1 = os.environ["SS1_UUID"] = _provider(api, "ss1", agg_a)
        set_traits(api, ss1, "MISC_SHARES_VIA_AGGREGATE")
        add_inventory(api, ss1, "DISK_GB", 2000)
        cn1 = cn1 or _provider(api, "cn1", agg_a)
        set_aggregates(api, cn1, agg_a)
        set_traits(api, cn1, "COMPUTE_VOLUME_MULTI_ATTACH")
        os.environ["CN1_UUID"] = cn1
        self._cn1_tree(api, cn1)
        cn2 = cn2 or _provider(api, "cn2")
        set_aggregates(api, cn2, agg_a)
        add_inventory(api, cn2, "VCPU", 8)
        set_allocation(api, cn2, str(uuid.uuid4()), *_NUMAFX, {"VCPU": 3})
        add_inventory(api, cn2, "MEMORY_MB", 2048, min_unit=1024, step_size=128)
        add_inventory(api, cn2, "DISK_GB", 1000)
        set_traits(api, cn2, "CUSTOM_FOO")
        os.environ["CN2_UUID"] = cn2
        self._cn2_tree(api, cn2)

    def _cn1_tree(self, api: httpx.Client, cn1: str) -> None:
        numas = []
        for i in (0, 1):
            numa = os.environ[f"NUMA{i}_UUID"] = _provider(api, f"numa{i}", parent=cn1)
            set_traits(api, numa, "HW_NUMA_ROOT", *(["CUSTOM_FOO"] if i == 1 else []))
            add_inventory(api, numa, "VCPU", 4)
            numas.append(numa)
        add_inventory(api, numas[0], "MEMORY_MB", 2048, min_unit=512, step_size=256)
        add_inventory(api, numas[1], "MEMORY_MB", 2048, min_unit=256, max_unit=1024)
        set_allocation(api, numas[0], str(uuid.uuid4()), *_NUMAFX, {"VCPU": 2})
        fpga = os.environ["FPGA0_UUID"] = _provider(api, "fpga0", parent=numas[0])
        add_inventory(api, fpga, "FPGA", 1)
        pgpu = os.environ["PGPU0_UUID"] = _provider(api, "pgpu0", parent=numas[0])
        add_inventory(api, pgpu, "VGPU", 8)
        for i in (0, 1):
            fpga = os.environ[f"FPGA1_{i}_UUID"] = _provider(api, f"fpga1_{i}", parent=numas[1])
            add_inventory(api, fpga, "FPGA", 1)
        agent = os.environ["SRIOV_AGENT_UUID"] = _provider(api, "sriov_agent", parent=cn1)
        set_traits(api, agent, "CUSTOM_VNIC_TYPE_DIRECT")
        for i in (1, 2):
            dev = os.environ[f"ESN{i}_UUID"] = _provider(api, f"esn{i}", parent=agent)
            set_traits(api, dev, f"CUSTOM_PHYSNET{i}")
            add_inventory(api, dev, "NET_BW_EGR_KILOBIT_PER_SEC", 10000 * i)
        agent = os.environ["OVS_AGENT_UUID"] = _provider(api, "ovs_agent", parent=cn1)
        set_traits(api, agent, "CUSTOM_VNIC_TYPE_NORMAL")
        dev = os.environ["BR_INT_UUID"] = _provider(api, "br_int", parent=agent)
        set_traits(api, dev, "CUSTOM_PHYSNET0")
        add_inventory(api, dev, "NET_BW_EGR_KILOBIT_PER_SEC", 1000)

    def _cn2_tree(self, api: httpx.Client, cn2: str) -> None:
        nics = []
        for i in (1, 2, 3):
            nic = os.environ[f"NIC{i}_UUID"] = _provider(api, f"nic{i}", parent=cn2)
            set_traits(api, nic, "CUSTOM_HW_NIC_ROOT")
            nics.append(nic)
        # (suffix, nic, physnet, VFs): two PFs on NIC1, four on NIC2, one on NIC3
        pfs = [(f"1_{i}", nics[0], i, 4) for i in (1, 2)]
        pfs += [(f"2_{i + 1}", nics[1], i % 2 + 1, 2) for i in range(4)]
        pfs += [("3_1", nics[2], 1, 8)]
        for suffix, nic, physnet, vfs in pfs:
            pf = os.environ[f"PF{suffix}_UUID"] = _provider(api, f"pf{suffix}", parent=nic)
            set_traits(api, pf, f"CUSTOM_PHYSNET{physnet}")
            add_inventory(api, pf, "CUSTOM_VF", vfs)


_NUMAFX = ("numafx-project", "numafx-user")


class DeepNUMANetworkFixture(NUMANetworkFixture):
    """The NUMA and network trees with cn1 and cn2 a level lower: under p1
    and p2, both under gp1."""

    def start_fixture(self) -> None:
        APIFixture.start_fixture(self)
        with _api() as api:
            gp1 = _provider(api, "gp1")
            p1 = _provider(api, "p1", parent=gp1)
            p2 = _provider(api, "p2", parent=gp1)
            cn1 = _provider(api, "cn1", parent=p1)
            cn2 = _provider(api, "cn2", parent=p2)
            self.make_entities(api, cn1, cn2)


class GranularFixture(APIFixture):
    """Upstream's three compute nodes for granular requests (cn_left,
    cn_middle, cn_right) and three sharing providers (two of disk, one of
    network), in aggregates A, B and C."""

    def start_fixture(self) -> None:
        super().start_fixture()
        agg = {name: str(uuid.uuid4()) for name in ("A", "B", "C")}
        os.environ.update(AGGA=agg["A"], AGGB=agg["B"], AGGC=agg["C"])
        with _api() as api:
            _ok(api.put("/resource_classes/CUSTOM_NET_MBPS"))
            for name, aggregates, inventory, traits in _GRANULAR:
                rp = os.environ[name.upper()] = _provider(api, name, *(agg[a] for a in aggregates))
                for rc, total, *max_unit in inventory:
                    add_inventory(
                        api, rp, rc, total, **({"max_unit": max_unit[0]} if max_unit else {})
                    )
                set_traits(api, rp, *traits)


_GRANULAR: list[tuple[str, str, list[tuple[Any, ...]], list[str]]] = [
    (
        "cn_left",
        "A",
        [
            ("VCPU", 8),
            ("MEMORY_MB", 4096),
            ("DISK_GB", 500),
            ("VGPU", 8),
            ("SRIOV_NET_VF", 8),
            ("CUSTOM_NET_MBPS", 4000),
        ],
        ["HW_CPU_X86_AVX", "HW_CPU_X86_AVX2", "HW_GPU_API_DXVA", "HW_NIC_DCB_PFC", "CUSTOM_FOO"],
    ),
    (
        "cn_middle",
        "AB",
        [("VCPU", 8), ("MEMORY_MB", 4096), ("SRIOV_NET_VF", 8), ("CUSTOM_NET_MBPS", 4000)],
        ["HW_CPU_X86_AVX", "HW_CPU_X86_AVX2", "HW_CPU_X86_SSE", "HW_NIC_ACCEL_TLS"],
    ),
    (
        "cn_right",
        "BC",
        [("VCPU", 8), ("MEMORY_MB", 4096), ("DISK_GB", 500), ("VGPU", 8, 2)],
        ["HW_CPU_X86_MMX", "HW_GPU_API_DXVA", "CUSTOM_DISK_SSD"],
    ),
    ("shr_disk_1", "A", [("DISK_GB", 1000)], ["MISC_SHARES_VIA_AGGREGATE", "CUSTOM_DISK_SSD"]),
    ("shr_disk_2", "AB", [("DISK_GB", 1000)], ["MISC_SHARES_VIA_AGGREGATE"]),
    (
        "shr_net",
        "C",
        [("SRIOV_NET_VF", 16), ("CUSTOM_NET_MBPS", 40000)],
        ["MISC_SHARES_VIA_AGGREGATE"],
    ),
]
"""(name, aggregates, inventories (class, total[, max_unit]), traits)."""


_VNIC_DIRECT = (
    "CUSTOM_VNIC_TYPE_DIRECT",
    "CUSTOM_VNIC_TYPE_DIRECT_PHYSICAL",
    "CUSTOM_VNIC_TYPE_MACVTAP",
)


class NeutronQoSMultiSegmentFixture(APIFixture):
    """Upstream's four compute trees as Neutron's QoS on a multi-segment
    network makes them: a compute node, an Open vSwitch agent (packet rate)
    with its bridges (bandwidth, a physnet each) and a NIC switch agent with
    its PFs (bandwidth, a physnet each). compute0 is on another physnet,
    compute1 on segment 1, compute2 on segment 2, compute3 on both with
    little bandwidth. The environment variables are upstream's, down to
    ``compute3:sriov_agent`` naming compute2's agent."""

    def start_fixture(self) -> None:
        super().start_fixture()
        with _api() as api:
            for n, bridges, pfs, bandwidth in (
                (0, ["OTHER"], ["OTHER"], 5000),
                (1, ["MSN_S1"], ["MSN_S1"], 5000),
                (2, ["MSN_S2"], ["MSN_S2"], 5000),
                (3, ["MSN_S1", "MSN_S2"], ["MSN_S1", "MSN_S2"], 1000),
            ):
                self._compute(api, n, bridges, pfs, bandwidth)

    def _compute(
        self, api: httpx.Client, n: int, bridges: list[str], pfs: list[str], bandwidth: int
    ) -> None:
        name = f"compute{n}"
        compute = os.environ[name] = _provider(api, name)
        for rc, total in (("VCPU", 8), ("MEMORY_MB", 4096), ("DISK_GB", 500)):
            add_inventory(api, compute, rc, total)
        ovs_name = f"{name}:Open vSwitch agent"
        ovs = os.environ[f"{name}:ovs_agent"] = _provider(api, ovs_name, parent=compute)
        add_inventory(api, ovs, "NET_PACKET_RATE_KILOPACKET_PER_SEC", 1000)
        set_traits(api, ovs, "CUSTOM_VNIC_TYPE_NORMAL")
        for i, physnet in enumerate(bridges):
            suffix = "" if i == 0 else str(i + 1)
            bridge = os.environ[f"{name}:br_ex{suffix}"] = _provider(
                api, f"{ovs_name}:br-ex{suffix}", parent=ovs
            )
            for rc in ("NET_BW_EGR_KILOBIT_PER_SEC", "NET_BW_IGR_KILOBIT_PER_SEC"):
                add_inventory(api, bridge, rc, bandwidth)
            set_traits(api, bridge, "CUSTOM_VNIC_TYPE_NORMAL", f"CUSTOM_PHYSNET_{physnet}")
        sriov_name = f"{name}:NIC Switch agent"
        sriov = _provider(api, sriov_name, parent=compute)
        # upstream names compute2's agent for compute3's: kept, as its YAML sees it
        agents = {n: sriov, 3: os.environ.get(f"compute{2}:sriov_agent", sriov)}
        os.environ[f"{name}:sriov_agent"] = agents[n]
        set_traits(api, sriov, *_VNIC_DIRECT)
        pf_bandwidth = 10000 if bandwidth == 5000 else bandwidth
        for i, physnet in enumerate(pfs):
            pf = os.environ[f"{name}:pf{i}"] = _provider(
                api, f"{sriov_name}:enp129s0f{i}", parent=sriov
            )
            for rc in ("NET_BW_EGR_KILOBIT_PER_SEC", "NET_BW_IGR_KILOBIT_PER_SEC"):
                add_inventory(api, pf, rc, pf_bandwidth)
            set_traits(api, pf, *_VNIC_DIRECT, f"CUSTOM_PHYSNET_{physnet}")


class LegacyRBACPolicyFixture(APIFixture):
    """Placement's legacy policy: the runner starts the server with Berth's
    default, which is that."""


class SecureRBACPolicyFixture(APIFixture):
    """Placement's secure-RBAC defaults: the runner starts the server with
    ``--placement-policy secure``."""


class OpenPolicyFixture(APIFixture):
    """Every rule open to any caller: the runner starts the server with a
    policy file that says so."""


class CORSFixture(APIFixture):
    """CORS for one origin: the runner starts the server with
    ``--placement-cors-origin`` and the header upstream's fixture allows."""
