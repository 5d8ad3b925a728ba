"""The claim is the fit (issue 31 part 4): a claim carries the host cells,
pinned CPUs, huge pages and PCI devices the scheduler chose; the partition's
writer holds exactly those or refuses the claim, consume keeps them,
release, expiry and abort give exactly them back, the view keeps what is
held and the snapshot reads it, a restarted writer and a replay rebuild it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from berth.history import read_history, render
from berth.replay import replay
from consumers.batches import BatchScheduler
from consumers.coordinator import Coordinator
from consumers.partition_writer import catch_up_all
from consumers.scheduler import OutcomeFollower, Scheduler
from consumers.snapshot_source import LiveSnapshot, snapshot_from_view
from ledger.log import Append
from projections.state import PartitionState
from projections.view.loader import load_state
from projections.view.tables import dead_letters, provider_usage, reservations
from scheduling.config import SchedulerConfig
from schemas.codec import EventDecodeError, encode_event
from schemas.events import (
    Claim,
    ClaimSet,
    ClaimSpec,
    TransactionDecision,
    TransactionRef,
)
from schemas.requests import BatchRequest, PlacementRequest
from schemas.topology import TopologyFit, small_memory_mb
from tests.builders import briefs, consume, fresh_state, provider, release, run, tick
from tests.builders import topology as described
from tests.test_numa_topology import GPU, PF, VF1, VF2, cell, nic

NOW_MS = 10**12
LEASE_MS = 1000
RATIOS = {"VCPU": 2.0, "MEMORY_MB": 1.5}
"""The allocation ratios of the Hypothesis test's providers."""
VF_ALIAS = {"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}
SCHEDULER = SchedulerConfig.from_mapping(
    {
        "filters": {
            "enabled": [
                "ComputeFilter",
                "ResourceFilter",
                "NUMATopologyFilter",
                "PciPassthroughFilter",
            ],
            "PciPassthroughFilter": {"alias": [VF_ALIAS]},
        }
    }
)


def fit(
    *cells: tuple[int, int, list[int]], devices: tuple[str, ...] | list[str] = (), **pages: int
) -> dict[str, Any]:
    """A fit: (guest cell, host cell, CPUs) per cell; ``pages`` as
    ``p<cell>=count`` of 2 MiB pages on that host cell."""
    return {
        "cells": [
            {
                "guest_cell": g,
                "host_cell": h,
                "cpus": cpus,
                **(
                    {"pages": [{"size_kb": 2048, "count": pages[f"p{h}"]}]}
                    if f"p{h}" in pages
                    else {}
                ),
            }
            for g, h, cpus in cells
        ],
        "devices": list(devices),
    }


def spec(rid: str, pid: str, the_fit: dict[str, Any] | None, **resources: int) -> ClaimSpec:
    item: dict[str, Any] = {"provider_id": pid, "resources": resources or {"PCPU": 1}}
    if the_fit is not None:
        item["fit"] = the_fit
    return ClaimSpec.model_validate(
        {
            "reservation_id": rid,
            "consumer_id": f"c-{rid}",
            "project_id": "p",
            "items": [item],
            "lease_ms": LEASE_MS,
        },
        strict=False,
    )


def pinned(
    rid: str, pid: str, the_fit: dict[str, Any] | None, ts: int = 1, **resources: int
) -> Claim:
    s = spec(rid, pid, the_fit, **resources)
    return Claim(event_id=f"e-{rid}-{ts}", ts_ms=ts, partition_key=pid, **s.__dict__)


def host(pid: str = "n1") -> list[Any]:
    """Two cells of 4 CPUs (2 and 3, 6 and 7 dedicated; 512 pages of 2 MiB
    each) and a NIC (a PF, two VFs) and a GPU on cell 0."""
    return [
        *provider(pid, ts=1, PCPU=8, VCPU=8, MEMORY_MB=8192),
        described(pid, ts=1, numa_cells=[cell(0, 0), cell(1, 4)], pci_devices=nic()),
    ]


def state_with_host() -> PartitionState:
    state = fresh_state()
    run(host(), state)
    return state


def held(
    state: PartitionState, pid: str = "n1"
) -> tuple[dict[int, str], dict[str, str], dict[tuple[int, int], int]]:
    use = state.providers[pid].topology_use
    if use is None:
        return {}, {}, {}
    return dict(use.cpus), dict(use.devices), dict(use.pages)


# --- the schema and the edge --------------------------------------------------


@pytest.mark.parametrize(
    ("the_fit", "why"),
    [
        (fit((0, 0, [2, 3]), (1, 1, [3])), "the fit names CPU 3 twice"),
        (fit((0, 0, [2]), (1, 0, [3])), "the fit names host cell 0 twice"),
        (fit((0, 0, [2]), (0, 1, [6])), "the fit names guest cell 0 twice"),
        (fit(devices=[VF1, VF1.upper()]), f"the fit names device {VF1} twice"),
        (fit((0, 0, [2, 2])), "CPU 2 listed twice"),
        ({"cells": [], "devices": []}, "a fit names at least one cell or device"),
        ({"cells": [{"guest_cell": 0, "host_cell": 0, "pages": [{"size_kb": 4, "count": 1}]}]},
         "greater than 4"),
        ({"devices": ["0000:81:00"]}, "String should match pattern"),
    ],
)  # fmt: skip
def test_a_fit_that_names_anything_twice_is_refused_at_the_edge(
    tmp_path: Path, the_fit: dict[str, Any], why: str
) -> None:
    with pytest.raises(ValidationError, match=why):
        TopologyFit.model_validate(the_fit, strict=False)
    raw = json.loads(pinned("r1", "n1", None).model_dump_json())
    raw["items"][0]["fit"] = the_fit
    with App(Settings(data_dir=tmp_path / "data", partitions=1)) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        with pytest.raises(EventDecodeError, match=why):
            publisher.publish([raw])
        assert app.log.end_offset(app.settings.topics.events, 0) == 0


def test_a_fit_is_kept_in_one_form_whatever_order_it_came_in() -> None:
    given = TopologyFit.model_validate(
        {
            "cells": [{"guest_cell": 0, "host_cell": 1, "cpus": [7, 6]}],
            "devices": [VF2, VF1.upper()],
        },
        strict=False,
    )
    assert given.cells[0].cpus == (6, 7) and given.devices == (VF1, VF2)


# --- the writer ------------------------------------------------------------------


def test_the_writer_holds_exactly_the_fit_and_refuses_a_second_pinning() -> None:
    state = state_with_host()
    first = pinned("r1", "n1", fit((0, 0, [2, 3]), (1, 1, [6]), devices=[VF1], p0=100), PCPU=3)
    (decided,) = run([first], state)
    assert briefs(decided) == f"accepted r1 until {1 + LEASE_MS}"
    assert held(state) == ({2: "r1", 3: "r1", 6: "r1"}, {VF1: "r1"}, {(0, 2048): 100})
    clash = [
        pinned("r2", "n1", fit((0, 1, [7, 6]))),
        pinned("r3", "n1", fit(devices=[VF1])),
        pinned("r4", "n1", fit(devices=[PF])),
        pinned("r5", "n1", fit((0, 0, []), p0=413)),
    ]
    refused = run(clash, state)
    assert [briefs(d) for d in refused] == [
        "rejected r2 TOPOLOGY_TAKEN",
        "rejected r3 TOPOLOGY_TAKEN",
        "rejected r4 TOPOLOGY_TAKEN",
        "rejected r5 TOPOLOGY_TAKEN=413/412",
    ]
    details = [d[0].reasons[0].detail for d in refused]
    assert details == [
        "guest cell 0 on host cell 1: CPU pinned already: 6 by r1",
        f"device {VF1} is held by r1",
        f"device {PF}: its VF {VF1} is held by r1",
        "guest cell 0 on host cell 0: 412 of its 512 pages of 2048 KiB free",
    ]
    # nothing of the refused claims is held, and their free neighbours are
    (ok,) = run([pinned("r6", "n1", fit((0, 1, [7]), (1, 0, []), devices=[VF2], p0=412))], state)
    assert briefs(ok) == f"accepted r6 until {1 + LEASE_MS}"
    assert held(state)[0] == {2: "r1", 3: "r1", 6: "r1", 7: "r6"}
    assert held(state)[2] == {(0, 2048): 512}


def test_a_fit_the_provider_cannot_give_is_a_named_rejection() -> None:
    state = state_with_host()
    decided = run(
        [
            pinned("r1", "n1", fit((0, 2, [8]))),
            pinned("r2", "n1", fit((0, 0, [0, 2]))),  # CPU 0 is shared
            pinned("r3", "n1", fit((0, 0, [9]))),  # not the provider's at all
            pinned("r4", "n1", fit(devices=["0000:99:00.0"])),
            pinned("r5", "n1", fit((0, 0, []), p0=513)),
            pinned("r6", "other", fit((0, 0, [2]))),
        ],
        state,
    )
    assert [briefs(d) for d in decided] == [
        "rejected r1 TOPOLOGY_NOT_PROVIDED",
        "rejected r2 TOPOLOGY_NOT_PROVIDED",
        "rejected r3 TOPOLOGY_NOT_PROVIDED",
        "rejected r4 TOPOLOGY_NOT_PROVIDED",
        "rejected r5 TOPOLOGY_NOT_PROVIDED=513/512",
        "rejected r6 PROVIDER_NOT_FOUND",
    ]
    assert [d[0].reasons[0].detail for d in decided[:4]] == [
        "guest cell 0 on host cell 2: the provider describes no cell 2",
        "guest cell 0 on host cell 0: CPU 0 not among the cell's dedicated CPUs",
        "guest cell 0 on host cell 0: CPU 9 not among the cell's dedicated CPUs",
        "device 0000:99:00.0: the provider describes no such device",
    ]
    assert held(state) == ({}, {}, {})


def test_consume_keeps_the_fit_and_release_and_expiry_give_back_exactly_it() -> None:
    state = state_with_host()
    run(
        [
            pinned("r1", "n1", fit((0, 0, [2]), devices=[VF1], p0=10)),
            pinned("r2", "n1", fit((0, 1, [6, 7]), devices=[GPU], p1=20), ts=5),
            consume("r1", ts=6),
        ],
        state,
    )
    assert held(state) == (
        {2: "r1", 6: "r2", 7: "r2"},
        {VF1: "r1", GPU: "r2"},
        {(0, 2048): 10, (1, 2048): 20},
    )
    # r2's lease runs out; r1, consumed, stays
    (decided,) = run([tick(5 + LEASE_MS + 1)], state)
    assert briefs(decided) == f"expired r2 until {5 + LEASE_MS}"
    assert held(state) == ({2: "r1"}, {VF1: "r1"}, {(0, 2048): 10})
    (decided,) = run([release("r1", ts=5 + LEASE_MS + 2)], state)
    assert briefs(decided) == "released r1"
    assert held(state) == ({}, {}, {})
    # and what they held can be pinned again
    (decided,) = run(
        [pinned("r3", "n1", fit((0, 0, [2, 3]), devices=[PF]), ts=LEASE_MS * 2)], state
    )
    assert briefs(decided).startswith("accepted r3")


def test_a_claim_again_with_the_same_fit_is_a_duplicate_with_another_a_conflict() -> None:
    state = state_with_host()
    run([pinned("r1", "n1", fit((0, 0, [2])))], state)
    decided = run(
        [pinned("r1", "n1", fit((0, 0, [2])), ts=2), pinned("r1", "n1", fit((0, 0, [3])), ts=3)],
        state,
    )
    assert [briefs(d) for d in decided] == [
        "noop r1 DUPLICATE",
        "rejected r1 RESERVATION_ID_CONFLICT",
    ]
    assert held(state)[0] == {2: "r1"}


def test_an_atomic_set_takes_every_fit_or_none() -> None:
    state = state_with_host()
    specs = (
        spec("a", "n1", fit((0, 0, [2]))),
        spec("b", "n1", fit((0, 0, [3]), devices=[VF1])),
        spec("c", "n1", fit((0, 1, [5]))),  # CPU 5 is shared: the set fails
    )
    (decided,) = run([ClaimSet(event_id="s1", ts_ms=1, partition_key="n1", claims=specs)], state)
    assert briefs(decided) == (
        "rejected a BATCH_MEMBER_REJECTED | rejected b BATCH_MEMBER_REJECTED"
        " | rejected c TOPOLOGY_NOT_PROVIDED"
    )
    assert held(state) == ({}, {}, {})
    # two members of one set cannot take one CPU either: the second sees the first
    pair = (spec("d", "n1", fit((0, 0, [2]))), spec("e", "n1", fit((0, 0, [2]))))
    (decided,) = run([ClaimSet(event_id="s2", ts_ms=2, partition_key="n1", claims=pair)], state)
    assert briefs(decided) == "rejected d BATCH_MEMBER_REJECTED | rejected e TOPOLOGY_TAKEN"
    assert held(state) == ({}, {}, {})
    pair = (spec("f", "n1", fit((0, 0, [2]))), spec("g", "n1", fit((0, 0, [2]))))
    (decided,) = run(
        [ClaimSet(event_id="s3", ts_ms=3, partition_key="n1", claims=pair, atomic=False)], state
    )
    assert briefs(decided) == f"accepted f until {3 + LEASE_MS} | rejected g TOPOLOGY_TAKEN"
    assert held(state)[0] == {2: "f"}


def test_a_transaction_holds_its_fit_pending_and_an_abort_gives_it_back() -> None:
    state = state_with_host()
    txn = TransactionRef(transaction_id="t1", priority=5, deadline_ms=500)
    specs = (spec("a", "n1", fit((0, 0, [2, 3]), devices=[GPU])),)
    first = run(
        [
            ClaimSet(event_id="s1", ts_ms=1, partition_key="n1", claims=specs, transaction=txn),
            pinned("b", "n1", fit((0, 0, [3])), ts=2),
        ],
        state,
    )
    assert [briefs(d) for d in first] == ["prepared a until 500", "rejected b TOPOLOGY_TAKEN"]
    # an older transaction that needs CPU 3 wounds the younger one
    older = TransactionRef(transaction_id="t0", priority=1, deadline_ms=600)
    specs = (spec("c", "n1", fit((0, 0, [3]))),)
    (decided,) = run(
        [ClaimSet(event_id="s2", ts_ms=3, partition_key="n1", claims=specs, transaction=older)],
        state,
    )
    assert briefs(decided) == "aborted a WOUNDED | prepared c until 600"
    assert held(state) == ({3: "c"}, {}, {})
    (decided,) = run(
        [
            TransactionDecision(
                event_id="d0", ts_ms=4, partition_key="n1", transaction_id="t0", commit=False
            )
        ],
        state,
    )
    assert briefs(decided) == "aborted c"
    assert held(state) == ({}, {}, {})


def test_a_description_cannot_take_away_what_a_claim_pinned() -> None:
    state = state_with_host()
    run([pinned("r1", "n1", fit((0, 1, [6]), devices=[VF1]))], state)
    (decided,) = run(
        [
            described(
                "n1", ts=2, numa_cells=[cell(0, 0), cell(1, 4, dedicated=[7], shared=[4, 5, 6])]
            )
        ],
        state,
    )
    assert briefs(decided) == "rejected n1 TOPOLOGY_IN_USE"
    assert decided[0].reasons[0].detail == "CPU 6 is pinned by r1: it must stay dedicated in cell 1"


# --- through the ledger: view, snapshot, restart, replay ----------------------------


def _publish(app: App) -> Publisher:
    publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
    publisher.publish([*host("n1"), *host("n2")])
    publisher.publish(
        [
            pinned("r1", "n1", fit((0, 0, [2, 3]), (1, 1, [6]), devices=[VF1], p0=64), ts=2),
            pinned("r2", "n1", fit((0, 1, [7]), devices=[GPU]), ts=3),
            pinned("r3", "n1", fit((0, 1, [7])), ts=4),  # rejected: taken by r2
            pinned("r4", "n2", fit((0, 0, [3]), p0=8), ts=4),
            consume("r1", ts=5),
            release("r4", ts=6),
        ]
    )
    return publisher


def test_a_fit_in_the_log_that_names_a_device_twice_is_a_dead_letter(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        bad = json.loads(encode_event(pinned("bad", "n1", None, ts=2)))
        bad["items"][0]["fit"] = {"devices": [VF1, VF1]}
        good = pinned("good", "n1", fit(devices=[VF1]), ts=3)
        app.log.append(
            app.settings.topics.events,
            [
                *(Append(0, b"n1", encode_event(e)) for e in host("n1")),
                Append(0, b"n1", json.dumps(bad).encode()),
                Append(0, b"n1", encode_event(good)),
            ],
        )
        catch_up_all(app.writers())
        with app.engine.connect() as conn:
            dead = conn.execute(select(dead_letters.c.reason)).scalar_one()
            status = conn.execute(select(reservations.c.status)).scalars().all()
    assert f"the fit names device {VF1} twice" in dead
    assert status == ["held"]


def test_the_view_keeps_what_is_held_and_the_snapshot_sees_it_taken(
    tmp_path: Path, view_url: str
) -> None:
    db_url = "" if view_url.startswith("sqlite") else view_url
    settings = Settings(data_dir=tmp_path / "data", partitions=1, db_url=db_url)
    with App(settings) as app:
        live = LiveSnapshot(app.engine)
        live()
        _publish(app)
        catch_up_all(app.writers())
        with app.engine.connect() as conn:
            use = dict(
                conn.execute(
                    select(provider_usage.c.provider_id, provider_usage.c.topology_use)
                ).all()
            )
            items = dict(
                conn.execute(select(reservations.c.reservation_id, reservations.c["items"])).all()
            )
            state, _ = load_state(conn, 0, 1)
        followed, full = live(), snapshot_from_view(app.engine)
    assert use["n1"] == {
        "cpus": [[2, "r1"], [3, "r1"], [6, "r1"], [7, "r2"]],
        "devices": [[GPU, "r2"], [VF1, "r1"]],
        "pages": [[0, 2048, 64]],
    }
    assert use["n2"] == {}
    assert items["r2"] == [
        {
            "provider_id": "n1",
            "resources": {"PCPU": 1},
            "fit": {"cells": [{"guest_cell": 0, "host_cell": 1, "cpus": [7]}], "devices": [GPU]},
        }
    ]
    # a restarted writer holds the same
    assert held(state) == (
        {2: "r1", 3: "r1", 6: "r1", 7: "r2"},
        {GPU: "r2", VF1: "r1"},
        {(0, 2048): 64},
    )
    assert held(state, "n2") == ({}, {}, {})
    # a live snapshot follows the pinning as a full read sees it
    assert [(p.numa_cells, p.pci_devices) for p in followed.providers] == [
        (p.numa_cells, p.pci_devices) for p in full.providers
    ]
    n1, n2 = full.providers
    assert [sorted(c.dedicated) for c in n1.numa_cells] == [[], []]
    assert [c.huge_pages for c in n1.numa_cells] == [{2048: 448}, {2048: 512}]
    # the cell's small pages stay what they were
    assert [c.memory_mb for c in n1.numa_cells] == [4096 - 128, 4096]
    # the PF of a VF held is not free either
    assert [d.address for d in n1.pci_devices] == [VF2]
    assert [sorted(c.dedicated) for c in n2.numa_cells] == [[2, 3], [6, 7]]
    assert len(n2.pci_devices) == 4


def test_history_shows_what_is_held(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        _publish(app)
        catch_up_all(app.writers())
        text = render(read_history(app.engine, "n1"))
    assert f"    held by r1: pinned CPUs 2-3,6, PCI {VF1}\n" in text
    assert f"    held by r2: pinned CPUs 7, PCI {GPU}\n" in text
    assert "    NUMA cell 0: 64 pages of 2048 KiB held\n" in text


def test_a_replay_reproduces_every_pinning_byte_for_byte(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=2)
    with App(settings) as app:
        publisher = _publish(app)
        for t in range(8):
            publisher.publish(
                [
                    pinned(f"x{t}", "n2", fit((0, t % 2, [2 + 4 * (t % 2) + t // 4])), ts=10 + t),
                    pinned(f"y{t}", "n2", fit(devices=[VF1 if t % 3 else VF2]), ts=10 + t),
                ]
            )
        publisher.publish([release("x0", ts=30), tick(10**6)])
        catch_up_all(app.writers())

        def tables() -> tuple[list[Any], list[Any]]:
            with app.engine.connect() as conn:
                rows = conn.execute(
                    select(provider_usage.c.provider_id, provider_usage.c.topology_use).order_by(
                        provider_usage.c.provider_id
                    )
                )
                raw = [tuple(r) for r in rows]
                r = reservations.c
                kept = conn.execute(
                    select(r.reservation_id, r.status, r["items"]).order_by(r.reservation_id)
                )
                return raw, [tuple(k) for k in kept]

        before = tables()
    assert any(u != {} for _, u in before[0])
    result = replay(settings, verify=True)
    assert result.divergence is None and result.verified == result.outcomes > 0
    with App(settings) as app:
        after = tables()
    assert after == before


def test_the_scheduler_claims_the_fit_it_chose(tmp_path: Path) -> None:
    config = SCHEDULER
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        publisher.publish(host("n1"))
        writers = app.writers()
        catch_up_all(writers)
        scheduler = Scheduler(
            publisher,
            config.engine(),
            lambda: snapshot_from_view(app.engine),
            OutcomeFollower(app.log, settings.topics.outcomes),
            pump=lambda: catch_up_all(writers),
        )
        # the VFs are on cell 0: with any policy but preferred, a guest on
        # cell 1 could not have one
        asks = {
            "hw:cpu_policy": "dedicated",
            "pci_passthrough:alias": "vf:1",
            "hw:pci_numa_affinity_policy": "preferred",
        }
        results = scheduler.schedule(
            [
                PlacementRequest(
                    request_id=f"q{i}",
                    ts_ms=NOW_MS,
                    project_id="p",
                    resources={"PCPU": 2, "MEMORY_MB": 512},
                    extra_specs=asks,
                )
                for i in range(3)
            ]
        )
        catch_up_all(writers)
        with app.engine.connect() as conn:
            items = [r.items[0] for r in conn.execute(select(reservations.c["items"]))]
    assert [r.placed for r in results] == [True, True, False]
    fits = sorted((i["fit"]["cells"][0]["cpus"], i["fit"]["devices"]) for i in items)
    assert fits == [([2, 3], [VF1]), ([6, 7], [VF2])]
    assert "no valid host" in results[2].reason


# --- never over-subscribed, whatever the topologies and claims ---------------------


def _topology(data: st.DataObject, pid: str) -> list[Any]:
    """A provider of 1-3 cells of 2-6 CPUs (some dedicated, some 2 MiB
    pages), and PFs with VFs and plain devices, some on no cell."""
    cells = []
    first = 0
    for c in range(data.draw(st.integers(1, 3))):
        count = data.draw(st.integers(2, 6))
        cpus = list(range(first, first + count))
        first += count
        dedicated = data.draw(st.lists(st.sampled_from(cpus), unique=True))
        pages = data.draw(st.integers(0, 8))
        cells.append(
            {
                "cell_id": c,
                "cpus": cpus,
                "dedicated": dedicated,
                "shared": [cpu for cpu in cpus if cpu not in dedicated][:2],
                "memory_mb": 1024,
                "huge_pages": [{"size_kb": 2048, "total": pages}] if pages else [],
            }
        )
    devices: list[dict[str, Any]] = []
    for p in range(data.draw(st.integers(0, 2))):
        pf = f"0000:0{p}:00.0"
        devices.append(
            {"address": pf, "vendor_id": "8086", "product_id": "1572", "device_type": "type-PF"}
        )
        for v in range(data.draw(st.integers(0, 3))):
            devices.append(
                {"address": f"0000:0{p}:00.{v + 1}", "vendor_id": "8086", "product_id": "154c",
                 "device_type": "type-VF", "parent_address": pf}
            )  # fmt: skip
    for g in range(data.draw(st.integers(0, 2))):
        devices.append({"address": f"0000:3{g}:00.0", "vendor_id": "10de", "product_id": "1db4"})
    return [
        *provider(
            pid, ts=1, PCPU=64, VCPU=(64, RATIOS["VCPU"]), MEMORY_MB=(65536, RATIOS["MEMORY_MB"])
        ),
        described(pid, ts=1, numa_cells=cells, pci_devices=devices),
    ]


def _a_fit(data: st.DataObject, state: PartitionState, pid: str) -> dict[str, Any]:
    """A fit on ``pid`` that names nothing twice, but may name CPUs, cells,
    pages and devices the provider does not have or has given already."""
    described_ = state.providers[pid].description
    cell_ids = [c.cell_id for c in described_.numa_cells] + [9]
    cpus = [cpu for c in described_.numa_cells for cpu in c.cpus] + [99]
    addresses = [d.address for d in described_.pci_devices] + ["0000:ff:00.0"]
    hosts = data.draw(st.lists(st.sampled_from(cell_ids), unique=True, max_size=3))
    chosen = data.draw(st.lists(st.sampled_from(cpus), unique=True, max_size=4))
    parts = []
    for n, h in enumerate(hosts):
        pages = data.draw(st.integers(0, 5))
        parts.append(
            {
                "guest_cell": n,
                "host_cell": h,
                "cpus": chosen[n :: len(hosts)],
                "pages": [{"size_kb": 2048, "count": pages}] if pages else [],
                # small-page memory and floating vCPUs, which cells over-subscribe
                "memory_mb": 0 if pages else data.draw(st.sampled_from([0, 300, 700, 1100])),
                "vcpus": data.draw(st.integers(0, 3)),
            }
        )
    devices = data.draw(st.lists(st.sampled_from(addresses), unique=True, max_size=3))
    if not parts and not devices:
        devices = addresses[:1]
    return {"cells": parts, "devices": devices}


def _check(state: PartitionState) -> None:
    """No CPU, page or device given beyond what the provider has, no cell's
    small pages or shared CPUs beyond their limit, and what each provider
    holds is exactly its active reservations' fits."""
    for pid, p in state.providers.items():
        cpus: dict[int, str] = {}
        devices: dict[str, str] = {}
        pages: dict[tuple[int, int], int] = {}
        room: dict[str, dict[int, int]] = {"MEMORY_MB": {}, "VCPU": {}}
        for r in state.reservations.values():
            for provider_, the_fit in r.fits:
                if provider_ is not p:
                    continue
                for part in the_fit.cells:
                    for cpu in part.cpus:
                        assert cpu not in cpus, f"CPU {cpu} of {pid} pinned twice"
                        cpus[cpu] = r.reservation_id
                    for pg in part.pages:
                        key = (part.host_cell, pg.size_kb)
                        pages[key] = pages.get(key, 0) + pg.count
                    for rc, amount in (("MEMORY_MB", part.memory_mb), ("VCPU", part.vcpus)):
                        if amount:
                            held_ = room[rc]
                            held_[part.host_cell] = held_.get(part.host_cell, 0) + amount
                for address in the_fit.devices:
                    assert address not in devices, f"device {address} of {pid} given twice"
                    devices[address] = r.reservation_id
        cells = {c.cell_id: c for c in p.description.numa_cells}
        for cpu in cpus:
            assert any(cpu in c.dedicated for c in cells.values())
        for (cell_id, kb), count in pages.items():
            totals = {hp.size_kb: hp.total for hp in cells[cell_id].huge_pages}
            assert count <= totals[kb], f"cell {cell_id} of {pid}: {count} pages of {totals[kb]}"
        parents = {d.address: d.parent_address for d in p.description.pci_devices}
        for address in devices:
            assert parents.get(address) not in devices, f"{address} and its PF both given"
        assert held(state, pid) == (cpus, devices, pages)
        for cell_id, mb in room["MEMORY_MB"].items():
            c = cells[cell_id]
            small = small_memory_mb(c.memory_mb, ((hp.size_kb, hp.total) for hp in c.huge_pages))
            assert mb <= small * RATIOS["MEMORY_MB"], f"cell {cell_id} of {pid}: {mb} MB"
        for cell_id, n in room["VCPU"].items():
            assert n <= len(cells[cell_id].shared) * RATIOS["VCPU"], f"cell {cell_id}: {n} vCPUs"
        use = p.topology_use
        kept = ({}, {}) if use is None else (use.memory, use.vcpus)
        assert kept == (room["MEMORY_MB"], room["VCPU"])


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_no_cpu_page_or_device_is_ever_given_twice(data: st.DataObject) -> None:
    state = fresh_state()
    pids = ["n1", "n2"]
    for pid in pids:
        run(_topology(data, pid), state)
    ts = 1
    rids = [f"r{i}" for i in range(12)]
    for step in range(data.draw(st.integers(1, 30), label="steps")):
        ts += data.draw(st.integers(0, 400))
        action = data.draw(st.sampled_from(["claim", "claim", "set", "release", "consume", "tick"]))
        if action == "claim":
            rid, pid = data.draw(st.sampled_from(rids)), data.draw(st.sampled_from(pids))
            run([pinned(rid, pid, _a_fit(data, state, pid), ts=ts)], state)
        elif action == "set":
            pid = data.draw(st.sampled_from(pids))
            members = data.draw(
                st.lists(st.sampled_from(rids), unique=True, min_size=1, max_size=3)
            )
            specs = tuple(spec(rid, pid, _a_fit(data, state, pid)) for rid in members)
            atomic = data.draw(st.booleans())
            run(
                [
                    ClaimSet(
                        event_id=f"s{step}",
                        ts_ms=ts,
                        partition_key=pid,
                        claims=specs,
                        atomic=atomic,
                    )
                ],
                state,
            )
        elif action == "release":
            run([release(data.draw(st.sampled_from(rids)), ts=ts)], state)
        elif action == "consume":
            run([consume(data.draw(st.sampled_from(rids)), ts=ts)], state)
        else:
            run([tick(ts)], state)
        _check(state)


def test_a_batch_claims_the_fit_of_each_member_all_or_nothing(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=2)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        publisher.publish(host("n1"))
        writers = app.writers()

        def pump() -> None:
            catch_up_all(writers)

        pump()
        follower = OutcomeFollower(app.log, settings.topics.outcomes)
        coordinator = Coordinator(publisher, app.log, settings.topics, follower, pump=pump)
        batches = BatchScheduler(
            coordinator,
            SCHEDULER.engine(),
            lambda: snapshot_from_view(app.engine),
            settings.partitions,
            pump=pump,
        )

        def members(batch_id: str, count: int) -> BatchRequest:
            return BatchRequest(
                batch_id=batch_id,
                ts_ms=NOW_MS,
                members=tuple(
                    PlacementRequest(
                        request_id=f"{batch_id}-{m}",
                        ts_ms=NOW_MS,
                        project_id="p",
                        resources={"PCPU": 2, "MEMORY_MB": 512},
                        extra_specs={
                            "hw:cpu_policy": "dedicated",
                            "pci_passthrough:alias": "vf:1",
                            "hw:pci_numa_affinity_policy": "preferred",
                        },
                    )
                    for m in range(count)
                ),
            )

        # three pinned members do not fit two cells: none is placed
        assert not batches.place(members("b3", 3)).placed
        first = batches.place(members("b2", 2))
        pump()
        with app.engine.connect() as conn:
            r = reservations.c
            rows = conn.execute(select(r["items"]).where(r.status == "held")).scalars().all()
    assert first.placed
    fits = sorted((i[0]["fit"]["cells"][0]["cpus"], i[0]["fit"]["devices"]) for i in rows)
    assert fits == [([2, 3], [VF1]), ([6, 7], [VF2])]
    # each keeps the asks that gave its fit, for a move to fit it again
    assert [i[0]["guest"]["extra_specs"]["hw:cpu_policy"] for i in rows] == ["dedicated"] * 2


def test_a_device_tied_to_the_guests_cell_brings_the_guest_to_that_cell(tmp_path: Path) -> None:
    # the VFs are on cell 1: under the default legacy PCI NUMA affinity the
    # guest goes there, not to cell 0 where it would otherwise go first
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        publisher.publish(
            [
                *provider("n1", ts=1, PCPU=8, VCPU=8, MEMORY_MB=8192),
                described(
                    "n1", ts=1, numa_cells=[cell(0, 0), cell(1, 4)], pci_devices=nic(numa_node=1)
                ),
            ]
        )
        writers = app.writers()
        catch_up_all(writers)
        scheduler = Scheduler(
            publisher,
            SCHEDULER.engine(),
            lambda: snapshot_from_view(app.engine),
            OutcomeFollower(app.log, settings.topics.outcomes),
            pump=lambda: catch_up_all(writers),
        )
        (result,) = scheduler.schedule(
            [
                PlacementRequest(
                    request_id="q",
                    ts_ms=NOW_MS,
                    project_id="p",
                    resources={"PCPU": 2, "MEMORY_MB": 512},
                    extra_specs={"hw:cpu_policy": "dedicated", "pci_passthrough:alias": "vf:1"},
                )
            ]
        )
        catch_up_all(writers)
        with app.engine.connect() as conn:
            (items,) = conn.execute(select(reservations.c["items"])).scalars().all()
    assert result.placed
    assert items[0]["fit"] == {
        "cells": [{"guest_cell": 0, "host_cell": 1, "cpus": [6, 7], "memory_mb": 512}],
        "devices": [VF1],
    }
