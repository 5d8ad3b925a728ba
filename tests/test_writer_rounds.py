"""The writers' rounds (``step_all``): a round's outcomes, every partition's,
are one append, durable before any of its batches commits to the view; a
round that fails between the two leaves no writer ahead of the view."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import (
    PartitionWriter,
    catch_up_all,
    flush_all,
    held_appended,
    held_appends,
    held_outcomes,
    locked,
    step_all,
)
from ledger.log import Append
from ledger.partitioner import partition_for
from projections.batch import Batch
from projections.state import PartitionState
from projections.view.loader import committed_offsets
from projections.view.tables import inventories
from projections.view.writer import ViewWriter
from schemas.outcomes import Kind, Outcome
from tests.builders import claim, provider

NOW_MS = 10**12
PARTITIONS = 4


def one_provider_a_partition(app: App) -> list[str]:
    """A provider of 4 VCPU in each partition, decided; their ids by partition."""
    ids: dict[int, str] = {}
    n = 0
    while len(ids) < PARTITIONS:
        pid = f"n{n}"
        ids.setdefault(partition_for(pid.encode(), PARTITIONS), pid)
        n += 1
    publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
    publisher.publish([e for pid in ids.values() for e in provider(pid, ts=1, VCPU=4)])
    catch_up_all(app.writers())
    return [ids[p] for p in range(PARTITIONS)]


def _counting_appends(
    monkeypatch: pytest.MonkeyPatch, app: App, writers: Sequence[PartitionWriter]
) -> Counter[str]:
    """Count the writers' appends by topic."""
    appends: Counter[str] = Counter()
    real = app.log.append

    def append(topic: str, records: Sequence[Append]) -> list[int]:
        appends[topic] += 1
        return real(topic, records)

    monkeypatch.setattr(app.log, "append", append)
    for writer in writers:
        assert writer.log is app.log
    return appends


def _a_claim_a_partition(app: App) -> tuple[list[str], list[PartitionWriter]]:
    """A provider of 4 VCPU in each partition and a claim of 3 on each (a
    second decision of the same claim would reject it); their writers."""
    pids = one_provider_a_partition(app)
    writers = app.writers()
    publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
    publisher.publish([claim(f"r-{pid}", pid, ts=2, VCPU=3) for pid in pids])
    return pids, writers


def _held(app: App) -> list[int]:
    with app.engine.connect() as conn:
        return sorted(conn.execute(select(inventories.c.held)).scalars().all())


def test_a_round_appends_every_partitions_outcomes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        pids, writers = _a_claim_a_partition(app)
        appends = _counting_appends(monkeypatch, app, writers)
        assert step_all(writers)
        assert appends == Counter({app.settings.topics.outcomes: 1})
        assert not step_all(writers)
        outcomes = [
            Outcome.from_json(r.value)
            for p in range(PARTITIONS)
            for r in app.log.read(app.settings.topics.outcomes, p, 0, 100)
        ]
        accepted = {o.subject for o in outcomes if o.kind == Kind.ACCEPTED}
        assert accepted == {f"r-{pid}" for pid in pids}
        assert _held(app) == [3] * PARTITIONS


class _FailingOnce:
    """A view whose first commit fails (its disk full, say)."""

    def __init__(self, view: ViewWriter) -> None:
        self.view = view
        self.engine = view.engine
        self.failed = False

    def commit(self, state: PartitionState, batch: Batch, generation: int | None = None) -> bool:
        if not self.failed:
            self.failed = True
            raise OSError("the view's disk is full")
        return self.view.commit(state, batch, generation)


def test_a_round_whose_commit_fails_leaves_no_writer_ahead_of_the_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        pids, writers = _a_claim_a_partition(app)
        failing = writers[2]
        monkeypatch.setattr(failing, "view", _FailingOnce(failing.view))
        with pytest.raises(OSError):
            step_all(writers)
        with app.engine.connect() as conn:
            done = committed_offsets(conn)
        # the writers before the failing one committed; it and those after it
        # are back where the view is, and decide their records again
        assert [w.next_offset for w in writers] == [done.get(w.partition, 0) for w in writers]
        assert step_all(writers)
        assert not step_all(writers)
        assert _held(app) == [3] * PARTITIONS
        decided = Counter(
            (o.subject, o.kind)
            for p in range(PARTITIONS)
            for r in app.log.read(app.settings.topics.outcomes, p, 0, 100)
            if (o := Outcome.from_json(r.value)).subject.startswith("r-")
        )
        # each claim accepted, the failed ones published twice (at least
        # once), never rejected by a state that had already applied them
        assert {subject for subject, kind in decided if kind == Kind.ACCEPTED} == {
            f"r-{pid}" for pid in pids
        }
        assert all(kind == Kind.ACCEPTED for _, kind in decided)


def _outcomes(app: App) -> Counter[tuple[str, str]]:
    return Counter(
        (o.subject, o.kind)
        for p in range(PARTITIONS)
        for r in app.log.read(app.settings.topics.outcomes, p, 0, 100)
        if (o := Outcome.from_json(r.value)).subject.startswith("r-")
    )


def test_a_deferred_round_publishes_its_decisions_and_commits_them_later(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        pids, writers = _a_claim_a_partition(app)
        before = [w.next_offset for w in writers]
        assert catch_up_all(writers, defer=True) == PARTITIONS
        # decided and durable on the outcomes topic; not yet in the view
        assert _outcomes(app) == Counter({(f"r-{pid}", Kind.ACCEPTED): 1 for pid in pids})
        assert _held(app) == [0] * PARTITIONS
        assert [w.next_offset for w in writers] == before
        assert not catch_up_all(writers, defer=True)  # nothing decided twice
        with app.engine.connect() as conn:
            assert committed_offsets(conn) == dict(enumerate(before))
        assert not step_all(writers)  # a round without defer commits them first
        assert _held(app) == [3] * PARTITIONS
        with app.engine.connect() as conn:
            assert committed_offsets(conn) == {w.partition: w.next_offset for w in writers}
        assert all(w.pending is None for w in writers)
        assert _outcomes(app) == Counter({(f"r-{pid}", Kind.ACCEPTED): 1 for pid in pids})


def test_writers_that_stop_before_a_deferred_commit_decide_alike_from_the_view(
    tmp_path: Path,
) -> None:
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        pids, writers = _a_claim_a_partition(app)
        catch_up_all(writers, defer=True)
    # a new process: its writers start from the view, which never got the round
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        writers = app.writers()
        assert catch_up_all(writers) == PARTITIONS
        assert _held(app) == [3] * PARTITIONS
        # published again (at least once), and decided the same
        assert _outcomes(app) == Counter({(f"r-{pid}", Kind.ACCEPTED): 2 for pid in pids})


def test_a_held_round_leaves_its_outcomes_to_the_caller_or_to_its_commit(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        pids, writers = _a_claim_a_partition(app)
        assert catch_up_all(writers, hold=True) == PARTITIONS
        # decided, in no log and no view yet: told to whoever appends them
        assert not _outcomes(app)
        assert _held(app) == [0] * PARTITIONS
        told = {o.subject: o.kind for o in held_outcomes(writers)}
        assert {s: k for s, k in told.items() if s.startswith("r-")} == {
            f"r-{pid}": Kind.ACCEPTED for pid in pids
        }
        # appended with the caller's own records in one append
        placements = app.settings.topics.placements
        mine = [(placements, [Append(0, b"answer", b"{}")])]
        app.log.append_many([*held_appends(writers[:2]), *mine])
        held_appended(writers[:2])
        assert _outcomes(app) == Counter({(f"r-{pid}", Kind.ACCEPTED): 1 for pid in pids[:2]})
        # the others' are appended before their commit, which writes the view
        flush_all(writers)
        assert _outcomes(app) == Counter({(f"r-{pid}", Kind.ACCEPTED): 1 for pid in pids})
        assert _held(app) == [3] * PARTITIONS
        assert not any(w.held or w.pending for w in writers)


def test_a_round_another_thread_drives_waits_for_the_held_outcomes_append(
    tmp_path: Path,
) -> None:
    # serve appends the held outcomes with its answers under the writers'
    # locks; a Placement write driving its writer's round meanwhile (which
    # flushes, appending held outcomes itself) must wait, not append them too
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        pids, writers = _a_claim_a_partition(app)
        assert catch_up_all(writers, hold=True) == PARTITIONS
        entered = threading.Event()
        driven: list[bool] = []

        def drive() -> None:
            entered.set()
            driven.append(step_all([writers[0]]))

        driver = threading.Thread(target=drive)
        placements = app.settings.topics.placements
        with locked(writers):
            held = held_appends(writers)
            driver.start()
            assert entered.wait(30)
            assert writers[0].held  # the round waits for the lock, flushing nothing
            app.log.append_many([*held, (placements, [Append(0, b"answer", b"{}")])])
            held_appended(writers)
        driver.join(timeout=30)
        assert not driver.is_alive() and driven == [False]  # it committed, decided nothing new
        assert writers[0].pending is None
        flush_all(writers)
        # each decision appended once, by the caller; the view has them all
        assert _outcomes(app) == Counter({(f"r-{pid}", Kind.ACCEPTED): 1 for pid in pids})
        assert _held(app) == [3] * PARTITIONS


def test_a_decision_told_before_its_outcomes_append_is_decided_alike_after_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what the Placement API answers from: on_decided, before the outcomes'
    # append and the view's commit, which here never happen (the process dies)
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        pids = one_provider_a_partition(app)
        writers = app.writers()
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        # the second claim on each provider no longer fits: refused
        publisher.publish(
            [claim(f"r-{n}-{pid}", pid, ts=2, VCPU=3) for pid in pids for n in ("a", "b")]
        )
        told: list[tuple[str, str]] = []
        for writer in writers:
            writer.on_decided = lambda batch: told.extend(
                (o.subject, o.kind) for a in batch.applied for o in a.outcomes
            )

        def crash(topic: str, records: Sequence[Append]) -> list[int]:
            raise OSError("the process died before its outcomes were appended")

        monkeypatch.setattr(app.log, "append", crash)
        with pytest.raises(OSError):
            step_all(writers)
        decided: list[tuple[str, str]] = [(Kind.ACCEPTED, "a"), (Kind.REJECTED, "b")]
        assert sorted(told) == sorted((f"r-{n}-{pid}", kind) for pid in pids for kind, n in decided)
        assert _outcomes(app) == Counter()  # none appended
        assert _held(app) == [0] * PARTITIONS  # none in the view
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        assert catch_up_all(app.writers()) == 2 * PARTITIONS
        assert _outcomes(app) == Counter(told)  # the same decisions, once each
        assert _held(app) == [3] * PARTITIONS
