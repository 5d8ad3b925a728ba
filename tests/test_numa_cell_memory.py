"""A guest cell's small-page memory and floating vCPUs held per host cell
(issue 31): the claim's fit names them, the partition's writer holds them
against the host cell under the provider's allocation ratios (small pages
and shared CPUs over-subscribable, huge pages never), refuses with
TOPOLOGY_TAKEN what no longer fits, gives them back on release, expiry and
abort, and a restarted writer, the live snapshot, ``berth history`` and a
replay all see the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from berth.history import read_history, render
from berth.replay import replay
from consumers.partition_writer import catch_up_all
from consumers.scheduler import OutcomeFollower, Scheduler
from consumers.snapshot_source import LiveSnapshot, snapshot_from_view
from projections.state import PartitionState
from projections.view.loader import load_state
from projections.view.tables import provider_usage, reservations
from scheduling.config import SchedulerConfig
from scheduling.filters.numa_topology import cell_lack
from scheduling.topology import HostCell, free_in
from schemas.events import ClaimSet, TransactionDecision, TransactionRef
from schemas.guest_topology import GuestCell, GuestTopology
from schemas.requests import PlacementRequest
from tests.builders import briefs, fresh_state, provider, release, run, tick
from tests.builders import topology as described
from tests.test_numa_claims import LEASE_MS, pinned, spec
from tests.test_numa_topology import cell

NOW_MS = 10**12
SMALL_MB = 3072  # cell(): 4096 MiB, 1 GiB of it in 2 MiB pages


def floating(*cells: tuple[int, int, int], **pages: int) -> dict[str, Any]:
    """A fit of floating guest cells: (guest cell, host cell, MB) each, with
    one floating vCPU each; ``p<host cell>`` gives that cell 2 MiB pages
    instead of small-page memory."""
    out = []
    for g, h, mb in cells:
        part: dict[str, Any] = {"guest_cell": g, "host_cell": h, "vcpus": 1}
        if f"p{h}" in pages:
            part["pages"] = [{"size_kb": 2048, "count": pages[f"p{h}"]}]
        else:
            part["memory_mb"] = mb
        out.append(part)
    return {"cells": out}


def host(pid: str = "n1", ram_ratio: float = 1.5, cpu_ratio: float = 2.0) -> list[Any]:
    """Two cells of 4 CPUs, 2 of them shared; 3072 MiB of small pages each;
    the provider's totals far beyond the cells', so the cells run out first."""
    return [
        *provider(pid, ts=1, VCPU=(64, cpu_ratio), MEMORY_MB=(65536, ram_ratio)),
        described(pid, ts=1, numa_cells=[cell(0, 0), cell(1, 4)]),
    ]


def state_with_host(ram_ratio: float = 1.5, cpu_ratio: float = 2.0) -> PartitionState:
    state = fresh_state()
    run(host(ram_ratio=ram_ratio, cpu_ratio=cpu_ratio), state)
    return state


def cells_held(state: PartitionState, pid: str = "n1") -> tuple[dict[int, int], dict[int, int]]:
    use = state.providers[pid].topology_use
    return ({}, {}) if use is None else (dict(use.memory), dict(use.vcpus))


def claim(rid: str, the_fit: dict[str, Any], ts: int = 1) -> Any:
    return pinned(rid, "n1", the_fit, ts=ts, VCPU=len(the_fit["cells"]), MEMORY_MB=1)


# --- the writer ------------------------------------------------------------------


def test_the_writer_holds_a_cells_memory_under_its_ratio_and_refuses_past_it() -> None:
    state = state_with_host()  # 3072 MB x 1.5: 4608 MB per cell
    decided = run(
        [
            claim("r1", floating((0, 0, 2048), (1, 1, 1024))),
            claim("r2", floating((0, 0, 2048))),
            claim("r3", floating((0, 0, 1024))),  # 5120 > 4608
            claim("r4", floating((0, 1, 3072))),
            claim("r5", floating((0, 1, 3584))),  # alone more than the cell's 3072
            claim("r6", floating((0, 0, 512))),
        ],
        state,
    )
    assert [briefs(d) for d in decided] == [
        f"accepted r1 until {1 + LEASE_MS}",
        f"accepted r2 until {1 + LEASE_MS}",
        "rejected r3 TOPOLOGY_TAKEN@MEMORY_MB=1024/512",
        f"accepted r4 until {1 + LEASE_MS}",
        "rejected r5 TOPOLOGY_NOT_PROVIDED@MEMORY_MB=3584/512",
        f"accepted r6 until {1 + LEASE_MS}",
    ]
    assert decided[2][0].reasons[0].detail == (
        "guest cell 0 on host cell 0: 4096 of its 4608 MB of small pages held, wanted 1024"
    )
    assert cells_held(state) == ({0: 4608, 1: 4096}, {0: 3, 1: 2})


def test_shared_vcpus_are_held_per_cell_under_the_vcpu_ratio() -> None:
    state = state_with_host(cpu_ratio=2.0)  # 2 shared CPUs x 2: 4 floating vCPUs per cell
    decided = run([claim(f"r{i}", floating((0, 1, 10))) for i in range(5)], state)
    assert [briefs(d).split(" until")[0] for d in decided] == [
        "accepted r0",
        "accepted r1",
        "accepted r2",
        "accepted r3",
        "rejected r4 TOPOLOGY_TAKEN@VCPU=1/0",
    ]
    assert cells_held(state) == ({1: 40}, {1: 4})


def test_huge_pages_are_never_over_subscribed_and_hold_no_small_memory() -> None:
    state = state_with_host(ram_ratio=4.0)
    decided = run(
        [
            claim("r1", floating((0, 0, 0), p0=512)),
            claim("r2", floating((0, 0, 0), p0=1)),
            claim("r3", floating((0, 0, 3072))),
        ],
        state,
    )
    assert [briefs(d).split(" until")[0] for d in decided] == [
        "accepted r1",
        "rejected r2 TOPOLOGY_TAKEN=1/0",
        "accepted r3",
    ]
    assert cells_held(state) == ({0: 3072}, {0: 2})


def test_release_expiry_and_abort_give_back_exactly_what_was_held() -> None:
    state = state_with_host()
    run(
        [
            claim("r1", floating((0, 0, 1000), (1, 1, 2000))),
            claim("r2", floating((0, 0, 500)), ts=5),
        ],
        state,
    )
    assert cells_held(state) == ({0: 1500, 1: 2000}, {0: 2, 1: 1})
    (decided,) = run([release("r1", ts=6)], state)
    assert briefs(decided) == "released r1"
    assert cells_held(state) == ({0: 500}, {0: 1})
    (decided,) = run([tick(5 + LEASE_MS + 1)], state)
    assert briefs(decided) == f"expired r2 until {5 + LEASE_MS}"
    assert cells_held(state) == ({}, {})
    txn = TransactionRef(transaction_id="t1", priority=5, deadline_ms=10**6)
    member = spec("a", "n1", floating((0, 1, 3072)), VCPU=1, MEMORY_MB=1)
    prepared, blocked, aborted = run(
        [
            ClaimSet(event_id="s1", ts_ms=LEASE_MS * 3, partition_key="n1", claims=(member,),
                     transaction=txn),
            claim("b", floating((0, 1, 1537)), ts=LEASE_MS * 3),
            TransactionDecision(event_id="d1", ts_ms=LEASE_MS * 3, partition_key="n1",
                                transaction_id="t1", commit=False),
        ],
        state,
    )  # fmt: skip
    assert briefs(prepared) == "prepared a until 1000000"
    assert briefs(blocked) == "rejected b TOPOLOGY_TAKEN@MEMORY_MB=1537/1536"
    assert briefs(aborted).startswith("aborted a")
    assert cells_held(state) == ({}, {})


def test_a_cell_whose_guests_hold_memory_cannot_be_described_away() -> None:
    state = state_with_host()
    run([claim("r1", floating((0, 1, 1024)))], state)
    (decided,) = run([described("n1", ts=2, numa_cells=[cell(0, 0)])], state)
    assert "TOPOLOGY_IN_USE" in briefs(decided)
    assert decided[0].reasons[0].detail == (
        "cell 1 holds 1024 MB and 1 floating vCPUs of guests: it cannot be removed"
    )
    # its memory may shrink: the guests on it are over-subscribed, not lost
    (decided,) = run(
        [described("n1", ts=3, numa_cells=[cell(0, 0), cell(1, 4, memory_mb=2048)])], state
    )
    assert "TOPOLOGY_IN_USE" not in briefs(decided)


# --- the engine judges with the same limits ------------------------------------------


def test_the_filter_counts_what_the_cells_guests_hold() -> None:
    shared = frozenset({0, 1})
    floating = guest_topology()
    (guest,) = floating.cells
    empty = HostCell(cell_id=0, cpus=frozenset(range(4)), shared=shared, memory_mb=3072)
    assert cell_lack(empty, guest, floating, 1.0, 1.5) is None
    full = HostCell(
        cell_id=0, cpus=frozenset(range(4)), shared=shared, memory_mb=3072, memory_used_mb=4000
    )
    assert cell_lack(full, guest, floating, 1.0, 1.5) == (
        "4000 of 4608 MB of small pages held, wanted 1024"
    )
    busy = HostCell(
        cell_id=0, cpus=frozenset(range(4)), shared=shared, memory_mb=3072, vcpus_used=2
    )
    assert cell_lack(busy, guest, floating, 1.0, 1.5) == (
        "2 of 2 shared vCPUs held, wanted 1"
    )
    assert cell_lack(busy, guest, floating, 1.5, 1.5) is None
    # the view's column as the snapshot reads it
    cells, _ = free_in(
        '[{"cell_id": 0, "cpus": [0, 1], "dedicated": [], "shared": [0, 1], "siblings": [],'
        ' "memory_mb": 2048, "huge_pages": []}]',
        "[]",
        '{"memory": [[0, 1500]], "vcpus": [[0, 2]]}',
    )
    assert (cells[0].memory_used_mb, cells[0].vcpus_used) == (1500, 2)


def guest_topology() -> GuestTopology:
    return GuestTopology(cells=(GuestCell(cell_id=0, cpus=frozenset({0}), memory_mb=1024),))


# --- through the writers, the view and the scheduler ---------------------------------

FLOATING = SchedulerConfig.from_mapping(
    {"filters": {"enabled": ["ComputeFilter", "ResourceFilter", "NUMATopologyFilter"]}}
)


def _request(rid: str) -> PlacementRequest:
    return PlacementRequest(
        request_id=rid,
        ts_ms=NOW_MS,
        project_id="p",
        resources={"VCPU": 2, "MEMORY_MB": 2048},
        extra_specs={"hw:numa_nodes": "2"},
        lease_ms=10**8,
    )


def test_the_scheduler_claims_cell_memory_and_everything_reads_it(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        publisher.publish(host("n1", ram_ratio=1.0))
        writers = app.writers()
        catch_up_all(writers)
        live = LiveSnapshot(app.engine)
        live()
        scheduler = Scheduler(
            publisher,
            FLOATING.engine(),
            lambda: snapshot_from_view(app.engine),
            OutcomeFollower(app.log, settings.topics.outcomes),
            pump=lambda: catch_up_all(writers),
        )
        # 1024 MB per cell each: three fit a cell's 3072 MB, the fourth no longer
        results = scheduler.schedule([_request(f"q{i}") for i in range(4)])
        catch_up_all(writers)
        with app.engine.connect() as conn:
            use = conn.execute(select(provider_usage.c.topology_use)).scalar_one()
            fits = [r[0][0]["fit"] for r in conn.execute(select(reservations.c["items"]))]
            state, _ = load_state(conn, 0, 1)
        followed = live()
        text = render(read_history(app.engine, "n1"))
        one = render(read_history(app.engine, "q0.0"))
    assert [r.placed for r in results] == [True, True, True, False]
    assert "NUMATopologyFilter" in results[3].reason
    assert use == {"memory": [[0, 3072], [1, 3072]], "vcpus": [[0, 3], [1, 3]]}
    assert all(
        sorted((c["host_cell"], c["memory_mb"], c["vcpus"]) for c in f["cells"])
        == [(0, 1024, 1), (1, 1024, 1)]
        for f in fits
    )
    # a restarted writer holds the same
    assert cells_held(state) == ({0: 3072, 1: 3072}, {0: 3, 1: 3})
    # the live snapshot shows the cells full
    (n1,) = followed.providers
    assert [(c.memory_used_mb, c.vcpus_used) for c in n1.numa_cells] == [(3072, 3), (3072, 3)]
    assert "    NUMA cell 0: 3072 MB of small pages and 3 floating vCPUs held\n" in text
    line = "on host cell {} (1024 MB of small pages, 1 floating vCPUs)"
    assert "      fit: guest cell 0 " in one
    assert line.format(0) in one and line.format(1) in one
    result = replay(settings, verify=True)
    assert result.divergence is None and result.verified == result.outcomes > 0
    with App(settings) as app, app.engine.connect() as conn:
        again = conn.execute(select(provider_usage.c.topology_use)).scalar_one()
    assert again == use
