"""The single writer of one partition: read, decode, apply, publish, commit.

It decides nothing itself: :func:`projections.projector.apply` does. Outcomes
are published before the view commits, so a crash in between republishes them
on restart (at-least-once on the outcomes topic, identified by partition,
offset and seq) while the view applies every record exactly once.

A writer stops, and says why, rather than decide on a log it cannot trust: a
view that has applied more records than the log holds (the log lost records,
or the view belongs to another log), or a partition damaged where it would
read next. Writers of other partitions go on.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable

from ledger.log import Append, CorruptLog, Log, LogError, Record, Watches
from ledger.topics import DEFAULT_TOPICS, Topics
from projections.batch import Batch, decide
from projections.state import PartitionState
from projections.view.generations import take_partition
from projections.view.loader import load_state
from projections.view.writer import ViewWriter
from schemas.events import MetricsReported
from schemas.outcomes import Outcome

log = logging.getLogger(__name__)

REPORT_LINGER_S = 0.25
"""How long a projector's writer keeps a batch of nothing but metrics
reports decided and unpublished, for a later round to publish and commit
with its own records (:attr:`PartitionWriter.linger_s`): reports arrive a
few at a time, and each round costs an append of outcomes (an fsync per
partition) and a view transaction however few records it holds."""


def dead_letter_value(partition: int, offset: int, reason: str, value: bytes) -> bytes:
    """The dead-letter topic's record: where the bad record is, why, and its bytes."""
    return json.dumps(
        {
            "partition": partition,
            "offset": offset,
            "reason": reason,
            "value_b64": base64.b64encode(value).decode(),
        },
        separators=(",", ":"),
    ).encode()


class PartitionHalted(LogError):
    """A writer that will not decide its partition until an operator acts."""


class PartitionWriter:
    """Owns one partition of the events topic. ``halted`` says why it
    stopped, if it has: each ``step`` then raises :class:`PartitionHalted`."""

    def __init__(
        self,
        log_: Log,
        view: ViewWriter,
        partition: int,
        partitions: int,
        topics: Topics = DEFAULT_TOPICS,
        batch_size: int = 2000,
        publish: bool = True,
        until: int | None = None,
        owner: str | None = None,
        loaded: tuple[PartitionState, int] | None = None,
        linger_s: float = 0.0,
    ) -> None:
        self.log = log_
        self.view = view
        self.partition = partition
        self.partitions = partitions
        self.topics = topics
        self.batch_size = batch_size
        self.publish = publish
        self.until = until
        """The offset to stop before (a replay as of a time); None for the log's end."""
        self.on_commit: Callable[[Batch], object] | None = None
        """Told of each batch once the view has committed it (an API in this
        process lets its reads go on: they see what it answered)."""
        self.on_decided: Callable[[Batch], object] | None = None
        """Told of each batch as soon as it is decided, before its outcomes
        are appended or the view commits it (an API in this process hands
        its waiting writes their decisions: each is a function of the
        records up to its own, already durable, which a restart decides
        again the same)."""
        self.pending: Batch | None = None
        """A batch decided whose view commit a round deferred
        (:func:`catch_up_all` with ``defer``): committed before the next
        batch is decided, or by :func:`flush_all`."""
        self.held = False
        """Whether ``pending``'s outcomes are still to be appended (``hold``):
        by whoever appends them with its own records (:func:`held_appends`),
        else before it is committed."""
        self.linger_s = linger_s
        """How long :func:`step_all` may leave a batch of metrics reports
        alone unpublished and uncommitted (``pending``, ``held``), so that
        the next round's records go out in the same append and view
        transaction (:data:`REPORT_LINGER_S`); 0: never. Nothing of such a
        batch is acknowledged, and a crash meanwhile decides its records
        again from the view."""
        self.lingering: float | None = None
        """When ``pending`` is such a batch: the :func:`time.monotonic` by
        which a round publishes and commits it, with records or alone."""
        self.lock = threading.RLock()
        """Held by whoever decides this partition's next records in rounds
        (:func:`step_all`: the process's loop, or a write of the Placement
        API that drives the writer of its partition itself), and by whoever
        touches the batch a round left deferred or held (:func:`flush_all`,
        :func:`held_appends`; :func:`locked` across an append of the held
        outcomes): reentrant, as a round flushes what an earlier one left."""
        self.generation: int | None = None
        """The partition's generation this writer took it over at, when it
        was given an ``owner`` (a consumer group's worker): its commits are
        refused once another writer takes the partition (Fenced)."""
        if owner is not None:
            # taken before the state is loaded: a commit of the writer it
            # replaces is then either in the state or refused
            self.generation = take_partition(view.engine, partition, owner, view.stall_ms)
        if loaded is not None:
            # the state as of the view's offset, loaded before (a checkpoint's)
            self.state, self.next_offset = loaded
        else:
            with view.engine.connect() as conn:
                self.state, self.next_offset = load_state(conn, partition, partitions)
        # records below next_offset are in the view; the state matches it
        self.state.touched.clear()
        self.state.reshaped.clear()
        self.halted: str | None = self._ahead_of_log()
        if self.halted is not None:
            log.error("partition %d will not start: %s", partition, self.halted)

    def _ahead_of_log(self) -> str | None:
        """Why the view cannot be continued from this log, if it cannot."""
        topic = self.topics.events
        if self.log.holds(topic, self.partition, self.next_offset):
            return None  # (without reading the partition to its end)
        end = self.log.end_offset(topic, self.partition)
        if self.next_offset <= end:
            return None
        damage = self.log.damage(topic, self.partition)
        if damage is not None:
            return f"the view has applied {self.next_offset} records, past the damage: {damage}"
        return (
            f"partition {self.partition} of {topic!r}: the view has applied "
            f"{self.next_offset} records but the log holds {end}. The log lost records "
            "(restore the data directory from a backup) or the view belongs to another "
            "log (check --db and the log's address); nothing is decided until one is fixed"
        )

    def watches(self) -> Watches:
        """The next record this writer waits for (none once it has halted):
        past a batch decided but not yet committed (a lingering one)."""
        if self.halted is not None:
            return {}
        return {self.topics.events: {self.partition: self.decided_to}}

    def step(self) -> Batch | None:
        """Apply and commit the next batch of records; None at the end of the log."""
        records = self.fetch()
        if not records:
            return None
        return self.write(records)

    @property
    def decided_to(self) -> int:
        """The next record to decide: :attr:`next_offset`, or past the
        batch whose commit is deferred."""
        return self.next_offset if self.pending is None else self.pending.end

    def fetch(self) -> list[Record]:
        """The next batch of records to decide, from :attr:`decided_to`;
        empty at the end of the log (or of ``until``)."""
        if self.halted is not None:
            raise PartitionHalted(self.halted)
        topic = self.topics.events
        wanted = self.batch_size
        start = self.decided_to
        if self.until is not None:
            wanted = min(wanted, self.until - start)
            if wanted <= 0:
                return []
        try:
            return self.log.read(topic, self.partition, start, wanted)
        except CorruptLog as damaged:
            self.halted = damaged.damage
            raise PartitionHalted(self.halted) from damaged

    def write(self, records: list[Record]) -> Batch:
        """Decide, publish and commit ``records``, which must start at
        :attr:`next_offset` and follow each other (a consumer fetched them)."""
        batch = self.decide(records)
        if self.publish:
            outcomes, dead = self.appends(batch)
            if outcomes:
                self.log.append(self.topics.outcomes, outcomes)
            if dead:
                self.log.append(self.topics.dead_letters, dead)
        self.commit(batch)
        return batch

    def decide(self, records: list[Record]) -> Batch:
        """Decide ``records`` on the partition's state (changing it): what
        :meth:`commit` writes once the outcomes are published."""
        if self.halted is not None:
            raise PartitionHalted(self.halted)
        self.flush()  # a batch's rows are planned from the state it left
        return self.decided(decide(self.state, records))

    def decided(self, batch: Batch) -> Batch:
        """``batch`` was just decided on this writer's state: told to
        :attr:`on_decided`."""
        if self.on_decided is not None:
            self.on_decided(batch)
        return batch

    def flush(self) -> None:
        """Publish and commit the batch whose commit was deferred, if any."""
        flush_all([self])

    def commit(self, batch: Batch) -> None:
        """Commit a decided ``batch`` to the view, with the offset it ends at."""
        self.view.commit(self.state, batch, self.generation)
        self.committed(batch)

    def committed(self, batch: Batch) -> None:
        """``batch`` is in the view: go on from its end."""
        self.next_offset = batch.end
        self.pending = None
        self.held = False
        self.lingering = None
        if self.on_commit is not None:
            self.on_commit(batch)

    def reload(self) -> None:
        """The state again from the view, as of its offset: after a batch
        was decided but not committed."""
        self.pending = None
        self.held = False
        self.lingering = None
        with self.view.engine.connect() as conn:
            self.state, self.next_offset = load_state(conn, self.partition, self.partitions)
        self.state.touched.clear()
        self.state.reshaped.clear()

    def appends(self, batch: Batch) -> tuple[list[Append], list[Append]]:
        """What publishing ``batch`` appends: its outcomes (to the outcomes
        topic) and its dead letters (to the dead-letter topic), each said
        in the log of the writer's process."""
        partition = self.partition
        outcomes = [
            Append(partition, o.subject.encode(), o.to_json())
            for applied in batch.applied
            for o in applied.outcomes
        ]
        for dead in batch.dead:
            log.warning(
                "dead letter: partition %d offset %d: %s", partition, dead.offset, dead.reason
            )
        dead_letters = [
            Append(
                0,
                f"{partition}:{d.offset}".encode(),
                dead_letter_value(partition, d.offset, d.reason, d.value),
            )
            for d in batch.dead
        ]
        return outcomes, dead_letters

    def catch_up(self) -> int:
        """Apply every record up to the partition's current end; return how many."""
        total = 0
        while (batch := self.step()) is not None:
            total += batch.end - batch.start
        return total


def step_all(writers: Iterable[PartitionWriter]) -> bool:
    """One batch from every writer that has records waiting; whether any had.
    Every writer gets its turn each round, so no partition waits on another,
    nor on one that has halted (said once, in the log). The round's
    outcomes are appended together, one group commit for them all, before
    any of its batches commits to the view. A writer with ``linger_s``
    leaves a batch of metrics reports alone pending for that long, and
    the rounds meanwhile decide its next records after it, into one batch
    (:data:`REPORT_LINGER_S`); a round publishes and commits the batches
    whose time has come (:func:`lingering_until`) with its own."""
    return _round(writers) > 0


def catch_up_all(
    writers: Iterable[PartitionWriter], defer: bool = False, hold: bool = False
) -> int:
    """Every writer that has not halted up to its partition's current end,
    in rounds as :func:`step_all` makes them; how many records that took.
    ``defer``: the last batch of each writer is decided and its outcomes
    published (durable), but its view commit is left for the next round
    or :func:`flush_all`, so that a scheduler waiting in this process for
    those outcomes answers before the view's commit rather than after it
    (a crash in between is the one between publishing and committing
    that a restart already redoes). ``hold`` (which defers too): that
    batch's outcomes are not appended either, but held for the caller to
    append with its own records in one group commit (:func:`held_appends`,
    :func:`held_outcomes`), so that what it appends on the strength of
    those decisions is durable no sooner and no later than they are."""
    writers = list(writers)
    if not (defer or hold):
        flush_all(writers)
    total = 0
    while decided := _round(writers, defer or hold, hold):
        total += decided
    if not (defer or hold):
        flush_all(writers)  # what lingers too: the view then holds every record
    return total


class locked:  # lower case: used as the function it was, ``with locked(writers)``
    """Every writer's :attr:`~PartitionWriter.lock`, taken in one order by
    every thread (so that two holders of several cannot deadlock): no round
    and no flush of theirs runs meanwhile in another thread. A class, not
    a generator in an ExitStack: a loop's every step takes it two or three
    times (7 us for eight writers here, against 23 us)."""

    __slots__ = ("_order", "_writers")

    def __init__(self, writers: Iterable[PartitionWriter]) -> None:
        self._writers = list(writers)
        self._order = sorted(self._writers, key=lambda w: (w.partition, id(w)))

    def __enter__(self) -> list[PartitionWriter]:
        taken = 0
        try:
            for writer in self._order:
                writer.lock.acquire()
                taken += 1
        except BaseException:
            for writer in reversed(self._order[:taken]):
                writer.lock.release()
            raise
        return self._writers

    def __exit__(self, *_: object) -> None:
        for writer in reversed(self._order):
            writer.lock.release()


def held_outcomes(writers: Iterable[PartitionWriter]) -> list[Outcome]:
    """The outcomes of the batches whose appends are held, in their order."""
    with locked(writers) as writers:
        return [
            o
            for w in writers
            if w.held and w.pending is not None
            for applied in w.pending.applied
            for o in applied.outcomes
        ]


def held_appends(writers: Iterable[PartitionWriter]) -> list[tuple[str, list[Append]]]:
    """What the held batches append, by topic, for the caller to append
    with its own records (``Log.append_many``); once that returned,
    :func:`held_appended`, both under :func:`locked` (else a round in
    another thread may append them too, flushing them). Should it fail,
    they are still held: appended before they are committed."""
    by_topic: dict[str, list[Append]] = {}
    with locked(writers) as writers:
        for writer in writers:
            if writer.held and writer.pending is not None:
                outcomes, dead = writer.appends(writer.pending)
                by_topic.setdefault(writer.topics.outcomes, []).extend(outcomes)
                by_topic.setdefault(writer.topics.dead_letters, []).extend(dead)
    return [(topic, appends) for topic, appends in by_topic.items() if appends]


def held_appended(writers: Iterable[PartitionWriter]) -> None:
    """The held batches' appends (:func:`held_appends`) are durable: a
    lingering one's too, which is then only left to commit."""
    with locked(writers) as writers:
        for writer in writers:
            writer.held = False
            writer.lingering = None


def flush_all(writers: Iterable[PartitionWriter]) -> None:
    """Commit every batch whose view commit was deferred (its outcomes
    appended first, if held), together when they share a view (as a round
    commits)."""
    with locked(writers) as writers:
        _flush_locked(writers)


def _flush_locked(writers: list[PartitionWriter]) -> None:
    decided = [(w, w.pending) for w in writers if w.pending is not None]
    if not decided:
        return
    held = [(w, batch) for w, batch in decided if w.held]
    if held:
        try:
            _publish_together(held)
        except Exception:
            for writer, _ in held:
                writer.reload()
            raise
        for writer, _ in held:
            writer.held = False
    if _one_view(decided):
        _commit_together(decided)
    else:
        _commit_each(decided)


def _round(writers: Iterable[PartitionWriter], defer: bool = False, hold: bool = False) -> int:
    """A round of :func:`step_all`; how many records it decided. Without
    ``defer`` every batch deferred before is committed first; with ``hold``
    the round's outcomes are not appended (see :func:`catch_up_all`). It
    holds each writer's :attr:`~PartitionWriter.lock` (:func:`locked`) from
    its fetch to its commit, so that two threads never decide one partition
    at once."""
    with locked(writers) as writers:
        return _locked_round(writers, defer, hold)


def _locked_round(writers: list[PartitionWriter], defer: bool, hold: bool) -> int:
    if defer:
        for writer in writers:
            writer.lingering = None  # held like the round's: the caller appends it, or a flush
    else:
        _flush_locked([w for w in writers if w.lingering is None])
    fetched: list[tuple[PartitionWriter, list[Record]]] = []
    for writer in writers:
        if writer.halted is None:
            try:
                records = writer.fetch()
            except PartitionHalted as halted:
                log.error("partition %d stopped: %s", writer.partition, halted)
                continue
            if records:
                fetched.append((writer, records))
    # before their next batches are decided; a lingering batch is taken into its writer's
    _flush_locked([writer for writer, _ in fetched if writer.lingering is None])
    now = time.monotonic()
    decided: list[tuple[PartitionWriter, Batch]] = []
    for writer, records in fetched:
        batch, due = _decide_after(writer, records)
        if not (defer or hold) and _lingers(writer, batch, now, due):
            continue
        decided.append((writer, batch))
    decided += [] if defer else _due(writers, now)
    try:
        if not hold:
            _publish_together(decided)
    except Exception:
        for writer, _ in decided:
            writer.reload()  # decided, not committed: its state is ahead of the view
        raise
    if defer:
        for writer, batch in decided:
            writer.pending = batch
            writer.held = hold and writer.publish
    elif _one_view(decided):
        _commit_together(decided)
    elif decided:
        _commit_each(decided)
    return sum(len(records) for _, records in fetched)


def _decide_after(writer: PartitionWriter, records: list[Record]) -> tuple[Batch, float | None]:
    """``records`` decided by ``writer``, after its lingering batch if it
    has one: one batch of both, and when the lingering one is due (None
    without one). The writer keeps no batch pending then: the round
    publishes and commits the joined batch, or leaves it lingering again."""
    before, due = writer.pending, writer.lingering
    if before is None or due is None:
        return writer.decide(records), None
    if writer.halted is not None:
        raise PartitionHalted(writer.halted)
    after = writer.decided(decide(writer.state, records))
    writer.pending, writer.held, writer.lingering = None, False, None
    joined = Batch(
        before.partition,
        before.start,
        after.end,
        before.applied + after.applied,
        before.dead + after.dead,
    )
    return joined, due


def _lingers(writer: PartitionWriter, batch: Batch, now: float, due: float | None) -> bool:
    """Whether ``batch`` (only metrics reports, fewer than a batch) is left
    pending for a later round, until ``due`` or ``linger_s`` from ``now``:
    reports arrive a few at a time, and a round costs an append of outcomes
    and a view transaction however few records it holds."""
    if writer.linger_s <= 0 or batch.dead or batch.end - batch.start >= writer.batch_size:
        return False
    if not all(type(a.event) is MetricsReported for a in batch.applied):
        return False
    due = now + writer.linger_s if due is None else due
    if due <= now:
        return False
    writer.pending, writer.held, writer.lingering = batch, writer.publish, due
    return True


def _due(writers: list[PartitionWriter], now: float) -> list[tuple[PartitionWriter, Batch]]:
    """The lingering batches whose time has come, taken from their writers
    for the round to publish and commit."""
    due: list[tuple[PartitionWriter, Batch]] = []
    for writer in writers:
        if writer.pending is not None and writer.lingering is not None and writer.lingering <= now:
            due.append((writer, writer.pending))
            writer.pending, writer.held, writer.lingering = None, False, None
    return due


def lingering_until(writers: Iterable[PartitionWriter]) -> float | None:
    """The earliest :func:`time.monotonic` a lingering batch of ``writers``
    is due at (a round then publishes and commits it), if any: how long
    their loop may wait for records."""
    dues = [w.lingering for w in writers if w.lingering is not None]
    return min(dues) if dues else None


def _commit_each(decided: list[tuple[PartitionWriter, Batch]]) -> None:
    """Commit a round's batches one by one; a writer whose batch (or an
    earlier one's) failed is reloaded from the view, and the failure raised."""
    committed = 0
    try:
        for writer, batch in decided:
            writer.commit(batch)
            committed += 1
    except Exception:
        for writer, _ in decided[committed:]:
            writer.reload()
        raise


def _one_view(decided: list[tuple[PartitionWriter, Batch]]) -> bool:
    """Whether a round's batches can be committed in one transaction: more
    than one, all to one view that holds nothing back (a rebuild's does)."""
    if len(decided) < 2:
        return False
    view = decided[0][0].view
    return all(w.view is view for w, _ in decided) and view.held_back is None


def _commit_together(decided: list[tuple[PartitionWriter, Batch]]) -> None:
    """Commit a round's batches, each with its partition's offset, in one
    transaction: a partition that gets a record or two at a time (metrics
    reports) would otherwise pay a transaction for each. Should it fail
    (a partition fenced, a stale batch), each batch is committed alone, so
    every other partition goes on; a writer whose batch is refused is
    reloaded from the view, and the first refusal is raised."""
    view = decided[0][0].view
    planned = [w.view.plan(w.state, batch, w.generation) for w, batch in decided]
    try:
        view.commit_planned(planned)
    except Exception:  # each alone says which, below
        failure: Exception | None = None
        for (writer, batch), one in zip(decided, planned, strict=True):
            try:
                view.commit_planned([one])  # the same rows again: the plan emptied the state's
            except Exception as error:
                failure = failure or error
                writer.reload()
                continue
            writer.committed(batch)
        if failure is not None:
            raise failure from None
    else:
        for writer, batch in decided:
            writer.committed(batch)


def _publish_together(decided: list[tuple[PartitionWriter, Batch]]) -> None:
    """Append the outcomes and dead letters of the batches of a round,
    one append per log and topic."""
    appends: dict[tuple[int, str], tuple[Log, list[Append]]] = {}
    for writer, batch in decided:
        if not writer.publish:
            continue
        outcomes, dead = writer.appends(batch)
        for topic, records in (
            (writer.topics.outcomes, outcomes),
            (writer.topics.dead_letters, dead),
        ):
            if records:
                appends.setdefault((id(writer.log), topic), (writer.log, []))[1].extend(records)
    for (_, topic), (log_, records) in appends.items():
        log_.append(topic, records)
