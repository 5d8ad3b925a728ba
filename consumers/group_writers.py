"""The writers of the partitions a consumer group gives this process.

A group assigns partitions and takes them away (a rebalance); this keeps one
:class:`PartitionWriter` per partition held, each taking its partition over
in the view (a new generation, :mod:`projections.view.generations`) before
loading its state, so that a worker the group replaced cannot commit after
it. Records come in from the group's consumer in batches, of any assigned
partitions; whatever the consumer has not delivered in order (the backlog
from the view's offset on, a gap after a redelivery from elsewhere) is read
from the log itself. Nothing here is asynchronous: the worker calls it from
one thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import partial
from itertools import groupby, pairwise

from consumers.partition_writer import PartitionWriter
from ledger.log import Record
from projections.view.generations import owners
from projections.view.writer import Fenced, ViewWriter

log = logging.getLogger(__name__)

MakeWriter = Callable[[int], PartitionWriter]
"""A partition's writer, taking it over for this process."""


class GroupWriters:
    """Writers of the partitions assigned to this process, by partition."""

    def __init__(self, view: ViewWriter, make_writer: MakeWriter, batch_size: int = 2000) -> None:
        self.view = view
        self.make_writer = make_writer
        self.batch_size = batch_size
        """The most records one commit takes."""
        self.writers: dict[int, PartitionWriter] = {}
        self.suspended: dict[int, PartitionWriter] = {}
        """Writers of partitions revoked in a rebalance still under way."""
        self.behind: set[int] = set()
        """Partitions whose writer reads from the log until it is at its end:
        the consumer's records start past where the view is."""
        self.fenced = 0
        """Commits refused because another writer took the partition over."""

    def assign(self, partitions: Iterable[int]) -> list[int]:
        """Hold exactly ``partitions`` from now on; which ones were taken over.
        A writer kept through a rebalance (suspended, then given its
        partition back) goes on, unless another process took the partition
        meanwhile; every writer held reads the log up to its end first, as
        the consumer may have dropped what it had fetched."""
        wanted = set(partitions)
        kept = {p: w for p, w in (*self.suspended.items(), *self.writers.items()) if p in wanted}
        self.suspended.clear()
        self.writers.clear()
        self.behind.clear()
        with self.view.engine.connect() as conn:
            current = owners(conn)
        taken = []
        for partition in sorted(wanted):
            writer = kept.get(partition)
            held = current.get(partition)
            if writer is None or held is None or held.generation != writer.generation:
                writer = self.make_writer(partition)
                taken.append(partition)
            self.writers[partition] = writer
            self.behind.add(partition)
        return taken

    def suspend(self, partitions: Iterable[int]) -> None:
        """Write ``partitions`` no more until they are assigned again (a
        rebalance takes every partition away before it assigns them)."""
        for partition in partitions:
            writer = self.writers.pop(partition, None)
            if writer is not None:
                self.suspended[partition] = writer
            self.behind.discard(partition)

    def revoke(self, partitions: Iterable[int]) -> None:
        """Stop writing ``partitions``: nothing more is committed for them
        from here, and a writer given one back takes it over afresh."""
        for partition in partitions:
            self.writers.pop(partition, None)
            self.suspended.pop(partition, None)
            self.behind.discard(partition)

    def write(self, records: Iterable[Record]) -> int:
        """Apply the records the consumer delivered (in offset order within
        each partition); how many were applied. Records already in the view
        are skipped; records past a gap wait until the log has filled it."""
        applied = 0
        ordered = sorted(records, key=lambda r: (r.partition, r.offset))
        for partition, run in groupby(ordered, key=lambda r: r.partition):
            writer = self.writers.get(partition)
            if writer is None:
                continue  # revoked, or not assigned yet: its writer reads the log
            if partition in self.behind:
                continue  # the log serves it until it is at the end
            fresh = [r for r in run if r.offset >= writer.next_offset]
            if not fresh:
                continue
            if fresh[0].offset > writer.next_offset or not _consecutive(fresh):
                self.behind.add(partition)
                continue
            for start in range(0, len(fresh), self.batch_size):
                chunk = fresh[start : start + self.batch_size]
                written = self._guarded(partition, partial(_write, writer, chunk))
                if written < 0:
                    break
                applied += written
        return applied

    def catch_up(self, batches: int = 8) -> bool:
        """Up to ``batches`` batches from the log for each partition behind;
        whether any is still behind."""
        for partition in sorted(self.behind):
            writer = self.writers[partition]
            for _ in range(batches):
                done = self._guarded(partition, partial(_step, writer))
                if done <= 0:
                    if done == 0:
                        self.behind.discard(partition)
                    break
        return bool(self.behind)

    def _guarded(self, partition: int, action: Callable[[], int]) -> int:
        """``action``'s result, or -1 once the partition has been taken over
        elsewhere or this writer's commit stalled past its bound (the writer
        is dropped: the group will take the partition away)."""
        try:
            return action()
        except Fenced as error:
            log.warning("fenced: %s; no longer writing it", error)
            self.fenced += 1
            self.revoke([partition])
            return -1


def _write(writer: PartitionWriter, records: list[Record]) -> int:
    writer.write(records)
    return len(records)


def _step(writer: PartitionWriter) -> int:
    """Records the writer applied from the log; 0 at its end."""
    batch = writer.step()
    return 0 if batch is None else batch.end - batch.start


def _consecutive(records: list[Record]) -> bool:
    return all(b.offset == a.offset + 1 for a, b in pairwise(records))
