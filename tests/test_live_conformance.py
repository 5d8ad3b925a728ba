"""The proof that the engine's filters and weighers work from events: for
each one Berth ships, the events that set up a small cluster are published,
the writers decide them into the view, a request goes through the
scheduler worker, and its pick is checked; for a filter, also the explain
line of a provider it rejects, from the same view (as ``berth explain``
reads it). The names are checked against the registry, so a new filter or
weigher without a live case fails here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from consumers.scheduler import engine_request
from consumers.server_groups import read_rules
from consumers.snapshot_source import snapshot_from_view
from scheduling.config import SchedulerConfig
from scheduling.registry import FILTERS, WEIGHERS
from schemas.events import AggregateMemberAdded, Event, ServerGroupCreated
from schemas.requests import PlacementRequest
from tests.builders import describe, inventory, register, report, set_state, topology, traits
from tests.placements import placement_answers

NOW_MS = 10**12
BASE = ["ComputeFilter", "ResourceFilter"]


def join(pid: str, aid: str) -> AggregateMemberAdded:
    return AggregateMemberAdded(
        event_id=f"join-{pid}-{aid}", ts_ms=1, partition_key=pid, provider_id=pid, aggregate_id=aid
    )


def created(gid: str, policy: str, most: int | None) -> ServerGroupCreated:
    return ServerGroupCreated(
        event_id=f"group-{gid}",
        ts_ms=1,
        partition_key=gid,
        group_id=gid,
        policy=policy,  # type: ignore[arg-type]
        max_server_per_host=most,
    )


@dataclass
class Case:
    """A cluster of n1, n2, n3 (8 VCPU, 8 GiB, 100 GB each, unless ``events``
    say otherwise), ``aggregates`` defined, ``before`` placed first, then
    ``request``: placed on ``pick`` (None: not placed), and, for a filter,
    ``rejected`` (a provider and a piece of its explain line)."""

    name: str
    request: dict[str, Any]
    pick: str | None
    rejected: tuple[str, str] | None = None
    events: list[Event] = field(default_factory=list)
    aggregates: dict[str, dict[str, str]] = field(default_factory=dict)
    before: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    multiplier: float = 1.0
    groups: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    """Server groups created first: id -> (policy, max_server_per_host)."""
    filters: dict[str, dict[str, Any]] = field(default_factory=dict)
    """For a weigher: filters enabled beside the base ones, with their options."""


def pinnable(cell_id: int, dedicated: int) -> dict[str, Any]:
    """A host NUMA cell of 8 CPUs, the first ``dedicated`` of them for pinning."""
    cpus = list(range(cell_id * 8, cell_id * 8 + 8))
    return {
        "cell_id": cell_id,
        "cpus": cpus,
        "dedicated": cpus[:dedicated],
        "shared": cpus[dedicated:],
        "memory_mb": 8192,
    }


def threaded(cell_id: int) -> dict[str, Any]:
    """``pinnable(cell_id, 4)`` whose dedicated CPUs are two cores of two threads."""
    cell = pinnable(cell_id, 4)
    first = cell["cpus"][0]
    return cell | {"siblings": [[first, first + 1], [first + 2, first + 3]]}


GPU = {"address": "0000:81:00.0", "vendor_id": "10de", "product_id": "1db4"}


def vfs(count: int) -> list[dict[str, Any]]:
    """An SR-IOV PF with ``count`` VFs of it (8086:154c)."""
    pf = {
        "address": "0000:04:00.0",
        "vendor_id": "8086",
        "product_id": "1572",
        "device_type": "type-PF",
    }
    return [pf] + [
        {
            "address": f"0000:04:00.{i}",
            "vendor_id": "8086",
            "product_id": "154c",
            "device_type": "type-VF",
            "parent_address": "0000:04:00.0",
        }
        for i in range(1, count + 1)
    ]


VF_ALIAS = {"alias": [{"name": "vf", "vendor_id": "8086", "product_id": "154c"}]}


def vf_on(node: int, network: str = "physnet1") -> list[dict[str, Any]]:
    """``vfs(1)``, the PF and its VF on NUMA cell ``node`` and ``network``."""
    return [d | {"numa_node": node, "physical_network": network} for d in vfs(1)]


QEMU = {
    "hypervisor_type": "QEMU",
    "hypervisor_version": 8002000,
    "supported_instances": [["x86_64", "qemu", "hvm"]],
}

FILTER_CASES = [
    Case(
        "AggregateImagePropertiesIsolation",
        {"image_properties": {"os_distro": "windows"}},
        "n2",
        ("n1", "image os_distro='windows', aggregate linux allows 'linux,bsd'"),
        events=[join("n1", "linux")],
        aggregates={"linux": {"os_distro": "linux,bsd"}},
    ),
    Case(
        "AggregateInstanceExtraSpecsFilter",
        {"extra_specs": {"aggregate_instance_extra_specs:ssd": "true"}},
        "n2",
        ("n1", "no aggregate sets ssd"),
        events=[join("n2", "fast")],
        aggregates={"fast": {"ssd": "true"}},
    ),
    Case(
        "AggregateMultiTenancyIsolation",
        {"project_id": "other"},
        "n2",
        ("n1", "project 'other' is not a tenant of isolated aggregate mine"),
        events=[join("n1", "mine")],
        aggregates={"mine": {"filter_tenant_id": "p"}},
    ),
    Case(
        "NUMATopologyFilter",  # 4 pinned vCPUs: only n2 has a cell with 4 dedicated CPUs
        {"resources": {"VCPU": 4, "MEMORY_MB": 512}, "extra_specs": {"hw:cpu_policy": "dedicated"}},
        "n2",
        ("n1", "guest cell 0 fits no host cell: host cell 0 has 2 dedicated CPUs, wanted 4"),
        events=[
            topology("n1", numa_cells=[pinnable(0, 2)]),
            topology("n2", numa_cells=[pinnable(0, 4)]),
        ],
    ),
    Case(
        "NUMATopologyFilter",  # hw:cpu_thread_policy=require: only n2's cell has threads
        {
            "resources": {"VCPU": 2, "MEMORY_MB": 512},
            "extra_specs": {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require"},
        },
        "n2",
        ("n1", "host cell 0 has no hardware thread siblings (thread policy require)"),
        events=[
            topology("n1", numa_cells=[pinnable(0, 4)]),
            topology("n2", numa_cells=[threaded(0)]),
        ],
    ),
    Case(
        "NUMATopologyFilter",  # mixed: 2 pinned on dedicated CPUs, 2 floating on shared
        {
            "resources": {"VCPU": 4, "MEMORY_MB": 512},
            "extra_specs": {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-1"},
        },
        "n2",
        ("n1", "host cell 0 has 0 shared vCPUs, wanted 2 floating"),
        events=[
            topology("n1", numa_cells=[pinnable(0, 8)]),
            topology("n2", numa_cells=[pinnable(0, 4)]),
        ],
    ),
    Case(
        "PciPassthroughFilter",
        {"extra_specs": {"pci_passthrough:alias": "gpu:1"}},
        "n2",
        ("n1", "PCI alias gpu wanted 1 of 10de:1db4, provider has 0"),
        events=[topology("n2", pci_devices=[GPU])],
        options={"alias": [{"name": "gpu", "vendor_id": "10de", "product_id": "1db4"}]},
    ),
    Case(
        "PciPassthroughFilter",  # required affinity: n1's VF is on the cell too small to pin 4
        {
            "resources": {"VCPU": 4, "MEMORY_MB": 512},
            "extra_specs": {
                "hw:cpu_policy": "dedicated",
                "pci_passthrough:alias": "vf:1",
                "hw:pci_numa_affinity_policy": "required",
            },
        },
        "n2",
        (
            "n1",
            "PCI alias vf wanted 1 of 8086:154c near the guest's host cell(s) 0"
            " (NUMA policy required): host cell 0 has 0; host cell 1 has 1",
        ),
        events=[
            topology("n1", numa_cells=[pinnable(0, 4), pinnable(1, 2)], pci_devices=vf_on(1)),
            topology("n2", numa_cells=[pinnable(0, 4), pinnable(1, 2)], pci_devices=vf_on(0)),
        ],
        options=VF_ALIAS,
    ),
    Case(
        "PciPassthroughFilter",  # an SR-IOV port: a VF on its physical network
        {"sriov_ports": [{"physical_network": "physnet1"}]},
        "n2",
        ("n1", "SR-IOV ports wanted 1 of type-VF on physical network physnet1, provider has 0"),
        events=[
            topology("n1", numa_cells=[pinnable(0, 4)], pci_devices=vf_on(0, "physnet2")),
            topology("n2", numa_cells=[pinnable(0, 4)], pci_devices=vf_on(0)),
        ],
    ),
    Case(
        "AggregateTypeAffinityFilter",
        {"flavor_name": "m1.small"},
        "n2",
        ("n1", "flavor 'm1.small' not in instance_type of aggregate big"),
        events=[join("n1", "big")],
        aggregates={"big": {"instance_type": "m1.xlarge"}},
    ),
    Case("AllHostsFilter", {}, "n1"),
    Case(
        "AvailabilityZoneFilter",
        {"availability_zone": "az2"},
        "n3",
        ("n1", "zone 'az2' wanted, provider is in az1"),
        events=[describe("n1", availability_zone="az1"), join("n3", "zone2")],
        aggregates={"zone2": {"availability_zone": "az2"}},
    ),
    Case(
        "ComputeCapabilitiesFilter",
        {"extra_specs": {"capabilities:hypervisor_type": "s== QEMU"}},
        "n2",
        ("n1", "capabilities:hypervisor_type not reported"),
        events=[describe("n2", capabilities=QEMU)],
    ),
    Case(
        "ComputeCapabilitiesFilter",  # Nova's host state: usage, counted live
        {"extra_specs": {"free_ram_mb": ">= 4096", "capabilities:num_instances": "<= 0"}},
        "n3",
        ("n1", "num_instances is '1', wanted '<= 0'"),
        events=[inventory("n2", VCPU=8, MEMORY_MB=2048, DISK_GB=100)],
        before=[{"request_id": "first"}],
    ),
    Case(
        "ComputeCapabilitiesFilter",  # the flavor's hw:maxphysaddr_bits
        {"extra_specs": {"hw:maxphysaddr_bits": "46"}},
        "n3",
        ("n2", "hw:maxphysaddr_bits 46: the host CPU has 39 physical address bits"),
        events=[
            describe("n2", capabilities={"cpu_info": {"maxphysaddr": {"bits": 39}}}),
            describe("n3", capabilities={"cpu_info": {"maxphysaddr": {"bits": 52}}}),
        ],
    ),
    Case(
        "ComputeFilter",
        {},
        "n2",
        ("n1", "disabled"),
        events=[set_state("n1", "disabled")],
    ),
    Case(
        "DifferentHostFilter",
        {"different_host": ["first.0"]},
        "n2",
        ("n1", "first.0"),
        before=[{"request_id": "first"}],
    ),
    Case(
        "ImagePropertiesFilter",
        {"image_properties": {"hw_architecture": "x86_64"}},
        "n3",
        ("n1", "reports no supported_instances"),
        events=[describe("n3", capabilities=QEMU)],
    ),
    Case(
        "ImagePropertiesFilter",  # the image's hw_maxphysaddr_bits
        {"image_properties": {"hw_maxphysaddr_bits": "46"}},
        "n3",
        ("n1", "the host reports no cpu_info maxphysaddr bits"),
        events=[describe("n3", capabilities={"cpu_info": {"maxphysaddr": {"bits": 48}}})],
    ),
    Case(
        "ImageTypeSupportFilter",
        {"image_properties": {"disk_format": "qcow2"}},
        "n2",
        ("n1", "COMPUTE_IMAGE_TYPE_QCOW2"),
        events=[traits("n2", "COMPUTE_IMAGE_TYPE_QCOW2")],
    ),
    Case(
        "IoOpsFilter",
        {},
        "n2",
        ("n1", "8 I/O operations, max_io_ops_per_host 8"),
        events=[report("n1", ts=1, io_ops=8)],
    ),
    Case(
        "IsolatedAggregatesFilter",
        {},
        "n2",
        ("n1", "admits only requests requiring CUSTOM_GPU"),
        events=[join("n1", "gpus")],
        aggregates={"gpus": {"trait:CUSTOM_GPU": "required"}},
    ),
    Case(
        "IsolatedHostsFilter",
        {"image_properties": {"image_id": "secret"}},
        "n3",
        ("n1", "image secret is isolated"),
        options={"isolated_hosts": ["n3"], "isolated_images": ["secret"]},
    ),
    Case(
        "JsonFilter",
        {"query": json.dumps(["=", "$host_ip", "10.0.0.2"])},
        "n2",
        ("n1", "query"),
        events=[describe("n2", host_ip="10.0.0.2")],
    ),
    Case(
        "MetricsFilter",
        {},
        "n2",
        ("n1", "does not report cpu.idle"),
        events=[report(pid, {"cpu.idle": 50.0}, ts=1) for pid in ("n2", "n3")],
        options={"weight_setting": "cpu.idle=1.0"},
    ),
    Case(
        "NumInstancesFilter",
        {},
        "n2",
        ("n1", "1 instances, max_instances_per_host 1"),
        before=[{"request_id": "first"}],
        options={"max_instances_per_host": 1},
    ),
    Case(
        "ProjectRestrictionFilter",
        {"project_id": "outsider"},
        "n2",
        ("n1", "outsider"),
        events=[describe("n1", metadata={"allowed_projects": "p"})],
    ),
    Case(
        "ResourceFilter",
        {"resources": {"VCPU": 12}},
        "n3",
        ("n1", "VCPU wanted 12, free 8"),
        events=[inventory("n3", VCPU=16, MEMORY_MB=8192, DISK_GB=100)],
    ),
    Case(
        "SameHostFilter",
        {"same_host": ["first.0"]},
        "n1",
        ("n2", "first.0"),
        before=[{"request_id": "first"}],
    ),
    Case(
        "ServerGroupAffinityFilter",
        {"group_id": "g"},
        "n2",
        ("n1", "affinity group g: its members are on 1 other provider(s)"),
        # the first member goes to n2 (n1 is too small for it); every tie would go to n1
        events=[inventory("n1", VCPU=2, MEMORY_MB=8192, DISK_GB=100)],
        before=[{"request_id": "first", "group_id": "g", "resources": {"VCPU": 4}}],
        groups={"g": ("affinity", None)},
    ),
    Case(
        "ServerGroupAntiAffinityFilter",
        {"group_id": "g"},
        "n2",
        ("n1", "anti-affinity group g: 2 member(s) here, max_server_per_host is 2"),
        before=[{"request_id": f"first{i}", "group_id": "g"} for i in range(2)],
        groups={"g": ("anti-affinity", 2)},
    ),
    Case(
        "ServerGroupAntiAffinityFilter",
        {"group_id": "adhoc", "group_policy": "anti-affinity"},
        "n2",
        ("n1", "anti-affinity group adhoc: 1 member(s) here"),
        before=[{"request_id": "first", "group_id": "adhoc", "group_policy": "anti-affinity"}],
    ),
    Case(
        "SimpleCIDRAffinityFilter",
        {"build_near_host_ip": "10.0.7.1", "cidr": "/24"},
        "n3",
        ("n1", "has no host_ip"),
        events=[
            describe("n2", host_ip="10.0.8.2"),
            describe("n3", host_ip="10.0.7.3"),
        ],
    ),
    Case(
        "TagRequirementsFilter",
        {"require_with_tags": ["db"]},
        "n1",
        ("n2", "db"),
        before=[{"request_id": "first", "tags": ["db"]}],
    ),
    Case(
        "TraitsFilter",
        {"required_traits": ["HW_GPU"]},
        "n3",
        ("n1", "HW_GPU"),
        events=[traits("n3", "HW_GPU")],
    ),
]

WEIGHER_CASES = [
    Case(
        "BuildFailureWeigher",
        {},
        "n2",
        events=[report("n1", ts=1, build_failures=3)],
    ),
    Case(
        "CrossCellWeigher",  # moving off n1 (disabled) in cell c1: n3, not n2 in c2
        {"reason": "relocation", "source_provider": "n1"},
        "n3",
        events=[
            describe("n1", metadata={"cell": "c1"}),
            describe("n2", metadata={"cell": "c2"}),
            describe("n3", metadata={"cell": "c1"}),
            set_state("n1", "disabled"),
        ],
        multiplier=1000000.0,
    ),
    Case(
        "PCIWeigher",  # no device asked: the provider without any
        {},
        "n3",
        events=[
            topology("n1", pci_devices=vfs(4)),
            topology("n2", pci_devices=vfs(1)),
        ],
    ),
    Case(
        "PCIWeigher",  # one VF asked: the provider with the fewest devices that has one
        {"extra_specs": {"pci_passthrough:alias": "vf:1"}},
        "n2",
        events=[
            topology("n1", pci_devices=vfs(4)),
            topology("n2", pci_devices=vfs(1)),
        ],
        filters={"PciPassthroughFilter": VF_ALIAS},
    ),
    Case("CPUWeigher", {}, "n3", events=[inventory("n3", VCPU=16, MEMORY_MB=8192, DISK_GB=100)]),
    Case("DiskWeigher", {}, "n2", events=[inventory("n2", VCPU=8, MEMORY_MB=8192, DISK_GB=500)]),
    Case(
        "HypervisorVersionWeigher",
        {},
        "n3",
        events=[
            describe("n1", capabilities={"hypervisor_version": 7000000}),
            describe("n3", capabilities={"hypervisor_version": 9000000}),
        ],
    ),
    Case(
        "IoOpsWeigher",
        {},
        "n2",
        events=[report("n1", ts=1, io_ops=5)],
        multiplier=-1.0,
    ),
    Case(
        "MetricsWeigher",
        {},
        "n3",
        events=[
            report(pid, {"cpu.idle": v}, ts=1)
            for pid, v in [("n1", 10.0), ("n2", 20.0), ("n3", 90.0)]
        ],
        options={"weight_setting": "cpu.idle=1.0"},
    ),
    Case(
        "NumInstancesWeigher",
        {},
        "n1",
        before=[{"request_id": "first"}],
        multiplier=1.0,  # positive: pack onto the provider with the most
    ),
    Case("RAMWeigher", {}, "n2", events=[inventory("n2", VCPU=8, MEMORY_MB=16384, DISK_GB=100)]),
    Case(
        "ServerGroupSoftAffinityWeigher",
        {"group_id": "g"},
        "n2",
        events=[inventory("n1", VCPU=2, MEMORY_MB=8192, DISK_GB=100)],
        before=[{"request_id": "first", "group_id": "g", "resources": {"VCPU": 4}}],
        groups={"g": ("soft-affinity", None)},
    ),
    Case(
        "ServerGroupSoftAntiAffinityWeigher",
        {"group_id": "g"},
        "n2",
        before=[{"request_id": "first", "group_id": "g"}],
        groups={"g": ("soft-anti-affinity", None)},
    ),
    Case(
        "TagAffinityWeigher",
        {"prefer_with_tags": ["web"]},
        "n1",
        before=[{"request_id": "first", "tags": ["web"]}],
    ),
]

PENDING = {
    "RetryFilter": "needs a claim the writer rejected; the race tests exercise it",
}
"""Shipped, without a live case yet, and why."""


def test_every_filter_and_weigher_has_a_live_case_or_says_why_not() -> None:
    covered = {c.name for c in FILTER_CASES + WEIGHER_CASES} | set(PENDING)
    assert covered == set(FILTERS) | set(WEIGHERS)


def _config(case: Case) -> SchedulerConfig:
    if case.name in FILTERS:
        filters = [*BASE, case.name] if case.name not in BASE else BASE
        section: dict[str, Any] = {"filters": {"enabled": filters}, "weighers": {}}
        if case.options:
            section["filters"][case.name] = case.options
        return SchedulerConfig.from_mapping(section)
    weigher = {"multiplier": case.multiplier, **case.options}
    enabled: dict[str, Any] = {"enabled": [*BASE, *case.filters]}
    enabled |= {name: options for name, options in case.filters.items() if options}
    return SchedulerConfig.from_mapping({"filters": enabled, "weighers": {case.name: weigher}})


def _request(fields: dict[str, Any], rid: str = "asked") -> PlacementRequest:
    body = {
        "request_id": rid,
        "ts_ms": NOW_MS,
        "project_id": "p",
        "resources": {"VCPU": 1, "MEMORY_MB": 512},
        **fields,
    }
    return PlacementRequest.model_validate_json(json.dumps(body))


def _run(tmp_path: Path, case: Case) -> tuple[dict[str, Any], list[str]]:
    with App(Settings(data_dir=tmp_path / "data", partitions=2)) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        for aid, metadata in case.aggregates.items():
            edge.define_aggregate(aid, metadata)
        for gid, (policy, most) in case.groups.items():
            edge.publish([created(gid, policy, most)])
        cluster: list[Event] = []
        for pid in ("n1", "n2", "n3"):
            cluster += [register(pid), inventory(pid, VCPU=8, MEMORY_MB=8192, DISK_GB=100)]
        edge.publish(cluster + case.events)
        writers = app.writers()
        catch_up_all(writers)
        config = _config(case)
        worker = app.scheduler_worker(config, lambda: catch_up_all(writers))
        for fields in case.before:
            # placed first, on n1: every provider ties and the first wins
            edge.submit([_request({"resources": {"VCPU": 1}, **fields}, fields["request_id"])])
            while worker.step():
                pass
        request = _request(case.request)
        rule = read_rules(app.engine).get(request.group_id or "")
        explained = config.engine().place(
            snapshot_from_view(app.engine),
            engine_request(request, 1, frozenset(), rule),
            explain=True,
        )
        edge.submit([request])
        while worker.step():
            pass
        answers = {a["request_id"]: a for a in placement_answers(app)}
    lines = explained.trace.lines() if explained.trace else []
    return answers["asked"], lines


@pytest.mark.parametrize("case", FILTER_CASES + WEIGHER_CASES, ids=lambda c: c.name)
def test_live(tmp_path: Path, case: Case) -> None:
    answer, explain = _run(tmp_path, case)
    where = [pid for _, pid in answer["reservations"]]
    if case.pick is None:
        assert not answer["placed"], answer
    else:
        assert where == [case.pick], answer
    if case.rejected is not None:
        pid, words = case.rejected
        line = next((line for line in explain if line.startswith(f"{pid}: ")), "")
        assert words in line and f"({case.name})" in line, explain
