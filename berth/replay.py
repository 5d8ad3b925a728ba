"""Rebuild the view from offset 0 and, optionally, verify every decision
against the outcomes recorded on the outcomes topic."""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from multiprocessing.context import ForkContext, SpawnContext
from multiprocessing.queues import Queue
from operator import attrgetter
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from berth.app import App, Settings, open_log, tune_gc
from consumers.partition_writer import PartitionHalted, PartitionWriter
from ledger.log import CorruptLog, Log
from projections.batch import decide
from projections.state import PartitionState
from projections.view.engine import make_engine
from projections.view.tables import partition_offsets
from projections.view.writer import ViewWriter
from schemas.codec import EventDecodeError, decode_event
from schemas.outcomes import Outcome


@dataclass(frozen=True, slots=True)
class Divergence:
    partition: int
    offset: int
    expected: Outcome | None
    actual: Outcome | None

    def __str__(self) -> str:
        return (
            f"partition {self.partition} offset {self.offset}: "
            f"recorded {self.expected}, recomputed {self.actual}"
        )


class ReplayStopped(Exception):
    """A replay met a record it cannot read: it says which and why, and
    leaves the view in place."""


@dataclass(frozen=True, slots=True)
class ReplayResult:
    records: int
    outcomes: int
    verified: int
    """Outcomes compared with recorded ones (records the live writer has not yet
    decided have none to compare with)."""
    divergence: Divergence | None
    view_url: str


def recorded_outcomes(log: Log, topic: str, partition: int) -> Iterator[Outcome]:
    """The outcomes topic of one partition, without the republished duplicates a
    writer that crashed before its view commit leaves behind."""
    offset = 0
    last: tuple[int, int] = (-1, -1)
    while records := log.read(topic, partition, offset, 5000):
        offset = records[-1].offset + 1
        for record in records:
            outcome = Outcome.from_json(record.value)
            position = (outcome.offset, outcome.seq)
            if position > last:
                last = position
                yield outcome


_OUTCOMES_OF = attrgetter("outcomes")


def clock_prefix(log: Log, topic: str, partition: int, until_ms: int) -> int:
    """The end of the partition's prefix whose clock never passed
    ``until_ms``: the offset of its first event stamped later, or the log's
    end. A record that does not decode moves no clock; an event stamped
    earlier that comes after the first later one is not in the prefix,
    since the partition decided it with its clock already past."""
    offset = 0
    while records := log.read(topic, partition, offset, 5000):
        for record in records:
            try:
                stamped = decode_event(record.value).ts_ms
            except EventDecodeError:
                continue
            if stamped > until_ms:
                return record.offset
        offset = records[-1].offset + 1
    return offset


def _before(recorded: Iterator[Outcome], end: int) -> Iterator[Outcome]:
    """The outcomes of the records before offset ``end``."""
    return itertools.takewhile(lambda o: o.offset < end, recorded)


def _replay_partitions(
    target: Settings,
    partitions: list[int],
    verify: bool,
    progress: Callable[[int], object] | None,
    rebuild: bool = False,
    sized: Callable[[int], object] | None = None,
    until_ms: int | None = None,
    until: Mapping[int, int] | None = None,
    hold_back: bool | None = None,
    loaded: Mapping[int, tuple[PartitionState, int]] | None = None,
    reading: Log | None = None,
    journal: bool = True,
) -> ReplayResult:
    """Rebuild the given partitions into ``target``'s (migrated) view; a
    ``rebuild`` writes a fresh SQLite file that is discarded unless complete,
    holding rows back unless ``hold_back`` is false (a view that already
    holds rows: a checkpoint's copy, whose partitions' states ``loaded``
    may give). ``reading`` is a log already open (and indexed: an embedded
    log checks every record of a partition on its first read) to read
    instead of opening one.
    ``sized`` is told how many records the partitions hold, before the first.
    With ``until_ms``, each partition stops at the end of its
    :func:`clock_prefix`; with ``until``, at the offset it gives (0 for a
    partition it does not name). Without ``journal``, the file is written
    by this process alone, without one (see :func:`make_engine`)."""
    log = reading or open_log(target, read_only=True)
    events = target.topics.events
    ends = (
        {p: clock_prefix(log, events, p, until_ms) for p in partitions}
        if until_ms is not None
        else None
        if until is None
        else {p: until.get(p, 0) for p in partitions}
    )
    if sized is not None:
        # indexes the partitions' files (CRCs checked), which their first read
        # would do anyway: here, in parallel processes, it sizes a progress bar
        sized(sum(ends.values()) if ends else sum(log.end_offset(events, p) for p in partitions))
    engine = make_engine(target.view_url, writer=True, rebuild=rebuild, journal=journal)
    collecting = gc.isenabled()
    # A batch holds tens of thousands of live objects that every young
    # collection traverses again: about a tenth of a replay's time. Deciding
    # makes next to no reference cycles (a 1M-record replay in one process
    # peaks at 430 MB either way), and what there is goes once collection is
    # back on.
    gc.disable()
    batch_size = max(target.batch_size, REBUILD_BATCH_SIZE) if rebuild else target.batch_size
    try:
        held = rebuild if hold_back is None else hold_back
        view = ViewWriter(engine, holds_back=REBUILD_HELD_ROWS if held else None)
        records, outcomes, verified, divergence = replay_log(
            log, view, partitions, target, batch_size, verify, progress, ends, loaded
        )
    except (PartitionHalted, CorruptLog) as damaged:
        raise ReplayStopped(str(damaged)) from damaged
    finally:
        if collecting:
            gc.enable()
        if reading is None:
            log.close()
        engine.dispose()
    return ReplayResult(records, outcomes, verified, divergence, target.view_url)


def decide_until(log: Log, topic: str, state: PartitionState, start: int, end: int) -> int:
    """Decide the records ``[start, end)`` of ``state``'s partition of
    ``topic`` on ``state``, in place and in memory, as its writer decided
    them (the view's change sets drained batch by batch, as the writer's
    commits drain them); how many records there were.
    :class:`ReplayStopped` on a damaged record. Deciding makes next to no
    reference cycles: a caller deciding many pauses the collector (see
    :func:`_replay_partitions`)."""
    offset = start
    while offset < end:
        try:
            records = log.read(topic, state.partition, offset, min(end - offset, 5000))
        except CorruptLog as damaged:
            raise ReplayStopped(damaged.damage) from damaged
        records = [r for r in records if r.offset < end]
        if not records:
            break
        decide(state, records)
        _drain(state)
        offset = records[-1].offset + 1
    return offset - start


def _drain(state: PartitionState) -> None:
    """Empty what a view writer would have taken from ``state`` to write."""
    state.touched.clear()
    state.reshaped.clear()
    state.metered.clear()
    state.aggregates_touched.clear()
    state.pools_touched.clear()
    state.groups_touched.clear()
    state.joined.clear()


def replay_until(
    target: Settings,
    until: Mapping[int, int],
    checkpointed: Mapping[int, tuple[PartitionState, int]] | None = None,
    reading: Log | None = None,
) -> ReplayResult:
    """Bring every partition of ``target``'s (migrated) view up to the
    offsets ``until`` gives, in this process: the view a scheduler read when
    it had applied exactly that much (``berth explain --request``). The view
    is empty, or a checkpoint's copy whose writers' states (each with the
    offset it resumes at) ``checkpointed`` gives. ``reading``: the log to
    read, if one is open already (a server's, which has checked its records
    once)."""
    # a scratch database: rebuilt as a fresh view is (large batches, no
    # syncing); into an empty one, the active reservations and usage are
    # written once at the end, while a copy's rows are updated as live
    partitions = list(range(target.partitions))
    return _replay_partitions(
        target,
        partitions,
        False,
        None,
        rebuild=True,
        until=until,
        hold_back=checkpointed is None,
        loaded=checkpointed,
        reading=reading,
        journal=False,  # a scratch file, written here alone
    )


def replay_log(
    log: Log,
    view: ViewWriter,
    partitions: list[int],
    target: Settings,
    batch_size: int,
    verify: bool,
    progress: Callable[[int], object] | None = None,
    ends: dict[int, int] | None = None,
    loaded: Mapping[int, tuple[PartitionState, int]] | None = None,
) -> tuple[int, int, int, Divergence | None]:
    """Decide ``partitions`` of ``log`` again from offset 0 into ``view`` with
    the live writer's code, comparing (``verify``) every recomputed outcome
    with the recorded one; the records, outcomes and verified outcomes, and
    the first divergence. Any log will do (the simulator replays its own).
    A partition ``loaded`` gives starts from that state and offset, which
    the view holds already."""
    records = outcomes = verified = 0
    divergence: Divergence | None = None
    for partition in partitions:
        writer = PartitionWriter(
            log,
            view,
            partition,
            target.partitions,
            target.topics,
            batch_size=batch_size,
            publish=False,
            until=ends[partition] if ends else None,
            loaded=loaded.get(partition) if loaded else None,
        )
        recorded = recorded_outcomes(log, target.topics.outcomes, partition)
        if ends:
            recorded = _before(recorded, ends[partition])
        checking = verify
        while (batch := writer.step()) is not None:
            records += batch.end - batch.start
            if progress is not None:
                progress(batch.end - batch.start)
            outcomes += sum(map(len, map(_OUTCOMES_OF, batch.applied)))
            if not checking:
                continue
            for applied in batch.applied:
                if not checking:
                    break
                for actual in applied.outcomes:
                    expected = next(recorded, None)
                    if expected is None:
                        checking = False  # the rest is not decided live yet
                        break
                    if expected != actual:
                        if divergence is None:
                            divergence = Divergence(partition, applied.offset, expected, actual)
                        checking = False
                        break
                    verified += 1
        view.write_held_back(writer.state)
        if checking and divergence is None:
            extra = next(recorded, None)
            if extra is not None:
                divergence = Divergence(partition, extra.offset, extra, None)
    view.flush()
    return records, outcomes, verified, divergence


def _worker(
    target: Settings,
    partitions: list[int],
    verify: bool,
    rebuild: bool,
    reports: Queue[tuple[str, Any]],
    until_ms: int | None = None,
) -> None:
    """A replay process: its partitions, with their size, progress and result
    sent back."""
    tune_gc()
    try:
        result = _replay_partitions(
            target,
            partitions,
            verify,
            lambda n: reports.put(("progress", n)),
            rebuild,
            lambda n: reports.put(("sized", n)),
            until_ms,
        )
    except ReplayStopped as stopped:
        reports.put(("stopped", str(stopped)))
        return
    except BaseException as error:
        reports.put(("error", f"{type(error).__name__}: {error}"))
        raise
    reports.put(("done", result))


def _merge(results: list[ReplayResult], view_url: str) -> ReplayResult:
    divergences = [r.divergence for r in results if r.divergence is not None]
    return ReplayResult(
        records=sum(r.records for r in results),
        outcomes=sum(r.outcomes for r in results),
        verified=sum(r.verified for r in results),
        divergence=min(divergences, key=lambda d: d.partition) if divergences else None,
        view_url=view_url,
    )


def _context() -> ForkContext | SpawnContext:
    """Fork where it is safe, else spawn. A forked worker starts at once; a
    spawned one first imports Berth again, about half a second of a replay
    that takes fifteen. Fork is safe only from a process with one thread
    (another thread may hold a lock the child would wait on forever), and
    only on Linux (macOS's system libraries do not support it)."""
    if sys.platform == "linux" and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _in_processes(
    target: Settings,
    jobs: int,
    verify: bool,
    progress: Callable[[int], object] | None,
    rebuild: bool,
    core_idle: Callable[[], object] | None = None,
    sized: Callable[[int], object] | None = None,
    until_ms: int | None = None,
) -> ReplayResult:
    """Partitions are independent: replay them in ``jobs`` processes at once.
    ``core_idle`` runs here once, as soon as fewer processes run than the
    machine has cores while some still run: on the core left idle."""
    context = _context()
    reports: Queue[tuple[str, Any]] = context.Queue()
    groups = [list(range(target.partitions))[j::jobs] for j in range(jobs)]
    workers = [
        context.Process(target=_worker, args=(target, group, verify, rebuild, reports, until_ms))
        for group in groups
    ]
    for worker in workers:
        worker.start()
    results: list[ReplayResult] = []
    try:
        while len(results) < len(workers):
            try:
                kind, value = reports.get(timeout=1.0)
            except queue.Empty:
                if any(w.exitcode not in (None, 0) for w in workers):
                    raise RuntimeError("a replay process died") from None
                continue
            if kind == "progress":
                if progress is not None:
                    progress(value)
            elif kind == "sized":
                if sized is not None:
                    sized(value)
            elif kind == "done":
                results.append(value)
                running = len(workers) - len(results)
                if core_idle is not None and 0 < running < (os.cpu_count() or 1):
                    core_idle()
                    core_idle = None
            elif kind == "stopped":
                raise ReplayStopped(value)
            else:
                raise RuntimeError(f"replay process failed: {value}")
    finally:
        for worker in workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.kill()
    return _merge(results, target.view_url)


REBUILD_BATCH_SIZE = 20_000
"""Records per commit in a rebuild: its commits then cost little next to the
records, and a reservation claimed and finished within one batch is written
once, final, in any case."""


REBUILD_HELD_ROWS = 500_000
"""Reservation rows a rebuild's process holds back at most (see
:class:`ViewWriter`): about 200 MB."""


def _drop_secondary_indexes(engine: Engine) -> list[str]:
    """Drop the indexes no replay query uses and return the statements that
    recreate them exactly as the migrations made them: one sorted build at the
    end costs less than keeping them up to date through millions of inserts."""
    with engine.begin() as conn:
        indexes = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        ).all()
        for name, _ in indexes:
            conn.exec_driver_sql(f'DROP INDEX "{name}"')
    return [sql for _, sql in indexes]


def default_jobs() -> int:
    """One replay process a core. Two a core let the kernel even out cores
    of unequal speed, and beat one a core while a process waited for the
    write lock with its core idle; since a rebuild's processes decide on
    instead (see :class:`ViewWriter`), the extra processes only cost CPU
    (their caches and switches): on this project's 2-core machine two
    processes beat four in eight alternate runs of eight, by 2-34%
    (7% at the median)."""
    return os.cpu_count() or 1


def replay(
    settings: Settings,
    verify: bool,
    progress: Callable[[int], object] | None = None,
    jobs: int = 1,
    sized: Callable[[int], object] | None = None,
    until_ms: int | None = None,
) -> ReplayResult:
    """Rebuild into ``settings.db_url`` (which must be empty), or by default into a
    fresh SQLite file that then replaces the data directory's view.
    ``until_ms`` rebuilds the view as it was when the partitions' clocks
    reached that time (each partition's :func:`clock_prefix`), for an audit;
    it needs its own ``db_url``, since the data directory's view must not go
    back in time. ``jobs`` > 1
    replays groups of partitions in that many processes. ``progress`` is told
    of every batch's records as it is done; ``sized`` of the records of each
    group of partitions, as its process starts (their sum is the log's size).

    Into ``settings.db_url`` every batch commits with its offset, as the live
    writers do: a replay that dies leaves a view consistent up to its offsets.

    The fresh file is a rebuild: batches of :data:`REBUILD_BATCH_SIZE`, no
    syncing, secondary indexes dropped after the migrations and recreated
    from their own definitions once the first processes are done (see
    :class:`_Indexes`). Each batch still commits with its offset, but the
    rows of reservations still active and the providers' usage are written
    once, after a partition's last batch, and a process that finds the write
    lock taken goes on deciding while its batches wait (see
    :class:`ViewWriter`). A rebuild that dies leaves only
    ``view.replay.db``, partial and perhaps without those indexes, which
    nothing reads: the view in place is untouched, and the next replay
    deletes the file and starts again from offset 0. Only a complete
    rebuild, indexes built and synced to disk, replaces
    ``view.db``."""
    if until_ms is not None and not settings.db_url:
        raise ValueError(
            "a view as of a time goes into a database of its own (--db): "
            "the data directory's view must not go back in time"
        )
    target = settings
    fresh: Path | None = None
    if not settings.db_url:
        fresh = settings.data_dir / "view.replay.db"
        for leftover in (fresh, *(Path(f"{fresh}{s}") for s in ("-wal", "-shm"))):
            leftover.unlink(missing_ok=True)
        target = replace(settings, db_url=f"sqlite:///{fresh}")
    rebuild = fresh is not None
    # replacing the data directory's view while writers update it would lose
    # their commits: a rebuild keeps them out of the log until it is done
    with App(target, exclusive=rebuild) as app:
        target = app.settings  # the log's own partition count
        with app.engine.connect() as conn:
            if conn.execute(select(func.count()).select_from(partition_offsets)).scalar_one():
                raise ValueError(
                    f"{target.view_url} already holds a view; replay needs an empty one"
                )
        deferred = _drop_secondary_indexes(app.write_engine) if rebuild else []
        app.engine.dispose()
        app.write_engine.dispose()
        return _replay_into(
            settings, target, fresh, deferred, verify, progress, jobs, sized, until_ms
        )


def _replay_into(
    settings: Settings,
    target: Settings,
    fresh: Path | None,
    deferred: list[str],
    verify: bool,
    progress: Callable[[int], object] | None,
    jobs: int,
    sized: Callable[[int], object] | None,
    until_ms: int | None,
) -> ReplayResult:
    rebuild = fresh is not None
    jobs = max(1, min(jobs, target.partitions))
    indexes = _Indexes(target, deferred)
    if jobs == 1:
        result = _replay_partitions(
            target, list(range(target.partitions)), verify, progress, rebuild, sized, until_ms
        )
    else:
        result = _in_processes(
            target, jobs, verify, progress, rebuild, indexes.build, sized, until_ms
        )
    if fresh is None:
        return result
    indexes.build()  # if no process finished before the last one
    engine = make_engine(target.view_url, writer=True, rebuild=True)
    try:
        # the rebuild never synced: a synced checkpoint puts the whole file on
        # disk before it takes the view's place (outside any transaction, on
        # the driver's connection: the engine would begin one)
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("PRAGMA synchronous=NORMAL")
            busy, _, _ = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            cursor.close()
        finally:
            raw.close()
        if busy:
            raise RuntimeError(f"{target.view_url}: the rebuilt view could not be checkpointed")
    finally:
        engine.dispose()
    view = settings.data_dir / "view.db"
    for suffix in ("-wal", "-shm"):
        Path(f"{view}{suffix}").unlink(missing_ok=True)
    os.replace(fresh, view)
    return replace(result, view_url=f"sqlite:///{view}")


class _Indexes:
    """The secondary indexes a rebuild dropped, built again once.

    They are built as soon as a core is left idle, while the last replay
    processes finish their partitions: the cores of a shared machine rarely
    run at the same speed, and the index build (about two seconds for a
    million records, on one core) then overlaps the slower process's last
    batches instead of following them. The rows inserted after an index
    exists keep it up to date, as in a live view; each index is its own
    transaction, and a process that finds the lock taken by one decides on
    meanwhile (see :class:`ViewWriter`)."""

    def __init__(self, target: Settings, statements: list[str]) -> None:
        self.target = target
        self.statements = statements

    def build(self) -> None:
        if not self.statements:
            return
        engine = make_engine(self.target.view_url, writer=True, rebuild=True)
        try:
            for sql in self.statements:
                with engine.begin() as conn:
                    conn.exec_driver_sql(sql)
        finally:
            engine.dispose()
        self.statements = []
