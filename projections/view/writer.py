"""Writes a batch of decisions to the read model, with the offset they reflect,
in one transaction: a batch that was already committed changes nothing.

The rows are made by kind, before the transaction: ``outcome_rows``
(decisions and dead letters), ``reservation_rows`` (reservations and the
identifiers they hold), ``usage_rows`` (providers, inventories and pools),
all into a ``plan.Plan``; a rebuild's writer holds rows back
(``rebuild``). This module runs the plan with the partition's offset."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from projections.batch import Batch
from projections.state import PartitionState
from projections.view.commits import notify_commit, ring_committed
from projections.view.engine import begin_writing, bound_idle, ended_idle
from projections.view.generations import owners
from projections.view.group_rows import write_server_groups
from projections.view.outcome_rows import write_dead_letters, write_outcomes
from projections.view.placement_rows import write_placement
from projections.view.plan import Plan, bulk
from projections.view.rebuild import HeldBack
from projections.view.reservation_rows import write_reservations
from projections.view.usage_rows import write_aggregates, write_pools, write_providers


class StaleBatch(Exception):
    """The view's committed offset is not where this batch starts: another
    writer owns the partition, or records were skipped. A broken invariant."""


class Fenced(Exception):
    """Another writer has taken the partition over since this one did (its
    generation is newer, see :mod:`projections.view.generations`): this
    writer no longer owns it and must stop writing it."""


class Stalled(Fenced):
    """This writer's commit sat idle in its transaction past
    :attr:`ViewWriter.stall_ms` (its process paused or starved) and
    PostgreSQL ended the transaction, so that a takeover waiting for its
    locks could go on. Its group session, as long, has expired with it: it
    writes no more until the group assigns it partitions again."""


DEFAULT_STALL_MS = 10_000
"""How long a fenced commit may sit idle mid-transaction (see
:attr:`ViewWriter.stall_ms`); ``berth worker`` sets its session timeout."""


class ViewWriter:
    """Commits batches of one or more partitions to the read model.

    A writer that ``holds_back`` (a number of rows) is a rebuild's, into a
    file that nothing reads until it is complete: it holds back the rows of
    reservations still active and providers' usage (see ``rebuild``), and
    :meth:`write_held_back` writes them when a partition's last batch is in.

    A rebuild's writer also does not wait for the write lock, which the
    other replay processes and the index build take in turn: a batch whose
    lock is taken waits in memory, in order, while the process decides the
    next, and goes in the next transaction that gets the lock (at most
    :data:`_MOST_WAITING` wait; :meth:`flush` writes what still does)."""

    def __init__(self, engine: Engine, holds_back: int | None = None) -> None:
        self.engine = engine
        self.stall_ms = DEFAULT_STALL_MS
        """On PostgreSQL, how long a commit made with a generation may sit
        idle in its transaction before the server ends it. A commit holds
        its partition's owner row (see :meth:`Planned.run`), which a
        takeover must update: without a bound, a writer paused mid-commit
        (SIGSTOP, a stalled machine) would hold the takeover back for as
        long as it stays paused."""
        self.held_back = None if holds_back is None else HeldBack(holds_back)
        self.waiting: list[Planned | Plan] = []

    def commit(self, state: PartitionState, batch: Batch, generation: int | None = None) -> bool:
        """Write ``batch`` and its end offset atomically. False if the view
        already holds it (a redelivery); :class:`StaleBatch` on a gap;
        :class:`Fenced` if a ``generation`` is given and the partition's
        owner is no longer of that generation. A rebuild's batch may wait
        for the lock (see the class)."""
        planned = self.plan(state, batch, generation)
        if self.held_back is None:
            return self.commit_planned([planned])[0]
        self._wait(planned)
        return True

    def plan(self, state: PartitionState, batch: Batch, generation: int | None = None) -> Planned:
        """``batch``'s writes, made ready to commit (:meth:`commit_planned`):
        the rows of what changed in ``state``, whose change sets this empties."""
        # rows are made before the transaction: with several writer processes
        # on one SQLite file, the write lock is then held only while writing
        plan = Plan()
        held = self.held_back
        write_outcomes(plan, batch)
        write_aggregates(plan, state, batch.end)
        write_server_groups(plan, state, batch.end)
        write_reservations(plan, state, batch, None if held is None else held.reservations)
        write_providers(plan, state, batch.end, None if held is None else held.usage)
        if held is not None and len(held.reservations) > held.at_most:
            held.write_reservations(plan)
        write_pools(plan, state, batch)
        write_placement(plan, state, batch.end)
        write_dead_letters(plan, batch)
        return Planned(plan, batch, state, generation, self.stall_ms)

    def commit_planned(self, planned: Sequence[Planned]) -> list[bool]:
        """Write batches of one or more partitions, each with its end offset,
        in one transaction: all or none. For each, False if the view already
        holds it; :class:`StaleBatch` or :class:`Fenced` as :meth:`commit`
        says, and then none is written (each may be committed again alone)."""
        try:
            with self.engine.begin() as conn:
                written = [p.run(conn) for p in planned]
        except DBAPIError as error:
            partitions = sorted(p.partition for p in planned)
            if ended_idle(error):
                raise Stalled(
                    f"partitions {partitions}: the commit sat idle in its transaction for "
                    f"more than {self.stall_ms} ms and PostgreSQL ended it"
                ) from error
            taken = self._taken_over(planned)
            if taken:  # its session ended by the takeover (see take_partition)
                raise Fenced(
                    f"partitions {taken}: taken over while this writer's commit was "
                    f"stopped, which failed: {error.orig}"
                ) from error
            raise
        ring_committed(self.engine)
        return written

    def _taken_over(self, planned: Sequence[Planned]) -> list[int]:
        """The partitions of ``planned`` whose owner's generation is no
        longer the one they were planned with; none if that cannot be read."""
        try:
            with self.engine.connect() as conn:
                current = owners(conn)
        except DBAPIError:
            return []
        return sorted(
            p.partition
            for p in planned
            if p.generation is not None
            and p.partition in current
            and current[p.partition].generation != p.generation
        )

    def write_held_back(self, state: PartitionState) -> None:
        """Write what was held back of ``state``'s partition (see the class):
        the rows of the reservations still active, and the usage of the
        providers, each with the offset of the batch that last changed it.
        Like a batch, they may wait for the lock."""
        held = self.held_back
        if held is None or not (held.reservations or held.usage):
            return
        plan = Plan()
        held.write(plan, state)
        self._wait(plan)

    def flush(self) -> None:
        """Write every batch still waiting for the lock, waiting for it."""
        self._write_waiting(wait=True)

    def _wait(self, writes: Planned | Plan) -> None:
        """Queue ``writes`` and write the queue if the lock is free, or
        once it is if the queue is full."""
        self.waiting.append(writes)
        self._write_waiting(wait=len(self.waiting) >= _MOST_WAITING)

    def _write_waiting(self, wait: bool) -> None:
        if not self.waiting:
            return
        conn = begin_writing(self.engine, wait)
        if conn is None:
            return
        with conn:
            for writes in self.waiting:
                writes.run(conn)
            conn.commit()
        self.waiting.clear()


_MOST_WAITING = 8
"""Batches a rebuild's writer keeps waiting for the write lock at most: the
lock is taken for well under the time a batch takes to decide, except by
the index build (about two seconds, some three batches of a process)."""


class Planned:
    """A batch's writes, made ready, and the offset they take its partition
    to. Running them again in another transaction, after one that did not
    commit, writes the same rows."""

    __slots__ = (
        "clock_ms",
        "end",
        "generation",
        "partition",
        "partitions",
        "plan",
        "stall_ms",
        "start",
    )

    def __init__(
        self,
        plan: Plan,
        batch: Batch,
        state: PartitionState,
        generation: int | None = None,
        stall_ms: int = DEFAULT_STALL_MS,
    ) -> None:
        self.plan = plan
        self.partition, self.start, self.end = batch.partition, batch.start, batch.end
        self.partitions, self.clock_ms = state.partitions, state.clock_ms
        self.generation = generation
        self.stall_ms = stall_ms

    def run(self, conn: Connection) -> bool:
        """Run the plan and move the offset, in ``conn``'s transaction. False
        if the view already holds the batch."""
        if self.generation is not None:
            bound_idle(conn, self.stall_ms)
        current = _lock_offset(conn, self.partition)
        if self.generation is not None:
            _check_generation(conn, self.partition, self.generation)
        if current is not None and current >= self.end:
            return False  # the plan consumed the state's change sets all the same
        if (current or 0) != self.start:
            raise StaleBatch(
                f"partition {self.partition}: view is at offset {current}, "
                f"batch starts at {self.start}"
            )
        self.plan.run(conn)
        row = (self.partitions, self.end, self.clock_ms, self.partition)
        bulk(conn, _INSERT_OFFSET if current is None else _UPDATE_OFFSET, [row])
        notify_commit(conn, self.partition)
        return True


# the offset row is read and written once per commit: plain SQL, without
# SQLAlchemy's statement compilation and result processing
_SELECT_OFFSET = 'SELECT next_offset FROM partition_offsets WHERE "partition" = ?'
_INSERT_OFFSET = (
    'INSERT INTO partition_offsets (partitions, next_offset, clock_ms, "partition") '
    "VALUES (?, ?, ?, ?)"
)
_UPDATE_OFFSET = (
    "UPDATE partition_offsets SET partitions = ?, next_offset = ?, clock_ms = ? "
    'WHERE "partition" = ?'
)


def _lock_offset(conn: Connection, partition: int) -> int | None:
    sql = _SELECT_OFFSET
    if conn.dialect.paramstyle != "qmark":
        sql = sql.replace("?", "%s")
    if conn.dialect.name == "postgresql":
        sql += " FOR UPDATE"
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, (partition,))
        row = cursor.fetchone()
    finally:
        cursor.close()
    return None if row is None else int(row[0])


# a share lock: a takeover's update of the row waits for this commit, and a
# commit that comes after the takeover reads the new generation
_SELECT_GENERATION = 'SELECT generation FROM partition_owners WHERE "partition" = ?'


def _check_generation(conn: Connection, partition: int, generation: int) -> None:
    sql = _SELECT_GENERATION
    if conn.dialect.paramstyle != "qmark":
        sql = sql.replace("?", "%s")
    if conn.dialect.name == "postgresql":
        sql += " FOR SHARE"
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, (partition,))
        row = cursor.fetchone()
    finally:
        cursor.close()
    current = None if row is None else int(row[0])
    if current != generation:
        raise Fenced(
            f"partition {partition}: taken over (generation {current}) since this "
            f"writer took it (generation {generation})"
        )
