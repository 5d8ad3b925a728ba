"""A balance move carries the fit (issue 31 part 4): the claim of a move's
destination names the host cells, pinned CPUs and PCI devices the
instance's request asks for there, fitted as its placement was, so the
partition's writer holds exactly them or refuses the move; the plan only
picks destinations where that fit exists; the move done, the source's fit
is given back; a replay writes the same pinning again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from berth.app import App, Settings
from berth.cli import main
from berth.client import Publisher
from berth.replay import replay
from consumers.balance_worker import BalanceWorker
from consumers.partition_writer import catch_up_all
from consumers.scheduler import OutcomeFollower, Scheduler
from consumers.snapshot_source import balance_inputs, snapshot_from_view
from ledger.log import Append
from projections.view.tables import dead_letters, provider_usage, reservations
from scheduling.balance import Move
from schemas.codec import EventDecodeError, encode_event
from schemas.events import GuestAsks
from schemas.moves import MoveProposed
from schemas.outcomes import Outcome
from schemas.requests import PlacementRequest
from tests.builders import consume, provider, release, set_state
from tests.test_numa_claims import NOW_MS, SCHEDULER, fit, host, pinned
from tests.test_numa_topology import VF1, VF2

ASKS = {
    "hw:cpu_policy": "dedicated",
    "pci_passthrough:alias": "vf:1",
    "hw:pci_numa_affinity_policy": "preferred",
    "hw:mem_page_size": "small",
}
"""Two pinned CPUs and a VF, anywhere; the page size says nothing more."""


def _running(app: App, publisher: Publisher, instances: int = 1) -> list[str]:
    """Pinned instances of request ``q`` placed by the scheduler on ``a``
    (the only provider then) and consumed there; then ``b`` (``a``'s twin)
    and ``c`` (the most free memory, but no cells or devices to pin) appear
    and ``a`` is evacuated. The instances' reservation ids."""
    writers = app.writers()
    publisher.publish(host("a"))
    catch_up_all(writers)
    scheduler = Scheduler(
        publisher,
        SCHEDULER.engine(),
        lambda: snapshot_from_view(app.engine),
        OutcomeFollower(app.log, app.settings.topics.outcomes),
        pump=lambda: catch_up_all(writers),
    )
    (placed,) = scheduler.schedule(
        [
            PlacementRequest(
                request_id="q",
                ts_ms=NOW_MS,
                project_id="p",
                num_instances=instances,
                resources={"PCPU": 2, "MEMORY_MB": 512},
                extra_specs={**ASKS, "hw:watchdog_action": "reset"},
                image_properties={"hw_disk_bus": "scsi"},
            )
        ]
    )
    assert placed.placed
    assert {pid for _, pid in placed.reservations} == {"a"}
    rids = sorted(rid for rid, _ in placed.reservations)
    publisher.publish(
        [
            *(consume(rid, ts=2) for rid in rids),
            *host("b"),
            *provider("c", ts=1, PCPU=8, VCPU=8, MEMORY_MB=65_536),
            set_state("a", "evacuating", ts=3),
        ]
    )
    catch_up_all(writers)
    return rids


def _held(app: App) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each provider's ``topology_use`` and each reservation's items."""
    with app.engine.connect() as conn:
        use = dict(
            conn.execute(select(provider_usage.c.provider_id, provider_usage.c.topology_use)).all()
        )
        r = reservations.c
        items = dict(conn.execute(select(r.reservation_id, r["items"])).all())
    return use, items


def _outcomes(app: App) -> dict[str, Outcome]:
    topic = app.settings.topics.outcomes
    found = {}
    for p in range(app.log.partition_count(topic)):
        for record in app.log.read(topic, p, 0, 10_000):
            outcome = Outcome.from_json(record.value)
            found[outcome.subject] = outcome
    return found


def _move(app: App, publisher: Publisher) -> tuple[Move, str]:
    worker = BalanceWorker(app.engine, publisher, SCHEDULER, claim=True, lease_ms=60_000)
    step = worker.step()
    assert step is not None
    plan, claims = step
    ((move, claimed),) = [(c.move, c.reservation_id) for c in claims]
    assert plan.moves == (move,)
    return move, claimed


def test_a_pinned_instance_moved_pins_its_cpus_and_device_at_the_destination(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        (rid,) = _running(app, publisher)
        # b's cell 0 already has its pinned CPUs and one VF taken
        publisher.publish([pinned("other", "b", fit((0, 0, [2, 3]), devices=[VF1]), ts=4)])
        catch_up_all(app.writers())
        _, items = _held(app)
        # the claim kept what the request asked of cells and devices, and nothing else
        assert items[rid][0]["guest"] == {"extra_specs": ASKS}
        (instance,) = balance_inputs(app.engine)[1]
        assert instance.guest == GuestAsks(extra_specs=ASKS)

        move, claimed = _move(app, publisher)
        # c has the most free memory and room for two PCPU, but nothing to pin
        assert (move.source, move.destination) == ("a", "b")
        assert move.fit is not None
        assert move.fit.model_dump(mode="json", exclude_defaults=True) == {
            "cells": [{"guest_cell": 0, "host_cell": 1, "cpus": [6, 7], "memory_mb": 512}],
            "devices": [VF2],
        }
        catch_up_all(app.writers())
        assert _outcomes(app)[claimed].kind == "accepted"
        use, items = _held(app)
        assert use["b"] == {
            "cpus": [[2, "other"], [3, "other"], [6, claimed], [7, claimed]],
            "devices": [[VF1, "other"], [VF2, claimed]],
            "memory": [[1, 512]],
        }
        # the source keeps its pinning until the move is done
        assert use["a"] == {
            "cpus": [[2, rid], [3, rid]],
            "devices": [[VF1, rid]],
            "memory": [[0, 512]],
        }
        assert items[claimed] == [
            {
                "provider_id": "b",
                "resources": {"PCPU": 2, "MEMORY_MB": 512},
                "fit": {
                    "cells": [{"guest_cell": 0, "host_cell": 1, "cpus": [6, 7], "memory_mb": 512}],
                    "devices": [VF2],
                },
                "guest": {"extra_specs": ASKS},
            }
        ]
        # the service moving it is told which CPUs and device to use
        topic = app.settings.topics.moves
        (proposed,) = [
            MoveProposed.model_validate_json(r.value)
            for p in range(app.log.partition_count(topic))
            for r in app.log.read(topic, p, 0, 10)
        ]
        assert proposed.claim_id == claimed and proposed.fit == move.fit

        # moved: the old reservation released, the new one consumed
        publisher.publish([release(rid, ts=5), consume(claimed, ts=5)])
        catch_up_all(app.writers())
        use, _ = _held(app)
        assert use["a"] == {}
        assert use["b"]["cpus"] == [[2, "other"], [3, "other"], [6, claimed], [7, claimed]]
        # once moved, it may move again, its asks with it
        (again,) = balance_inputs(app.engine)[1]
        assert again.reservation_id == claimed and again.guest == GuestAsks(extra_specs=ASKS)


def test_the_writer_refuses_a_move_whose_fit_was_taken_meanwhile(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        (rid,) = _running(app, publisher)
        # appended, not yet applied: the balancer plans on a view without it
        publisher.publish([pinned("rival", "b", fit((0, 0, [2, 3]), (1, 1, [6, 7])), ts=4, PCPU=4)])
        move, claimed = _move(app, publisher)
        assert move.destination == "b" and move.fit is not None
        catch_up_all(app.writers())
        decided = _outcomes(app)
        assert decided["rival"].kind == "accepted"
        refused = decided[claimed]
        assert refused.kind == "rejected"
        assert [r.code.name for r in refused.reasons] == ["TOPOLOGY_TAKEN"]
        use, items = _held(app)
        assert claimed not in items
        assert use["b"]["cpus"] == [[2, "rival"], [3, "rival"], [6, "rival"], [7, "rival"]]
        assert use["a"]["cpus"] == [[2, rid], [3, rid]]
        # on a current view there is nowhere left to pin it: no move at all
        worker = BalanceWorker(app.engine, publisher, SCHEDULER, claim=True, lease_ms=60_000)
        step = worker.step()
        assert step is not None and step[0].moves == ()


def test_a_replay_reproduces_a_move_s_pinning_byte_for_byte(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        (rid,) = _running(app, publisher)
        _, claimed = _move(app, publisher)
        catch_up_all(app.writers())
        publisher.publish([release(rid, ts=5), consume(claimed, ts=5)])
        catch_up_all(app.writers())
        before = _held(app)
    assert before[0]["b"]["cpus"] == [[2, claimed], [3, claimed]]
    result = replay(settings, verify=True)
    assert result.divergence is None and result.verified == result.outcomes > 0
    with App(settings) as app:
        after = _held(app)
    assert after == before


def test_two_moves_of_one_plan_to_one_destination_pin_different_cpus(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        rids = _running(app, publisher, instances=2)
        worker = BalanceWorker(app.engine, publisher, SCHEDULER, claim=True, lease_ms=60_000)
        step = worker.step()
        assert step is not None
        plan, claims = step
        assert [(m.destination, m.fit is not None) for m in plan.moves] == [("b", True)] * 2
        # the first move's fit is taken before the second is fitted
        fits = [m.fit.model_dump(mode="json", exclude_defaults=True) for m in plan.moves if m.fit]
        assert fits == [
            {
                "cells": [{"guest_cell": 0, "host_cell": 0, "cpus": [2, 3], "memory_mb": 512}],
                "devices": [VF1],
            },
            {
                "cells": [{"guest_cell": 0, "host_cell": 1, "cpus": [6, 7], "memory_mb": 512}],
                "devices": [VF2],
            },
        ]
        catch_up_all(app.writers())
        decided = _outcomes(app)
        assert [decided[c.reservation_id].kind for c in claims] == ["accepted"] * 2
        use, _ = _held(app)
        assert sorted(rid for _, rid in use["b"]["cpus"]) == sorted(
            c.reservation_id for c in claims for _ in range(2)
        )
        assert len(rids) == 2


@pytest.mark.parametrize(
    ("guest", "why"),
    [
        ({"extra_specs": {"hw:cpu_policy": "pinned"}}, "hw:cpu_policy"),
        ({"extra_specs": {"hw:numa_nodes": "2"}}, "2 NUMA cells for 1 vCPUs"),
        ({"extra_specs": {"pci_passthrough:alias": "vf"}}, "each entry is name:count"),
        ({"extra_specs": {"hw:watchdog_action": "reset"}}, "only the NUMA and PCI keys"),
        ({"image_properties": {"hw_disk_bus": "scsi"}}, "only the NUMA and PCI keys"),
    ],
)
def test_asks_a_move_could_not_fit_again_are_refused_at_the_edge_and_in_the_log(
    tmp_path: Path, guest: dict[str, Any], why: str
) -> None:
    good = pinned("good", "n1", fit((0, 0, [2])), ts=3)
    bad = json.loads(encode_event(pinned("bad", "n1", fit((0, 0, [2])), ts=2)))
    bad["items"][0]["guest"] = guest
    alone = json.loads(encode_event(pinned("alone", "n1", None, ts=2)))
    alone["items"][0]["guest"] = {"extra_specs": {"hw:cpu_policy": "dedicated"}}
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        with pytest.raises(EventDecodeError, match=why):
            publisher.publish([bad])
        with pytest.raises(EventDecodeError, match="an item without a fit"):
            publisher.publish([alone])
        assert app.log.end_offset(app.settings.topics.events, 0) == 0
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
            held = conn.execute(select(reservations.c.reservation_id)).scalars().all()
    assert why in dead
    assert held == ["good"]


def test_berth_balance_says_what_a_move_pins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        (rid,) = _running(app, publisher)
    config = tmp_path / "scheduler.toml"
    config.write_text(
        "[filters]\n"
        'enabled = ["ComputeFilter", "ResourceFilter", "NUMATopologyFilter",'
        ' "PciPassthroughFilter"]\n'
        "[[filters.PciPassthroughFilter.alias]]\n"
        'name = "vf"\nvendor_id = "8086"\nproduct_id = "154c"\ndevice_type = "type-VF"\n'
    )
    assert main(["balance", "--data-dir", str(settings.data_dir), "--config", str(config)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"move {rid} (q.0, MEMORY_MB=512,PCPU=2): a -> b; a: evacuating; "
        f"fit guest cell 0 on host cell 0 (CPUs 2,3, 512 MB of small pages), PCI {VF1}",
        "1 move; no provider is evacuating",
    ]


def test_a_pinned_instance_whose_claim_kept_no_asks_is_not_moved_unpinned(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        # a claim with a fit and no guest, as claims were before they kept one
        publisher.publish(
            [
                *host("a"),
                *host("b"),
                pinned("old", "a", fit((0, 0, [2, 3])), ts=2, PCPU=2),
                consume("old", ts=2),
                set_state("a", "evacuating", ts=3),
            ]
        )
        catch_up_all(app.writers())
        (instance,) = balance_inputs(app.engine)[1]
        assert instance.fitted and instance.guest is None
        worker = BalanceWorker(app.engine, publisher, SCHEDULER, claim=True, lease_ms=60_000)
        step = worker.step()
    assert step is not None
    plan, claims = step
    assert plan.moves == () and claims == []
    assert plan.stopped == "nothing left can move: a: evacuating"
