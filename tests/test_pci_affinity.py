"""PCI NUMA affinity policies and SR-IOV ports in PciPassthroughFilter
(issue 31 parts 2-3), from Nova's PCI passthrough guide: ``required``
devices on one of the guest's host cells, ``legacy`` there or on no known
cell, ``socket`` on a cell of the same socket, ``preferred`` anywhere; the
request's ``hw:pci_numa_affinity_policy`` over an alias's ``numa_policy``,
a port's own over both; a port wants a VF (or, ``direct-physical``, a PF)
on its physical network."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from berth.cli import main
from scheduling.filters.base import Context
from scheduling.filters.pci_passthrough import PciPassthroughFilter, choose, near_fit, wants_of
from scheduling.model import Provider, Request, Snapshot
from scheduling.topology import HostCell, HostDevice
from schemas.guest_topology import SriovPort, guest_topology
from schemas.requests import PlacementRequest
from tests.test_cli import run_demo
from tests.test_filters_host import Case, check, host, ids


def cell(cid: int, dedicated: int = 4, socket: int | None = None) -> HostCell:
    cpus = frozenset(range(cid * 10, cid * 10 + dedicated))
    return HostCell(cid, cpus, cpus, frozenset(), memory_mb=8192, socket=socket)


def vf(n: int, node: int | None, network: str | None = None) -> HostDevice:
    return HostDevice(f"0000:04:00.{n}", "8086", "154c", "type-VF", "0000:04:00.0", node, network)


def pf(node: int | None, network: str) -> HostDevice:
    return HostDevice("0000:05:00.0", "8086", "1572", "type-PF", None, node, network)


def alias(policy: str = "legacy") -> list[dict[str, str]]:
    return [{"name": "vf", "vendor_id": "8086", "product_id": "154c", "numa_policy": policy}]


def guest(
    vcpus: int = 4,
    ports: tuple[SriovPort, ...] = (),
    image: dict[str, str] | None = None,
    /,
    **specs: str,
) -> Request:
    return Request(
        "r",
        {"VCPU": vcpus, "MEMORY_MB": 1024},
        extra_specs={"hw:cpu_policy": "dedicated", **specs},
        image_properties=image or {},
        sriov_ports=ports,
    )


ONE_VF = {"pci_passthrough:alias": "vf:1"}
REQUIRED = PciPassthroughFilter(alias("required"))
LEGACY = PciPassthroughFilter(alias("legacy"))
PREFERRED = PciPassthroughFilter(alias("preferred"))
SOCKET = PciPassthroughFilter(alias("socket"))
SMALL_1 = (cell(0), cell(1, dedicated=2))  # a 4-vCPU guest fits cell 0 only

CASES = [
    Case(
        "required: the guest takes the device's cell",
        REQUIRED,
        host(numa_cells=(cell(0), cell(1)), pci_devices=(vf(1, 1),)),
        guest(**ONE_VF),
    ),
    Case(
        "required: the device's cell cannot take the guest",
        REQUIRED,
        host(numa_cells=SMALL_1, pci_devices=(vf(1, 1),)),
        guest(**ONE_VF),
        expected="PCI alias vf wanted 1 of 8086:154c near the guest's host cell(s) 0"
        " (NUMA policy required): host cell 0 has 0; host cell 1 has 1",
    ),
    Case(
        "required: a device on no known cell does not count",
        REQUIRED,
        host(numa_cells=SMALL_1, pci_devices=(vf(1, None),)),
        guest(**ONE_VF),
        expected="PCI alias vf wanted 1 of 8086:154c near the guest's host cell(s) 0"
        " (NUMA policy required): host cell 0 has 0; host cell 1 has 0; 1 on no known cell",
    ),
    Case(
        "legacy: a device on no known cell does",
        LEGACY,
        host(numa_cells=SMALL_1, pci_devices=(vf(1, None),)),
        guest(**ONE_VF),
    ),
    Case(
        "legacy: a device on another cell does not",
        LEGACY,
        host(numa_cells=SMALL_1, pci_devices=(vf(1, 1),)),
        guest(**ONE_VF),
        expected="PCI alias vf wanted 1 of 8086:154c near the guest's host cell(s) 0"
        " (NUMA policy legacy): host cell 0 has 0; host cell 1 has 1",
    ),
    Case(
        "preferred: anywhere",
        PREFERRED,
        host(numa_cells=SMALL_1, pci_devices=(vf(1, 1),)),
        guest(**ONE_VF),
    ),
    Case(
        "the request's policy over the alias's",
        REQUIRED,
        host(numa_cells=SMALL_1, pci_devices=(vf(1, 1),)),
        guest(**ONE_VF, **{"hw:pci_numa_affinity_policy": "preferred"}),
    ),
    Case(
        "the image's policy over the alias's",
        PREFERRED,
        host(numa_cells=SMALL_1, pci_devices=(vf(1, 1),)),
        guest(4, (), {"hw_pci_numa_affinity_policy": "required"}, **ONE_VF),
        expected="PCI alias vf wanted 1 of 8086:154c near the guest's host cell(s) 0"
        " (NUMA policy required): host cell 0 has 0; host cell 1 has 1",
    ),
    Case(
        "no guest NUMA topology: no cells to be near",
        REQUIRED,
        host(numa_cells=SMALL_1, pci_devices=(vf(1, 1),)),
        Request("r", {"VCPU": 4}, extra_specs=ONE_VF),
    ),
    Case(
        "two devices, two guest cells: each on the cell of one",
        REQUIRED,
        host(numa_cells=(cell(0), cell(1), cell(2)), pci_devices=(vf(1, 0), vf(2, 2))),
        guest(8, **{"pci_passthrough:alias": "vf:2", "hw:numa_nodes": "2"}),
    ),
    Case(
        "two devices on one cell the guest's cells cannot both use",
        REQUIRED,
        host(numa_cells=(cell(0), cell(1, dedicated=2)), pci_devices=(vf(1, 1), vf(2, 1))),
        guest(4, **{"pci_passthrough:alias": "vf:2"}),
        expected="PCI alias vf wanted 2 of 8086:154c near the guest's host cell(s) 0"
        " (NUMA policy required): host cell 0 has 0; host cell 1 has 2",
    ),
]

# Nova's example: nodes 0 and 1 on socket 0, 2 and 3 on socket 1, a device on node 0
SOCKETS = tuple(cell(n, socket=n // 2) for n in range(4))


def _sockets(free: tuple[int, ...]) -> tuple[HostCell, ...]:
    """Nova's four nodes, only ``free`` able to take a guest cell of 4."""
    return tuple(cell(n, 4 if n in free else 1, socket=n // 2) for n in range(4))


SOCKET_CASES = [
    Case(
        f"socket: guest cells fit only nodes {free}",
        SOCKET,
        host(numa_cells=_sockets(free), pci_devices=(vf(1, 0),)),
        guest(8, **ONE_VF, **{"hw:numa_nodes": "2"}),
        expected=None
        if ok
        else "PCI alias vf wanted 1 of 8086:154c near the guest's host cell(s) 2, 3"
        " (NUMA policy socket): host cell 0 (socket 0) has 1; host cell 1 (socket 0) has 0;"
        " host cell 2 (socket 1) has 0; host cell 3 (socket 1) has 0",
    )
    for free, ok in [((0, 1), True), ((1, 2), True), ((1, 3), True), ((2, 3), False)]
]

PORT = SriovPort("physnet1")
PORT_CASES = [
    Case(
        "a port: a VF on its physical network",
        LEGACY,
        host(pci_devices=(vf(1, None, "physnet2"), vf(2, None, "physnet1"))),
        Request("r", {"VCPU": 1}, sriov_ports=(PORT,)),
    ),
    Case(
        "a port: none on its physical network",
        LEGACY,
        host(pci_devices=(vf(1, None, "physnet2"),)),
        Request("r", {"VCPU": 1}, sriov_ports=(PORT, PORT)),
        expected="SR-IOV ports wanted 2 of type-VF on physical network physnet1, provider has 0",
    ),
    Case(
        "a direct-physical port takes a PF",
        LEGACY,
        host(pci_devices=(vf(1, None, "physnet1"), pf(None, "physnet1"))),
        Request("r", {"VCPU": 1}, sriov_ports=(SriovPort("physnet1", "direct-physical"),)),
    ),
    Case(
        "an alias and a port take different devices",
        LEGACY,
        host(pci_devices=(vf(1, None, "physnet1"),)),
        Request("r", {"VCPU": 1}, extra_specs=ONE_VF, sriov_ports=(PORT,)),
        expected="SR-IOV ports wanted 1 of type-VF on physical network physnet1, provider has 0",
    ),
    Case(
        "a port near the guest's cell (the request's policy)",
        LEGACY,
        host(numa_cells=SMALL_1, pci_devices=(vf(1, 1, "physnet1"),)),
        guest(4, (PORT,), None, **{"hw:pci_numa_affinity_policy": "required"}),
        expected="SR-IOV ports wanted 1 of type-VF on physical network physnet1 near the"
        " guest's host cell(s) 0 (NUMA policy required): host cell 0 has 0; host cell 1 has 1",
    ),
    Case(
        "a port's own policy over the request's",
        LEGACY,
        host(numa_cells=SMALL_1, pci_devices=(vf(1, 1, "physnet1"),)),
        guest(
            4,
            (SriovPort("physnet1", numa_affinity_policy="preferred"),),
            None,
            **{"hw:pci_numa_affinity_policy": "required"},
        ),
    ),
]


@pytest.mark.parametrize(
    "case", CASES + SOCKET_CASES + PORT_CASES, ids=ids(CASES + SOCKET_CASES + PORT_CASES)
)
def test_pci_numa_affinity_and_ports(case: Case) -> None:
    check(case)


def test_an_alias_s_entries_share_one_numa_policy() -> None:
    entries = [*alias("required"), {**alias("legacy")[0], "product_id": "154d"}]
    with pytest.raises(ValueError, match="different numa_policy"):
        PciPassthroughFilter(entries)


def _edge(fields: dict[str, Any]) -> str:
    body = {"request_id": "r", "ts_ms": 1, "project_id": "p", "resources": {"VCPU": 1}}
    with pytest.raises(ValidationError) as raised:
        PlacementRequest.model_validate_json(json.dumps(body | fields))
    return str(raised.value)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"extra_specs": {"hw:pci_numa_affinity_policy": "near"}}, "not one of required"),
        (
            {
                "extra_specs": {"hw:pci_numa_affinity_policy": "required"},
                "image_properties": {"hw_pci_numa_affinity_policy": "socket"},
            },
            "conflicts with image",
        ),
        ({"sriov_ports": [{"physical_network": ""}]}, "at least 1 character"),
        ({"sriov_ports": [{"physical_network": "p", "vnic_type": "normal"}]}, "direct"),
        (
            {"sriov_ports": [{"physical_network": "p", "numa_affinity_policy": "x"}]},
            "required",
        ),
    ],
)
def test_bad_policies_and_ports_are_refused_at_the_edge(fields: dict[str, Any], words: str) -> None:
    assert words in _edge(fields)


@st.composite
def _hosts_and_asks(draw: st.DrawFn) -> tuple[Provider, Request, str]:
    cells = tuple(
        cell(c, draw(st.integers(0, 4)), draw(st.one_of(st.none(), st.integers(0, 1))))
        for c in range(draw(st.integers(1, 4)))
    )
    nodes = st.one_of(st.none(), st.integers(0, len(cells) - 1))
    devices = tuple(vf(i + 1, draw(nodes)) for i in range(draw(st.integers(0, 5))))
    guest_cells = draw(st.integers(1, 2))
    per_cell = draw(st.integers(1, 3))
    policy = draw(st.sampled_from(["required", "legacy", "preferred", "socket"]))
    count = draw(st.integers(1, 3))
    specs = {
        "pci_passthrough:alias": f"vf:{count}",
        "hw:pci_numa_affinity_policy": policy,
        "hw:numa_nodes": str(guest_cells),
    }
    provider = Provider("p", numa_cells=cells, pci_devices=devices)
    return provider, guest(guest_cells * per_cell, (), None, **specs), policy


def _nova_like(provider: Provider, request: Request, policy: str) -> bool:
    """The oracle: Nova's way, every permutation of host cells for the
    guest's cells, then the devices near the chosen ones counted."""
    topology = guest_topology(dict(request.extra_specs), {}, request.resources["VCPU"], 1024)
    assert topology is not None
    count = int(request.extra_specs["pci_passthrough:alias"].split(":")[1])
    hosts, devices = provider.numa_cells, provider.pci_devices
    fitting = [
        chosen
        for chosen in itertools.permutations(hosts, len(topology.cells))
        if all(len(g.cpus) <= len(h.dedicated) for g, h in zip(topology.cells, chosen, strict=True))
    ]
    if not fitting:
        return len(devices) >= count  # no fit: NUMATopologyFilter's to refuse
    for chosen in fitting:
        ids = {h.cell_id for h in chosen}
        sockets = {h.socket for h in chosen if h.socket is not None}
        socket_of = {h.cell_id: h.socket for h in hosts}
        near = [
            d
            for d in devices
            if policy == "preferred"
            or (policy == "legacy" and (d.numa_node is None or d.numa_node in ids))
            or (policy == "required" and d.numa_node in ids)
            or (
                policy == "socket" and d.numa_node is not None and socket_of[d.numa_node] in sockets
            )
        ]
        if len(near) >= count:
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(_hosts_and_asks())
def test_the_filter_agrees_with_nova_s_permutations(case: tuple[Provider, Request, str]) -> None:
    provider, request, policy = case
    snap = Snapshot.build([provider], {"p": {"VCPU": {"total": 64}}})
    passed = REQUIRED.reject(Context.start(snap, request), 0) is None
    assert passed is _nova_like(provider, request, policy)


def test_wants_sharing_devices_are_fitted_exactly() -> None:
    # the alias takes any 8086:154c VF; the port needs the one on physnet1. Taken
    # in turn the alias would take that one first and leave the port short.
    devices = (vf(1, None, "physnet1"), vf(2, None))
    provider = Provider("p", pci_devices=devices)
    snap = Snapshot.build([provider], {"p": {"VCPU": {"total": 8}}})
    request = Request("r", {"VCPU": 1}, extra_specs=ONE_VF, sriov_ports=(PORT,))
    assert LEGACY.reject(Context.start(snap, request), 0) is None
    both = Request("r", {"VCPU": 1}, extra_specs={"pci_passthrough:alias": "vf:2"},
                   sriov_ports=(PORT,))  # fmt: skip
    assert LEGACY.reject(Context.start(snap, both), 0) == (
        "SR-IOV ports wanted 1 of type-VF on physical network physnet1, provider has 0"
    )


def test_near_fit_names_the_host_cells_and_the_devices() -> None:
    # what a claim would carry: the guest on cell 1, where its VF is
    hosts = (cell(0), cell(1))
    devices = (vf(1, 0, "physnet2"), vf(2, 1, "physnet1"))
    request = guest(4, (PORT,), None, **{"hw:pci_numa_affinity_policy": "required"})
    wants = wants_of(request, REQUIRED.aliases)
    topology = guest_topology(dict(request.extra_specs), {}, 4, 1024)
    assert topology is not None
    assert near_fit(wants, devices, hosts, topology, (1.0, 1.0)) == ([1], ("0000:04:00.2",))
    # the exact pass gives each want its own device
    both = wants_of(
        Request("r", {"VCPU": 1}, extra_specs=ONE_VF, sriov_ports=(PORT,)), LEGACY.aliases
    )
    assert choose(both, (vf(1, None, "physnet1"), vf(2, None)), None) == (
        "0000:04:00.2",
        "0000:04:00.1",
    )


def test_berth_explain_asks_for_ports_and_thread_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the demo gives one provider in four two cells of hardware threads and
    # four VFs on physnet1 (cell 0); the others describe neither
    data = tmp_path / "demo"
    run_demo(data, capsys)
    config = tmp_path / "scheduler.toml"
    config.write_text(
        '[filters]\nenabled = ["ResourceFilter", "NUMATopologyFilter", "PciPassthroughFilter"]\n'
    )
    explain = ["explain", "--data-dir", str(data), "--config", str(config)]
    asked = ["--resources", "VCPU=2,MEMORY_MB=1024", "--sriov-port", "physnet1"]
    assert main([*explain, *asked]) == 0
    out = capsys.readouterr().out
    assert "SR-IOV ports wanted 1 of type-VF on physical network physnet1, provider has 0" in out
    pinned = ["--extra-spec", "hw:cpu_policy=dedicated"]
    assert main([*explain, *asked, *pinned, "--extra-spec", "hw:cpu_thread_policy=isolate"]) == 1
    out = capsys.readouterr().out
    assert (
        "host cell 0 has hardware thread siblings 0+1, 2+3, 4+5, ... (thread policy isolate)" in out
    )
    shape = ["--resources", "VCPU=2,MEMORY_MB=1024"]
    moved = ["--move-from", "nowhere", "--sriov-port", "physnet1:direct-physical"]
    assert main([*explain, *shape, *moved, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["placed"]
    # the PF and a VF of it are never given together
    assert main([*explain, *asked, *moved]) == 1
    assert "SR-IOV ports wanted 1 of type-PF on physical network physnet1, provider has 0" in (
        capsys.readouterr().out
    )
    assert main([*explain, *asked, "--sriov-port", "physnet1:normal"]) == 2
    assert "vnic_type" in capsys.readouterr().err


def test_never_a_pf_with_one_of_its_vfs() -> None:
    # an alias matching the PF and its VFs alike gets two VFs, or a VF and a
    # lone device, never the PF and a VF of it
    pf_dev = HostDevice("0000:04:00.0", "8086", "154c", "type-PF")
    one_vf = vf(1, None)
    devices: tuple[HostDevice, ...] = (pf_dev, one_vf)
    any_kind = PciPassthroughFilter([alias()[0]])
    two = wants_of(
        Request("r", {"VCPU": 1}, extra_specs={"pci_passthrough:alias": "vf:2"}), any_kind.aliases
    )
    assert choose(two, devices, None) == "PCI alias vf wanted 2 of 8086:154c, provider has 1"
    assert choose(two, (*devices, vf(2, None)), None) == ("0000:04:00.1", "0000:04:00.2")
    one = wants_of(Request("r", {"VCPU": 1}, extra_specs=ONE_VF), any_kind.aliases)
    assert choose(one, devices, None) == ("0000:04:00.1",)  # the VF: the PF stays whole
    assert choose(one, (pf_dev,), None) == ("0000:04:00.0",)
