"""NUMATopologyFilter and PciPassthroughFilter (issue 31 parts 2 and 3), as
scenario tables from Nova's CPU topologies and PCI passthrough guides; and
the request's NUMA and PCI asks refused at the edge when they cannot mean
anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from scheduling.filters.base import Context
from scheduling.filters.compute_capabilities import ComputeCapabilitiesFilter
from scheduling.filters.numa_topology import NUMATopologyFilter, matching
from scheduling.filters.pci_passthrough import PciPassthroughFilter
from scheduling.model import Provider, Request, Snapshot
from scheduling.topology import HostCell, HostDevice
from schemas.guest_topology import GuestCell, guest_topology, page_size
from schemas.requests import PlacementRequest
from tests.test_filters_host import Case, ask, check, host, ids
from tests.test_live_conformance import Case as LiveCase
from tests.test_live_conformance import _run as live

NUMA = NUMATopologyFilter()


def cell(cid: int, dedicated: int = 0, shared: int = 0, mb: int = 8192, **pages: int) -> HostCell:
    """A host cell with ``dedicated`` then ``shared`` CPUs, ``mb`` of memory
    and huge pages by size (``p2048=512``)."""
    first = cid * 100
    pinned = frozenset(range(first, first + dedicated))
    floating = frozenset(range(first + dedicated, first + dedicated + shared))
    huge = {int(k[1:]): v for k, v in pages.items()}
    return HostCell(cid, pinned | floating, pinned, floating, memory_mb=mb, huge_pages=huge)


def guest(vcpus: int, mb: int, **specs: str) -> Request:
    return Request("r", {"VCPU": vcpus, "MEMORY_MB": mb}, extra_specs=specs)


TWO = (cell(0, dedicated=4, shared=4), cell(1, dedicated=4, shared=4))
NUMA_CASES = [
    Case("no NUMA ask passes a host without cells", NUMA, host(), guest(4, 1024)),
    Case(
        "a pinned guest needs host cells",
        NUMA,
        host(),
        guest(2, 1024, **{"hw:cpu_policy": "dedicated"}),
        expected="1 guest NUMA cells, provider has 0",
    ),
    Case(
        "pinned: fits one cell's dedicated CPUs",
        NUMA,
        host(numa_cells=TWO),
        guest(4, 1024, **{"hw:cpu_policy": "dedicated"}),
    ),
    Case(
        "pinned: never over-subscribed, not spread without hw:numa_nodes",
        NUMA,
        host(numa_cells=TWO),
        guest(6, 1024, **{"hw:cpu_policy": "dedicated"}),
        expected="guest cell 0 fits no host cell: host cell 0 has 4 dedicated CPUs, wanted 6;"
        " host cell 1 has 4 dedicated CPUs, wanted 6",
    ),
    Case(
        "pinned over two cells",
        NUMA,
        host(numa_cells=TWO),
        guest(8, 2048, **{"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}),
    ),
    Case(
        "more guest cells than host cells",
        NUMA,
        host(numa_cells=TWO),
        guest(3, 3072, **{"hw:numa_nodes": "3"}),
        expected="3 guest NUMA cells, provider has 2",
    ),
    Case(
        "asymmetric cells: each on a host cell of its own",
        NUMA,
        host(numa_cells=(cell(0, shared=2), cell(1, shared=6))),
        guest(
            8,
            4096,
            **{"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-5", "hw:numa_cpus.1": "6,7"}
            | {"hw:numa_mem.0": "3072", "hw:numa_mem.1": "1024"},
        ),
    ),
    Case(
        "two guest cells that fit only the same host cell",
        NUMA,
        host(numa_cells=(cell(0, shared=8), cell(1, shared=2))),
        guest(8, 2048, **{"hw:numa_nodes": "2"}),
        expected="the guest cells fit, but not each on a host cell of its own",
    ),
    Case(
        "shared: a cell's memory is its limit (ratio 1)",
        NUMA,
        host(numa_cells=(cell(0, shared=8, mb=2048),)),
        guest(2, 4096, **{"hw:numa_nodes": "1"}),
        expected=(
            "guest cell 0 fits no host cell: host cell 0 has 2048 MB of small pages, wanted 4096"
        ),
    ),
    Case(
        "2 MiB pages cover the memory",
        NUMA,
        host(numa_cells=(cell(0, shared=4, p2048=1024),)),
        guest(2, 2048, **{"hw:mem_page_size": "2MB"}),
    ),
    Case(
        "huge pages are not over-subscribed",
        NUMA,
        host(numa_cells=(cell(0, shared=4, p2048=512),)),
        guest(2, 2048, **{"hw:mem_page_size": "large"}),
        expected="guest cell 0 fits no host cell: host cell 0 has not 2048 MB in pages of 2048 KiB",
    ),
    Case(
        "large: a host without huge pages",
        NUMA,
        host(numa_cells=(cell(0, shared=4),)),
        guest(2, 1024, **{"hw:mem_page_size": "large"}),
        expected="guest cell 0 fits no host cell: host cell 0 has no huge pages",
    ),
    Case(
        "any: small pages do when huge ones do not",
        NUMA,
        host(numa_cells=(cell(0, shared=4, mb=8192, p1048576=4),)),
        guest(2, 2048, **{"hw:mem_page_size": "any"}),
    ),
    Case(
        "small: huge pages are not small memory",
        NUMA,
        host(numa_cells=(cell(0, shared=4, mb=8192, p1048576=7),)),
        guest(2, 2048, **{"hw:mem_page_size": "small"}),
        expected="guest cell 0 fits no host cell: host cell 0 has not 2048 MB in pages of 4 KiB",
    ),
    Case(
        "the image pins when the flavor does not say",
        NUMA,
        host(numa_cells=(cell(0, shared=8),)),
        Request(
            "r", {"VCPU": 2, "MEMORY_MB": 512}, image_properties={"hw_cpu_policy": "dedicated"}
        ),
        expected="guest cell 0 fits no host cell: host cell 0 has 0 dedicated CPUs, wanted 2",
    ),
]


@pytest.mark.parametrize("case", NUMA_CASES, ids=ids(NUMA_CASES))
def test_numa_topology(case: Case) -> None:
    check(case)


def _ratio_snapshot(cpu_ratio: float, ram_ratio: float) -> Snapshot:
    inventory = {
        "VCPU": {"total": 8, "allocation_ratio": cpu_ratio},
        "MEMORY_MB": {"total": 8192, "allocation_ratio": ram_ratio},
    }
    provider = Provider("p", numa_cells=(cell(0, shared=4, mb=4096),))
    return Snapshot.build([provider], {"p": inventory})


@pytest.mark.parametrize(
    ("cpu_ratio", "ram_ratio", "expected"),
    [
        (1.0, 1.0, "guest cell 0 fits no host cell: host cell 0 has 4 shared vCPUs, wanted 6"),
        (16.0, 1.0, None),  # a guest cell still has no more vCPUs than the cell has CPUs
        (0.5, 1.0, "guest cell 0 fits no host cell: host cell 0 has 2 shared vCPUs, wanted 6"),
    ],
)
def test_shared_cpus_per_cell_by_the_allocation_ratio(
    cpu_ratio: float, ram_ratio: float, expected: str | None
) -> None:
    snap = _ratio_snapshot(cpu_ratio, ram_ratio)
    wanted = 4 if expected is None else 6
    request = guest(wanted, 1024, **{"hw:numa_nodes": "1"})
    ctx = Context.start(snap, request)
    assert NUMA.reject(ctx, 0) == expected
    assert bool(NUMA.mask(ctx, np.array([0]))[0]) is (expected is None)


def test_memory_per_cell_not_over_the_cell_even_with_a_ratio() -> None:
    # Nova: a guest cell's memory is within the host cell's, and usage within it x ratio
    ctx = Context.start(_ratio_snapshot(1.0, 0.5), guest(2, 4096, **{"hw:numa_nodes": "1"}))
    assert (
        NUMA.reject(ctx, 0)
        == "guest cell 0 fits no host cell: host cell 0 has 2048 MB of small pages, wanted 4096"
    )


def test_matching_finds_the_one_assignment() -> None:
    assert matching([[0, 1], [0]], 2) == [1, 0]
    assert matching([[0], [0]], 2) is None


def vf(address: str, product: str = "154c", numa: int = 0) -> HostDevice:
    return HostDevice(address, "8086", product, "type-VF", numa_node=numa)


ALIASES = [
    {"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"},
    {"name": "gpu", "vendor_id": "10DE", "product_id": "1db4", "numa_policy": "preferred"},
    {"name": "gpu", "vendor_id": "10de", "product_id": "1eb8", "numa_policy": "preferred"},
]
PCI = PciPassthroughFilter(alias=ALIASES)
GPU_A = HostDevice("0000:81:00.0", "10de", "1db4")
GPU_B = HostDevice("0000:82:00.0", "10de", "1eb8")
VFS = tuple(vf(f"0000:04:00.{i}") for i in range(1, 4))


def pci(text: str) -> Request:
    return ask(extra_specs={"pci_passthrough:alias": text})


PCI_CASES = [
    Case("no alias asked", PCI, host(), ask()),
    Case("enough VFs", PCI, host(pci_devices=VFS), pci("vf:3")),
    Case(
        "too few VFs",
        PCI,
        host(pci_devices=VFS),
        pci("vf:4"),
        expected="PCI alias vf wanted 4 of 8086:154c, provider has 3",
    ),
    Case(
        "a PF is not a VF",
        PCI,
        host(pci_devices=(HostDevice("0000:04:00.0", "8086", "154c", "type-PF"),)),
        pci("vf:1"),
        expected="PCI alias vf wanted 1 of 8086:154c, provider has 0",
    ),
    Case("either device of a two-entry alias", PCI, host(pci_devices=(GPU_A, GPU_B)), pci("gpu:2")),
    Case("two aliases together", PCI, host(pci_devices=(*VFS, GPU_B)), pci("vf:2,gpu:1")),
    Case(
        "an alias the scheduler does not know",
        PCI,
        host(pci_devices=VFS),
        pci("nic:1"),
        expected="PCI alias 'nic' is not configured",
    ),
]


@pytest.mark.parametrize("case", PCI_CASES, ids=ids(PCI_CASES))
def test_pci_passthrough(case: Case) -> None:
    check(case)


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"vendor_id": "8086", "product_id": "154c"}, "needs a name"),
        ({"name": "x", "vendor_id": "80861", "product_id": "154c"}, "4 hex digits"),
        ({"name": "x", "vendor_id": "8086", "product_id": "154c", "device_type": "VF"}, "type-VF"),
        ({"name": "x", "vendor_id": "8086", "product_id": "1", "numa_policy": "x"}, "4 hex"),
        ({"name": "x", "vendor_id": "8086", "product_id": "154c", "numa_policy": "x"}, "socket"),
        ({"name": "x", "vendor_id": "8086", "product_id": "154c", "colour": "red"}, "colour"),
    ],
)
def test_alias_configuration_is_checked(entry: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        PciPassthroughFilter(alias=[entry])


def test_guest_cells_split_evenly_or_as_given() -> None:
    even = guest_topology({"hw:numa_nodes": "2"}, {}, 4, 2048)
    assert even is not None
    assert even.cells == (
        GuestCell(0, frozenset({0, 1}), 1024),
        GuestCell(1, frozenset({2, 3}), 1024),
    )
    assert guest_topology({"hw:cpu_policy": "shared"}, {}, 4, 2048) is None
    pinned = guest_topology({}, {"hw_cpu_policy": "dedicated"}, 2, 512)
    assert pinned is not None and pinned.dedicated and len(pinned.cells) == 1


@pytest.mark.parametrize(
    ("text", "kb"), [("small", "small"), ("2048", 2048), ("2MB", 2048), ("1GB", 1048576)]
)
def test_page_sizes(text: str, kb: int | str) -> None:
    assert page_size(text) == kb


def _edge(vcpus: int, mb: int, specs: dict[str, str], image: dict[str, str] | None = None) -> str:
    body = {
        "request_id": "r",
        "ts_ms": 1,
        "project_id": "p",
        "resources": {"VCPU": vcpus, "MEMORY_MB": mb},
        "extra_specs": specs,
        "image_properties": image or {},
    }
    with pytest.raises(ValidationError) as raised:
        PlacementRequest.model_validate_json(json.dumps(body))
    return str(raised.value)


CELLS = {"hw:numa_nodes": "2", "hw:numa_mem.0": "512", "hw:numa_mem.1": "512"}


@pytest.mark.parametrize(
    ("vcpus", "specs", "image", "words"),
    [
        (4, CELLS | {"hw:numa_cpus.0": "0", "hw:numa_cpus.1": "1"}, {}, "not 0..3"),
        (4, CELLS | {"hw:numa_cpus.0": "0-2", "hw:numa_cpus.1": "2,3"}, {}, "in cells 0 and 1"),
        (4, {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0,1"}, {}, "each cell 0..1"),
        (3, {"hw:numa_nodes": "2"}, {}, "do not split evenly"),
        (4, {"hw:mem_page_size": "3MB"}, {}, "not a page size"),
        (4, {"hw:mem_page_size": "huge"}, {}, "not a page size"),
        (4, {"hw:cpu_policy": "pinned"}, {}, "not shared, dedicated or mixed"),
        (4, {"hw:cpu_policy": "shared"}, {"hw_cpu_policy": "dedicated"}, "policy is shared"),
        (4, {"hw:numa_nodes": "2"}, {"hw_numa_nodes": "1"}, "conflicts with image"),
        (4, {"hw:mem_page_size": "2MB"}, {"hw_mem_page_size": "1GB"}, "page size is 2MB"),
        (4, {}, {"hw_mem_page_size": "1GB"}, "needs the flavor's"),
        (4, {"pci_passthrough:alias": "vf"}, {}, "name:count"),
        (4, {"pci_passthrough:alias": "vf:0"}, {}, "name:count"),
    ],
)
def test_bad_asks_are_refused_at_the_edge(
    vcpus: int, specs: dict[str, str], image: dict[str, str], words: str
) -> None:
    assert words in _edge(vcpus, 1024, specs, image)


def test_an_unknown_alias_is_refused_before_placing() -> None:
    assert PCI.refuses(pci("vf:1,nic:1,disk:2")) == (
        "PCI alias nic, disk not configured (configured: gpu, vf)"
    )
    assert PCI.refuses(pci("vf:1")) is None
    assert PCI.refuses(ask()) is None


def test_an_unknown_alias_fails_live_with_the_reason(tmp_path: Path) -> None:
    case = LiveCase(
        "PciPassthroughFilter",
        {"extra_specs": {"pci_passthrough:alias": "nic:1"}},
        None,
        options={"alias": ALIASES},
    )
    answer, _ = live(tmp_path, case)
    assert not answer["placed"]
    assert answer["reason"] == (
        "refused: PCI alias nic not configured (configured: gpu, vf) (PciPassthroughFilter)"
    )


@pytest.mark.parametrize(
    ("specs", "applies"),
    [
        ({"hw:cpu_policy": "dedicated", "pci_passthrough:alias": "vf:1"}, False),
        ({"hw:cpu_policy": "dedicated", "capabilities:hypervisor_type": "QEMU"}, True),
        ({"hw:numa_nodes": "2", "hypervisor_type": "QEMU"}, True),
        ({"hw:maxphysaddr_bits": "46"}, True),
    ],
)
def test_compute_capabilities_skips_requests_with_only_other_scopes(
    specs: dict[str, str], applies: bool
) -> None:
    # NUMA and PCI asks are scoped hw: and pci_passthrough:, which it never reads
    assert ComputeCapabilitiesFilter().applies(ask(extra_specs=specs)) is applies
