"""Retention for the view's outcome rows: the decisions older than a time
go, partition by partition, in short transactions beside the live writers.

Nothing that decides reads these rows: a writer's state is its reservations
and providers, a scheduler reads the outcomes topic. What goes is the view's
copy of the audit trail (``berth history`` shows less); the log keeps every
record, and a replay writes every outcome again.

In a partition the clock never goes back, so its outcomes older than a time
are the ones below an offset. That offset is found by a binary search on
the table's primary key (partition, offset, seq), and the rows below it are
deleted in ranges of offsets, each in its own transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Engine, delete, func, select

from projections.view.tables import outcomes, partition_offsets

DELETE_SPAN = 20_000
"""Offsets whose outcomes one transaction deletes: a short hold on the
writers' lock, since SQLite has one writer at a time."""


@dataclass(frozen=True, slots=True)
class Pruned:
    partition: int
    below_offset: int
    """The partition's outcomes below this offset are gone (or would be)."""
    rows: int


def prune_outcomes(engine: Engine, before_ms: int, dry_run: bool = False) -> list[Pruned]:
    """Delete every outcome row decided at a partition clock before
    ``before_ms``; with ``dry_run``, only count them."""
    with engine.connect() as conn:
        partitions = [
            (int(p), int(n))
            for p, n in conn.execute(
                select(partition_offsets.c.partition, partition_offsets.c.next_offset)
            )
        ]
    pruned = []
    for partition, next_offset in sorted(partitions):
        with engine.connect() as conn:
            cut = _first_at_or_after(conn, partition, next_offset, before_ms)
            rows = _count(conn, partition, cut)
        if not dry_run:
            for start in range(0, cut, DELETE_SPAN):
                with engine.begin() as conn:
                    c = outcomes.c
                    conn.execute(
                        delete(outcomes).where(
                            c.partition == partition,
                            c.offset >= start,
                            c.offset < min(cut, start + DELETE_SPAN),
                        )
                    )
        pruned.append(Pruned(partition, cut, rows))
    return pruned


def _first_at_or_after(conn: Connection, partition: int, end: int, before_ms: int) -> int:
    """The lowest offset whose outcomes were decided at ``before_ms`` or later
    (``end`` if none): the clock is monotonic in the offset, and a record
    without outcomes takes its next neighbour's clock."""
    c = outcomes.c
    low, high = 0, end
    while low < high:
        middle = (low + high) // 2
        clock = conn.execute(
            select(c.clock_ms)
            .where(c.partition == partition, c.offset >= middle, c.offset < end)
            .order_by(c.offset, c.seq)
            .limit(1)
        ).scalar()
        if clock is None or clock >= before_ms:
            high = middle
        else:
            low = middle + 1
    return low


def _count(conn: Connection, partition: int, below: int) -> int:
    c = outcomes.c
    query = select(func.count()).where(c.partition == partition, c.offset < below)
    return int(conn.execute(query.select_from(outcomes)).scalar_one())
