"""Thread policies, the mixed CPU policy and their flavor/image rules in
the NUMA fit (issue 31 parts 2-3), from Nova's CPU topologies guide:
``require`` wants hardware threads, ``isolate`` forbids them, ``prefer``
takes either; a ``mixed`` guest pins its ``hw:cpu_dedicated_mask`` vCPUs
on dedicated CPUs and floats the rest on shared ones; the explain line
names the host cell and what it lacked."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from scheduling.filters.base import Context
from scheduling.filters.numa_topology import NUMATopologyFilter
from scheduling.model import Provider, Request, Snapshot
from scheduling.topology import HostCell
from schemas.guest_topology import guest_topology
from schemas.requests import PlacementRequest
from tests.test_filters_host import Case, check, host, ids

NUMA = NUMATopologyFilter()


def smt(cid: int, cores: int, shared: int = 0, threads: int = 2) -> HostCell:
    """A host cell of ``cores`` dedicated cores of ``threads`` siblings
    each (1: no hardware threads), then ``shared`` floating CPUs."""
    first = cid * 100
    groups = [
        frozenset(range(first + c * threads, first + (c + 1) * threads)) for c in range(cores)
    ]
    pinned = frozenset().union(*groups)
    floating = frozenset(range(first + 50, first + 50 + shared))
    siblings = tuple(g for g in groups if len(g) > 1)
    return HostCell(cid, pinned | floating, pinned, floating, siblings, memory_mb=8192)


def guest(vcpus: int, image: Mapping[str, str] | None = None, /, **specs: str) -> Request:
    return Request(
        "r", {"VCPU": vcpus, "MEMORY_MB": 1024}, extra_specs=specs, image_properties=image or {}
    )


PIN = {"hw:cpu_policy": "dedicated"}
REALTIME = {"hw:cpu_realtime": "yes"}
THREADED = (smt(0, cores=2),)  # 4 dedicated CPUs: 0+1, 2+3
PLAIN = (smt(0, cores=4, threads=1),)  # 4 dedicated CPUs, no siblings

CASES = [
    Case(
        "prefer takes threads",
        NUMA,
        host(numa_cells=THREADED),
        guest(4, **PIN, **{"hw:cpu_thread_policy": "prefer"}),
    ),
    Case(
        "prefer takes no threads",
        NUMA,
        host(numa_cells=PLAIN),
        guest(4, **PIN, **{"hw:cpu_thread_policy": "prefer"}),
    ),
    Case(
        "require on threads",
        NUMA,
        host(numa_cells=THREADED),
        guest(2, **PIN, **{"hw:cpu_thread_policy": "require"}),
    ),
    Case(
        "require without threads",
        NUMA,
        host(numa_cells=PLAIN),
        guest(2, **PIN, **{"hw:cpu_thread_policy": "require"}),
        expected="guest cell 0 fits no host cell: host cell 0 has no hardware thread siblings"
        " (thread policy require)",
    ),
    Case(
        "isolate without threads",
        NUMA,
        host(numa_cells=PLAIN),
        guest(4, **PIN, **{"hw:cpu_thread_policy": "isolate"}),
    ),
    Case(
        "isolate on threads",
        NUMA,
        host(numa_cells=THREADED),
        guest(1, **PIN, **{"hw:cpu_thread_policy": "isolate"}),
        expected="guest cell 0 fits no host cell: host cell 0 has hardware thread siblings"
        " 0+1, 2+3 (thread policy isolate)",
    ),
    Case(
        "isolate: the cell without threads of two",
        NUMA,
        host(numa_cells=(*THREADED, smt(1, cores=2, threads=1))),
        guest(2, **PIN, **{"hw:cpu_thread_policy": "isolate"}),
    ),
    Case(
        "isolate: a sibling among the shared CPUs is still a hardware thread",
        NUMA,
        host(
            numa_cells=(
                HostCell(
                    0,
                    frozenset({0, 1}),
                    frozenset({0}),
                    frozenset({1}),
                    (frozenset({0, 1}),),
                    memory_mb=4096,
                ),
            )
        ),
        guest(1, **PIN, **{"hw:cpu_thread_policy": "isolate"}),
        expected="guest cell 0 fits no host cell: host cell 0 has hardware thread siblings"
        " 0+1 (thread policy isolate)",
    ),
    Case(
        "the image's thread policy",
        NUMA,
        host(numa_cells=PLAIN),
        guest(2, {"hw_cpu_thread_policy": "require"}, **PIN),
        expected="guest cell 0 fits no host cell: host cell 0 has no hardware thread siblings"
        " (thread policy require)",
    ),
    Case(
        "mixed: pinned on dedicated, the rest on shared",
        NUMA,
        host(numa_cells=(smt(0, cores=2, shared=2, threads=1),)),
        guest(4, **{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-1"}),
    ),
    Case(
        "mixed: too few dedicated CPUs for the pinned ones",
        NUMA,
        host(numa_cells=(smt(0, cores=2, shared=4, threads=1),)),
        guest(4, **{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0"}),
        expected="guest cell 0 fits no host cell: host cell 0 has 2 dedicated CPUs,"
        " wanted 3 pinned",
    ),
    Case(
        "mixed: too few shared CPUs for the floating ones",
        NUMA,
        host(numa_cells=(smt(0, cores=4, shared=1, threads=1),)),
        guest(4, **{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-1"}),
        expected="guest cell 0 fits no host cell: host cell 0 has 1 shared vCPUs,"
        " wanted 2 floating",
    ),
    Case(
        "mixed over two cells: each cell pins its own share of the mask",
        NUMA,
        host(
            numa_cells=(smt(0, cores=3, shared=1, threads=1), smt(1, cores=1, shared=3, threads=1))
        ),
        guest(
            8, **{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-2,4", "hw:numa_nodes": "2"}
        ),
    ),
    Case(
        "mixed with require: threads for the pinned vCPUs",
        NUMA,
        host(numa_cells=(smt(0, cores=2, shared=2, threads=1),)),
        guest(
            3,
            **{
                "hw:cpu_policy": "mixed",
                "hw:cpu_dedicated_mask": "0",
                "hw:cpu_thread_policy": "require",
            },
        ),
        expected="guest cell 0 fits no host cell: host cell 0 has no hardware thread siblings"
        " (thread policy require)",
    ),
    Case(
        "mixed by the realtime mask: the real-time vCPUs pinned, the rest floating",
        NUMA,
        host(numa_cells=(smt(0, cores=3, shared=1, threads=1),)),
        guest(4, **{"hw:cpu_policy": "mixed", **REALTIME, "hw:cpu_realtime_mask": "^0"}),
    ),
    Case(
        "mixed by the realtime mask: too few dedicated CPUs for the real-time vCPUs",
        NUMA,
        host(numa_cells=(smt(0, cores=1, shared=3, threads=1),)),
        guest(4, **{"hw:cpu_policy": "mixed", **REALTIME, "hw:cpu_realtime_mask": "^0"}),
        expected="guest cell 0 fits no host cell: host cell 0 has 1 dedicated CPUs,"
        " wanted 3 pinned",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_thread_and_mixed_policies(case: Case) -> None:
    check(case)


def test_mixed_topology_and_the_mask_forms() -> None:
    found = guest_topology({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0-1"}, {}, 4, 1024)
    assert found is not None and not found.dedicated
    assert found.dedicated_mask == {2, 3} and found.pinned(found.cells[0]) == 2
    image = guest_topology({"hw:cpu_dedicated_mask": "1"}, {"hw_cpu_policy": "mixed"}, 2, 512)
    assert image is not None and image.dedicated_mask == {1}
    # the flavor's dedicated wins over the image's mixed
    flavor = guest_topology({"hw:cpu_policy": "dedicated"}, {"hw_cpu_policy": "mixed"}, 2, 512)
    assert flavor is not None and flavor.dedicated and flavor.dedicated_mask == frozenset()
    agreed = guest_topology(
        PIN | {"hw:cpu_thread_policy": "isolate"}, {"hw_cpu_thread_policy": "isolate"}, 2, 512
    )
    assert agreed is not None and agreed.thread_policy == "isolate"


def test_the_realtime_mask_in_nova_s_two_forms() -> None:
    """``^`` excludes (the vCPUs that are not real-time), no ``^`` names
    the real-time ones (Nova since Victoria); a mixed guest's real-time
    vCPUs are its pinned ones; the flavor's mask over the image's."""
    mixed = {"hw:cpu_policy": "mixed", **REALTIME}
    excluded = guest_topology(mixed | {"hw:cpu_realtime_mask": "^0-1"}, {}, 4, 1024)
    assert excluded is not None and excluded.dedicated_mask == {2, 3}
    named = guest_topology(mixed | {"hw:cpu_realtime_mask": "1,3"}, {}, 4, 1024)
    assert named is not None and named.dedicated_mask == {1, 3}
    image = guest_topology(mixed, {"hw_cpu_realtime_mask": "^0"}, 4, 1024)
    assert image is not None and image.dedicated_mask == {1, 2, 3}
    both = guest_topology(
        mixed | {"hw:cpu_realtime_mask": "^3"}, {"hw_cpu_realtime_mask": "^0"}, 4, 1024
    )
    assert both is not None and both.dedicated_mask == {0, 1, 2}
    # a dedicated guest pins every vCPU, real-time or not
    pinned = guest_topology(PIN | REALTIME | {"hw:cpu_realtime_mask": "^0"}, {}, 2, 512)
    assert pinned is not None and pinned.dedicated
    # with the emulator threads on CPUs of their own, every vCPU may be real-time
    emulator = PIN | REALTIME | {"hw:emulator_threads_policy": "isolate"}
    assert guest_topology(emulator, {}, 2, 512) is not None
    # realtime off: no mask, nothing changes
    off = guest_topology(PIN | {"hw:cpu_realtime": "no"}, {}, 2, 512)
    assert off is not None and off.dedicated


def _edge(specs: dict[str, str], image: dict[str, str] | None = None, vcpus: int = 4) -> str:
    body = {
        "request_id": "r",
        "ts_ms": 1,
        "project_id": "p",
        "resources": {"VCPU": vcpus, "MEMORY_MB": 1024},
        "extra_specs": specs,
        "image_properties": image or {},
    }
    with pytest.raises(ValidationError) as raised:
        PlacementRequest.model_validate_json(json.dumps(body))
    return str(raised.value)


MIXED = {"hw:cpu_policy": "mixed"}


@pytest.mark.parametrize(
    ("specs", "image", "words"),
    [
        ({"hw:cpu_thread_policy": "isolate"}, {}, "applies to pinned vCPUs"),
        ({}, {"hw_cpu_thread_policy": "require"}, "applies to pinned vCPUs"),
        (PIN | {"hw:cpu_thread_policy": "sometimes"}, {}, "not prefer, isolate or require"),
        (
            PIN | {"hw:cpu_thread_policy": "isolate"},
            {"hw_cpu_thread_policy": "require"},
            "conflicts with image",
        ),
        (MIXED, {}, "needs hw:cpu_dedicated_mask"),
        (MIXED | {"hw:cpu_dedicated_mask": "0-3"}, {}, "pins 4 of 4"),
        (MIXED | {"hw:cpu_dedicated_mask": "^0-3"}, {}, "pins 0 of 4"),
        (MIXED | {"hw:cpu_dedicated_mask": "2-5"}, {}, "beyond 0..3"),
        (MIXED | {"hw:cpu_dedicated_mask": "x"}, {}, "not a CPU list"),
        (PIN | {"hw:cpu_dedicated_mask": "0"}, {}, "is for hw:cpu_policy=mixed"),
        ({"hw:cpu_policy": "shared"}, {"hw_cpu_policy": "mixed"}, "policy is shared"),
        (MIXED | {"hw:cpu_dedicated_mask": "0"}, {"hw_cpu_policy": "dedicated"}, "policy is mixed"),
        (PIN | {"hw:cpu_realtime_mask": "^0"}, {}, "only valid with hw:cpu_realtime=yes"),
        (PIN, {"hw_cpu_realtime_mask": "^0"}, "only valid with hw:cpu_realtime=yes"),
        (REALTIME | {"hw:cpu_realtime_mask": "^0"}, {}, "needs pinned vCPUs"),
        (PIN | REALTIME, {}, "needs hw:cpu_realtime_mask"),
        (PIN | REALTIME | {"hw:cpu_realtime_mask": "0-3"}, {}, "makes every vCPU real-time"),
        (PIN | REALTIME | {"hw:cpu_realtime_mask": "^0-3"}, {}, "leaves no vCPU real-time"),
        (PIN | REALTIME | {"hw:cpu_realtime_mask": "4"}, {}, "beyond 0..3"),
        (PIN | {"hw:cpu_realtime": "maybe"}, {}, "not yes or no"),
        (
            MIXED | REALTIME | {"hw:cpu_realtime_mask": "^0", "hw:cpu_dedicated_mask": "1"},
            {},
            "give one",
        ),
        (MIXED | REALTIME | {"hw:cpu_realtime_mask": "^0-3"}, {}, "leaves no vCPU real-time"),
    ],
)
def test_bad_policies_are_refused_at_the_edge(
    specs: dict[str, str], image: dict[str, str], words: str
) -> None:
    assert words in _edge(specs, image)


@st.composite
def _cells_and_guests(draw: st.DrawFn) -> tuple[tuple[HostCell, ...], Request]:
    hosts = tuple(
        smt(
            c,
            cores=draw(st.integers(0, 3)),
            shared=draw(st.integers(0, 3)),
            threads=draw(st.sampled_from([1, 2])),
        )
        for c in range(draw(st.integers(1, 3)))
    )
    nodes = draw(st.integers(1, 2))
    vcpus = nodes * draw(st.integers(1, 3))
    specs = {"hw:numa_nodes": str(nodes)}
    if draw(st.booleans()) and vcpus > 1:
        pinned = draw(st.sets(st.integers(0, vcpus - 1), min_size=1, max_size=vcpus - 1))
        specs |= {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": ",".join(map(str, pinned))}
    else:
        specs["hw:cpu_policy"] = "dedicated"
    threads = draw(st.sampled_from([None, "prefer", "isolate", "require"]))
    if threads is not None:
        specs["hw:cpu_thread_policy"] = threads
    return hosts, guest(vcpus, None, **specs)


def _nova_like(hosts: tuple[HostCell, ...], request: Request) -> bool:
    """The oracle: every permutation of host cells, each guest cell judged
    on its own as the guides say."""
    specs = dict(request.extra_specs)
    topology = guest_topology(specs, {}, request.resources["VCPU"], 1024)
    assert topology is not None
    policy = specs.get("hw:cpu_thread_policy")

    def fits(h: HostCell, cpus: frozenset[int]) -> bool:
        pinned = cpus if topology.dedicated else cpus & topology.dedicated_mask
        floating = len(cpus) - len(pinned)
        threads_ok = (
            not pinned
            or policy not in ("isolate", "require")
            or (policy == "require") == bool(h.siblings)
        )
        return len(pinned) <= len(h.dedicated) and floating <= len(h.shared) and threads_ok

    return any(
        all(fits(h, g.cpus) for g, h in zip(topology.cells, chosen, strict=True))
        for chosen in itertools.permutations(hosts, len(topology.cells))
    )


@settings(max_examples=300, deadline=None)
@given(_cells_and_guests())
def test_the_fit_agrees_with_nova_s_permutations(
    case: tuple[tuple[HostCell, ...], Request],
) -> None:
    hosts, request = case
    snap = Snapshot.build([Provider("p", numa_cells=hosts)], {"p": {"VCPU": {"total": 64}}})
    assert (NUMA.reject(Context.start(snap, request), 0) is None) is _nova_like(hosts, request)
