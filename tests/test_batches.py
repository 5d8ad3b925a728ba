"""Batches and transactions through the real ledger: the coordinator, the
batch scheduler, the partition writers and the view, in one process."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from consumers.batches import BatchResult, BatchScheduler
from consumers.coordinator import Coordinator
from consumers.partition_writer import catch_up_all, step_all
from consumers.scheduler import OutcomeFollower
from consumers.scheduler_worker import SchedulerWorker
from consumers.snapshot_source import LiveSnapshot, snapshot_from_view
from projections.projector import apply
from projections.state import PartitionState
from projections.view.tables import inventories, reservations
from scheduling.config import SchedulerConfig
from scheduling.model import Snapshot
from schemas.codec import decode_event
from schemas.events import IdentifierItem
from schemas.outcomes import Outcome
from schemas.requests import BatchMode, BatchRequest, PlacementRequest
from tests.builders import claim, provider
from tests.txn_builders import pool

NOW_MS = 10**12
PARTITIONS = 4


@dataclass
class Stack:
    app: App
    publisher: Publisher
    clock: list[int]
    pump: Callable[[], object]

    def batches(
        self, snapshot: Callable[[], Snapshot] | None = None, **kw: object
    ) -> BatchScheduler:
        follower = OutcomeFollower(self.app.log, self.app.settings.topics.outcomes)
        coordinator = Coordinator(
            self.publisher, self.app.log, self.app.settings.topics, follower, pump=self.pump
        )
        return BatchScheduler(
            coordinator,
            SchedulerConfig.default().engine(),
            snapshot or (lambda: snapshot_from_view(self.app.engine)),
            PARTITIONS,
            pump=self.pump,
            **kw,  # type: ignore[arg-type]
        )

    def held(self) -> int:
        with self.app.engine.connect() as conn:
            rows = conn.execute(select(inventories.c.held, inventories.c.consumed)).all()
        return sum(h + c for h, c in rows)

    def statuses(self) -> dict[str, str]:
        with self.app.engine.connect() as conn:
            rows = conn.execute(select(reservations.c.reservation_id, reservations.c.status))
            return {rid: status for rid, status in rows}


@contextmanager
def stack(tmp_path: Path, providers: int = 8, vcpu: int = 4) -> Iterator[Stack]:
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        clock = [NOW_MS]
        publisher = Publisher(app.log, clock_ms=lambda: clock[0])
        publisher.publish(
            [
                e
                for n in range(providers)
                for e in provider(f"n{n}", ts=1, VCPU=vcpu, MEMORY_MB=8192)
            ]
        )
        writers = app.writers()

        def pump() -> None:
            catch_up_all(writers)

        pump()
        yield Stack(app, publisher, clock, pump)


def batch(
    batch_id: str,
    instances: int,
    vcpu: int = 4,
    mode: BatchMode = "all_or_nothing",
    ts: int = NOW_MS,
    identifiers: tuple[IdentifierItem, ...] = (),
    **kw: object,
) -> BatchRequest:
    members = tuple(
        PlacementRequest(
            request_id=f"{batch_id}-m{m}",
            ts_ms=ts,
            project_id="ci",
            resources={"VCPU": vcpu},
            identifiers=identifiers,
        )
        for m in range(instances)
    )
    return BatchRequest(batch_id=batch_id, ts_ms=ts, members=members, mode=mode, **kw)  # type: ignore[arg-type]


def test_a_batch_across_partitions_is_held_whole(tmp_path: Path) -> None:
    with stack(tmp_path) as s:
        result = s.batches().place(batch("ci-1", 6))
        assert result.status == "committed", result.reason
        assert len(result.instances) == 6
        assert len({i.provider_id for i in result.instances}) == 6
        assert s.held() == 24
        statuses = s.statuses()
        assert sorted(statuses.values()) == ["held"] * 6
        steps = _transaction_steps(s)
        assert [step for step, _ in steps] == ["begun", "decided", "finished"]
        assert steps[1][1]["commit"] is True


def test_a_batch_that_cannot_fit_holds_nothing_and_says_why(tmp_path: Path) -> None:
    with stack(tmp_path, providers=4) as s:
        big = batch("ci-big", 3, vcpu=4).model_copy(
            update={
                "members": (
                    *batch("ci-big", 3).members,
                    PlacementRequest(
                        request_id="ci-big-huge",
                        ts_ms=NOW_MS,
                        project_id="ci",
                        resources={"VCPU": 64},
                    ),
                )
            }
        )
        result = s.batches().place(big)
        assert result.status == "failed"
        assert "3 of 4 needed instances" in result.reason
        (label,) = result.unplaced
        assert "ci-big-huge" in label
        assert any("VCPU" in line for line in result.unplaced[label])
        assert s.held() == 0 and not s.statuses()


def test_two_concurrent_batches_on_room_for_one_exactly_one_wins(tmp_path: Path) -> None:
    with stack(tmp_path) as s:
        stale = snapshot_from_view(s.app.engine)  # both plan on the empty cluster, every time
        writers = s.app.writers()
        s.pump = lambda: None  # the projector thread below is the only writer
        stop = threading.Event()

        def projector() -> None:
            while not stop.is_set():
                if not step_all(writers):
                    stop.wait(0.002)

        results: dict[str, BatchResult] = {}

        def place(name: str, ts: int) -> None:
            scheduler = s.batches(snapshot=lambda: stale, max_attempts=4)
            results[name] = scheduler.place(batch(name, 6, ts=ts))

        applying = threading.Thread(target=projector)
        applying.start()
        racers = [
            threading.Thread(target=place, args=("older", NOW_MS - 10)),
            threading.Thread(target=place, args=("younger", NOW_MS)),
        ]
        for t in racers:
            t.start()
        for t in racers:
            t.join(timeout=120)
        stop.set()
        applying.join(timeout=30)
        catch_up_all(writers)

        assert sorted(r.status for r in results.values()) == ["committed", "failed"]
        winner = next(r for r in results.values() if r.placed)
        assert s.held() == 24  # the winner's 6 x 4 VCPU, nothing of the loser's
        held = {rid for rid, status in s.statuses().items() if status == "held"}
        assert held == {rid for i in winner.instances for rid in i.reservation_ids}
        assert "pending" not in s.statuses().values()


def test_a_queued_batch_is_placed_once_releases_make_room_in_order(tmp_path: Path) -> None:
    with stack(tmp_path, providers=4) as s:
        scheduler = s.batches()
        first = scheduler.place(batch("fill", 4))
        assert first.status == "committed"
        waiting = scheduler.place(batch("wait", 2, mode="queue"))
        later = scheduler.place(batch("later", 1, mode="queue", ts=NOW_MS + 1))
        assert (waiting.status, later.status) == ("queued", "queued")
        assert [b.batch_id for b in scheduler.queued()] == ["wait", "later"]
        assert scheduler.drain_queue() == []  # still full

        _release(s, first, 1)  # room for "later" only: it must not overtake "wait"
        assert scheduler.drain_queue() == []
        _release(s, first, 1, skip=1)
        placed = scheduler.drain_queue()
        assert [r.batch_id for r in placed] == ["wait"]
        assert [b.batch_id for b in scheduler.queued()] == ["later"]
        _release(s, first, 1, skip=2)
        assert [r.batch_id for r in scheduler.drain_queue()] == ["later"]


class _CountedSnapshot(LiveSnapshot):
    """The view kept live, counting the snapshots taken (each plan takes one)."""

    taken = 0

    def __call__(self) -> Snapshot:
        self.taken += 1
        return super().__call__()


def test_a_queued_batch_is_tried_again_only_once_something_may_make_room(
    tmp_path: Path,
) -> None:
    with stack(tmp_path, providers=4) as s:
        s.publisher.publish(provider("small", ts=1, VCPU=2, MEMORY_MB=8192))
        s.pump()
        snapshot = _CountedSnapshot(s.app.engine)
        scheduler = s.batches(snapshot)
        first = scheduler.place(batch("fill", 4))
        assert first.status == "committed"
        assert scheduler.place(batch("wait", 1, mode="queue")).status == "queued"
        planned = snapshot.taken
        assert scheduler.drain_queue() == []  # nothing happened: not planned again
        s.publisher.publish([claim("elsewhere", "small", ts=s.clock[0], VCPU=1)])
        s.publisher.publish([claim("refused", "n0", ts=s.clock[0], VCPU=1)])
        s.pump()
        assert scheduler.drain_queue() == []  # room taken, a claim refused: no room made
        assert snapshot.taken == planned
        _release(s, first, 1)
        (placed,) = scheduler.drain_queue()  # a release: planned again, and it fits
        assert placed.status == "committed", placed.reason
        assert snapshot.taken > planned


def test_a_queued_batch_fails_at_its_deadline(tmp_path: Path) -> None:
    with stack(tmp_path, providers=1) as s:
        scheduler = s.batches()
        assert (
            scheduler.place(batch("big", 2, mode="queue", queue_timeout_ms=1000)).status == "queued"
        )
        s.clock[0] += 1001
        (result,) = scheduler.drain_queue()
        assert (result.status, result.reason) == ("failed", "queue deadline passed")


@pytest.mark.parametrize(("low", "high", "expected"), [(3, 10, 8), (1, 5, 5), (9, 10, 0)])
def test_at_least_takes_what_fits_between_the_bounds(
    tmp_path: Path, low: int, high: int, expected: int
) -> None:
    with stack(tmp_path) as s:
        result = s.batches().place(batch("al", 10, mode="at_least", min_count=low, max_count=high))
        assert len(result.instances) == expected
        assert result.placed == bool(expected)
        assert s.held() == 4 * expected


def test_compute_addresses_and_vnis_are_claimed_together(tmp_path: Path) -> None:
    with stack(tmp_path) as s:
        s.publisher.publish(
            [
                pool("net", "ipv4", cidr="10.0.0.0/29", excluded={"10.0.0.1"}, ts=1),
                pool("vnis", "vni", ts=1),
            ]
        )
        wanted = (IdentifierItem(pool_id="net"), IdentifierItem(pool_id="vnis"))
        scheduler = s.batches()
        ok = scheduler.place(batch("vms", 5, vcpu=1, identifiers=wanted))
        assert ok.status == "committed", ok.reason
        addresses = sorted(v for i in ok.instances for p, v in i.identifiers if p == "net")
        vnis = sorted(int(v) for i in ok.instances for p, v in i.identifiers if p == "vnis")
        assert addresses == [f"10.0.0.{n}" for n in range(2, 7)]
        assert vnis == [1, 2, 3, 4, 5]
        # one address is left: two more VMs cannot both have one, so neither is placed
        too_many = scheduler.place(batch("more", 2, vcpu=1, identifiers=wanted))
        assert too_many.status == "failed"
        assert any("POOL_EXHAUSTED" in vote for vote in too_many.no_votes), too_many
        assert s.held() == 5  # the refused batch's compute was given back too
        # deleting one VM releases its compute, address and VNI in every partition
        s.publisher.release_consumer(f"vms.{ok.instances[0].member}.0")
        s.pump()
        assert s.held() == 4
        again = scheduler.place(batch("again", 1, vcpu=1, identifiers=wanted))
        assert again.status == "committed"
        assert set(again.instances[0].identifiers) == set(ok.instances[0].identifiers)


def test_a_queued_batch_tried_again_never_reuses_a_reservation_id(tmp_path: Path) -> None:
    """Found by the simulator (seed 1, docs/simulation.md): a queued batch
    tried again numbered its transactions from 1 again, so its reservation
    ids were those of its refused first attempts; a writer then took the
    claims for duplicates of the aborted holds, or the view refused a
    reused id in another partition and the writer stopped."""
    with stack(tmp_path) as s:
        s.publisher.publish([pool("vnis", "range", first=1, last=1, ts=1)])
        wanted = (IdentifierItem(pool_id="vnis"),)
        scheduler = s.batches()
        first = scheduler.place(batch("first", 1, vcpu=1, identifiers=wanted))
        assert first.status == "committed", first.reason
        waiting = scheduler.place(batch("wait", 1, vcpu=1, identifiers=wanted, mode="queue"))
        assert waiting.status == "queued"  # the one identifier is taken: refused 3 times
        refused = set(s.statuses())
        assert scheduler.drain_queue() == []  # still taken: refused again
        s.publisher.release_consumer("first.0.0")
        s.pump()
        (placed,) = scheduler.drain_queue()
        assert placed.status == "committed", placed.reason
        (instance,) = placed.instances
        assert not set(instance.reservation_ids) & refused
        assert instance.identifiers == (("vnis", "1"),)


class _Crash(Exception):
    pass


def _die(*args: object, **kwargs: object) -> None:
    """The coordinator process dies after the votes, before any decision."""
    raise _Crash


def test_a_coordinator_killed_between_votes_and_decision_leaks_nothing(tmp_path: Path) -> None:
    with stack(tmp_path) as s:
        scheduler = s.batches()

        scheduler.coordinator._decide = _die  # type: ignore[method-assign,assignment]
        with pytest.raises(_Crash):
            scheduler.place(batch("orphan", 6, prepare_timeout_ms=5_000))
        s.pump()
        assert sorted(set(s.statuses().values())) == ["pending"]
        assert s.held() == 24  # pending holds count against capacity

        s.clock[0] += 5_001  # past the deadline: the next record of each partition expires them
        s.publisher.tick()
        s.pump()
        assert set(s.statuses().values()) == {"expired"}
        assert s.held() == 0
        _assert_replay_is_exact(s)


def test_a_new_coordinator_aborts_what_a_dead_one_left_undecided(tmp_path: Path) -> None:
    with stack(tmp_path) as s:
        scheduler = s.batches()
        scheduler.coordinator._decide = _die  # type: ignore[method-assign,assignment]
        with pytest.raises(_Crash):
            scheduler.place(batch("orphan", 6))
        recovered = s.batches().coordinator.recover()
        assert [r.ok for r in recovered] == [False]
        s.pump()
        assert set(s.statuses().values()) == {"aborted"}
        assert s.held() == 0
        assert s.batches().coordinator.recover() == []  # finished: nothing left to do
        _assert_replay_is_exact(s)


def test_a_scheduler_starting_leaves_a_live_peers_transaction_alone(tmp_path: Path) -> None:
    """Two scheduler workers answer disjoint request partitions (``berth
    scheduler --owned``, or a consumer group's replicas); one starts while the
    other has a transaction in flight, its votes in and its decision not
    yet made. The starting one recovers only what was begun for request
    partitions it answers now (whoever began those is gone), so the live
    one's transaction commits at its first attempt, never decided abort."""
    with stack(tmp_path) as s:
        config = SchedulerConfig.default()
        ((partition, _),) = s.publisher.submit([batch("live", 6)])
        others = [p for p in range(PARTITIONS) if p != partition]
        peers: list[SchedulerWorker] = []

        def pump() -> None:
            s.pump()  # the writers vote
            begun = {d["transaction_id"] for step, d in _transaction_steps(s) if step == "begun"}
            ended = {d["transaction_id"] for step, d in _transaction_steps(s) if step == "finished"}
            if begun - ended and not peers:  # in flight, its votes in: the peer starts now
                peers.append(
                    s.app.scheduler_worker(
                        config, s.pump, publisher=s.publisher, partitions=others, own=False
                    )
                )

        worker = s.app.scheduler_worker(
            config, pump, publisher=s.publisher, partitions=[partition], own=False
        )
        assert worker.step() == 1
        assert peers, "the peer started while the transaction was in flight"
        topic = s.app.settings.topics.placements
        (record,) = s.app.log.read(topic, partition, 0, 10)
        answer = json.loads(record.value)
        assert (answer["status"], answer["attempts"]) == ("committed", 1), answer["reason"]
        decided = [d for step, d in _transaction_steps(s) if step == "decided"]
        assert [d["commit"] for d in decided] == [True]
        assert s.held() == 24
        _assert_replay_is_exact(s)


def _release(s: Stack, result: BatchResult, count: int, skip: int = 0) -> None:
    from schemas.events import Release

    s.publisher.publish(
        [
            Release(
                event_id=f"rel-{rid}",
                ts_ms=s.clock[0],
                partition_key=inst.provider_id,
                reservation_id=rid,
            )
            for inst in result.instances[skip : skip + count]
            for rid in inst.reservation_ids
        ]
    )
    s.pump()


def _transaction_steps(s: Stack) -> list[tuple[str, dict[str, object]]]:
    topic = s.app.settings.topics.transactions
    steps = []
    for p in range(s.app.log.partition_count(topic)):
        for record in s.app.log.read(topic, p, 0, 1000):
            data = json.loads(record.value)
            steps.append((data["step"], data))
    return steps


def _assert_replay_is_exact(s: Stack) -> None:
    """The events log, applied again from offset 0, decides exactly as the
    writers did (the outcomes topic)."""
    topics = s.app.settings.topics
    for p in range(PARTITIONS):
        state = PartitionState(p, PARTITIONS)
        again = [
            o.to_json()
            for r in s.app.log.read(topics.events, p, 0, 100_000)
            for o in apply(state, r.offset, decode_event(r.value))
        ]
        logged = [r.value for r in s.app.log.read(topics.outcomes, p, 0, 100_000)]
        assert [Outcome.from_json(v) for v in again] == [Outcome.from_json(v) for v in logged]
