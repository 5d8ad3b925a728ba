"""Keeps the queue-depth read model (``queued_batches``, ``queue_depth``) in
step with the placements topic, exactly once: each partition's changes and
the offset they reflect commit in one transaction.

Most answers change nothing here (only a queued batch's do): folding them
again is a no-op, so their offset is committed with the next change, or
once :data:`COMMIT_EVERY` of them have passed, not in a transaction each. A
restarted projector reads those again, and they change nothing again."""

from __future__ import annotations

import json

from sqlalchemy import Connection, Engine, delete, insert, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from ledger.log import Log, Watches
from ledger.topics import Topics
from projections.queue_depth import QueueDepth, Waiting
from projections.view.engine import bound_idle, ended_idle
from projections.view.tables import queue_depth, queue_offsets, queued_batches
from projections.view.writer import DEFAULT_STALL_MS

COMMIT_EVERY = 10_000
"""Answers of a partition folded without a change before their offset is
committed anyway (what a restart reads again)."""


class QueueOffsetMoved(Exception):
    """Another queue projector committed this partition, or this one's
    commit stalled past its bound and was ended: this one is stale."""


class QueueProjector:
    def __init__(
        self, log: Log, topics: Topics, engine: Engine, stall_ms: int = DEFAULT_STALL_MS
    ) -> None:
        self.log = log
        self.topic = topics.placements
        self.engine = engine
        self.stall_ms = stall_ms
        """How long a commit may sit idle holding its offset row (another
        worker's projector waits for it) before PostgreSQL ends it."""
        self.partitions = log.partition_count(self.topic)
        self.fold = QueueDepth()
        self.offsets = [0] * self.partitions
        with engine.connect() as conn:
            for partition, offset in conn.execute(select(queue_offsets)):
                if partition < self.partitions:
                    self.offsets[partition] = int(offset)
            for row in conn.execute(select(queued_batches)):
                self.fold.waiting[row.batch_id] = Waiting(
                    row.priority, dict(row.waiting), row.queued_partition, row.queued_offset
                )
        self.committed = list(self.offsets)
        """Per partition, the offset the view holds; ``offsets`` (read up to)
        may be past it by answers that changed nothing."""

    def watches(self) -> Watches:
        """The next answer of each partition it folds."""
        return {self.topic: dict(enumerate(self.offsets))}

    def step(self, limit: int = 5000) -> int:
        """Fold the next answers of every partition; how many."""
        folded = 0
        for partition in range(self.partitions):
            records = self.log.read(self.topic, partition, self.offsets[partition], limit)
            if not records:
                continue
            before = dict(self.fold.waiting)
            for record in records:
                self.fold.apply(partition, record.offset, json.loads(record.value))
            end = records[-1].offset + 1
            if _changed(before, self.fold.waiting) or end - self.committed[partition] >= (
                COMMIT_EVERY
            ):
                self._commit(partition, end, before)
                self.committed[partition] = end
            self.offsets[partition] = end
            folded += len(records)
        return folded

    def catch_up(self) -> int:
        total = 0
        while folded := self.step():
            total += folded
        return total

    def _commit(self, partition: int, end: int, before: dict[str, Waiting]) -> None:
        try:
            with self.engine.begin() as conn:
                bound_idle(conn, self.stall_ms)
                self._advance(conn, partition, end)
                self._write(conn, before)
        except IntegrityError as error:  # another's first commit of the partition won
            raise QueueOffsetMoved(
                f"placements partition {partition}: committed elsewhere"
            ) from error
        except DBAPIError as error:
            if not ended_idle(error):
                raise
            raise QueueOffsetMoved(
                f"placements partition {partition}: the commit sat idle for more than "
                f"{self.stall_ms} ms and was ended"
            ) from error

    def _advance(self, conn: Connection, partition: int, end: int) -> None:
        query = select(queue_offsets.c.next_offset).where(queue_offsets.c.partition == partition)
        if conn.dialect.name == "postgresql":
            query = query.with_for_update()
        current = conn.execute(query).scalar_one_or_none()
        if (current or 0) != self.committed[partition]:
            raise QueueOffsetMoved(
                f"placements partition {partition}: the view is at {current}, "
                f"this projector at {self.committed[partition]}"
            )
        if current is None:
            conn.execute(insert(queue_offsets).values(partition=partition, next_offset=end))
        else:
            conn.execute(
                update(queue_offsets)
                .where(queue_offsets.c.partition == partition)
                .values(next_offset=end)
            )

    def _write(self, conn: Connection, before: dict[str, Waiting]) -> None:
        after = self.fold.waiting
        gone = [b for b, w in before.items() if after.get(b) is not w]
        new = [b for b, w in after.items() if before.get(b) is not w]
        if gone:
            conn.execute(delete(queued_batches).where(queued_batches.c.batch_id.in_(gone)))
        if new:
            conn.execute(
                insert(queued_batches),
                [
                    {
                        "batch_id": b,
                        "priority": after[b].priority,
                        "waiting": dict(after[b].shapes),
                        "queued_partition": after[b].partition,
                        "queued_offset": after[b].offset,
                    }
                    for b in new
                ],
            )
        shapes = {s for b in gone for s in before[b].shapes} | {
            s for b in new for s in after[b].shapes
        }
        if not shapes:
            return
        depth = self.fold.depth()
        conn.execute(delete(queue_depth).where(queue_depth.c.shape.in_(sorted(shapes))))
        rows = [
            {"shape": s, "instances": depth[s].instances, "batches": depth[s].batches}
            for s in sorted(shapes)
            if s in depth
        ]
        if rows:
            conn.execute(insert(queue_depth), rows)


def _changed(before: dict[str, Waiting], after: dict[str, Waiting]) -> bool:
    return len(before) != len(after) or any(after.get(b) is not w for b, w in before.items())


def read_depth(engine: Engine) -> dict[str, dict[str, int]]:
    """The queue depth as the view holds it: shape -> instances and batches."""
    with engine.connect() as conn:
        return {
            row.shape: {"instances": int(row.instances), "batches": int(row.batches)}
            for row in conn.execute(select(queue_depth).order_by(queue_depth.c.shape))
        }
