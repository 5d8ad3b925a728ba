"""The log port: partitioned, append-only topics.

Every backend (embedded files, Kafka) implements :class:`Log`. The edge decides
the partition (see :mod:`ledger.partitioner`) so that every backend places the
same key in the same partition; backends only store and return records.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import NamedTuple

Watches = Mapping[str, Mapping[int, int]]
"""What a reader waits for: topic -> partition -> the offset of the next
record it wants."""


def merged(*watches: Watches) -> dict[str, dict[int, int]]:
    """Several readers' watches as one, for one wait on all of them."""
    out: dict[str, dict[int, int]] = {}
    for each in watches:
        for topic, offsets in each.items():
            mine = out.setdefault(topic, {})
            for partition, offset in offsets.items():
                mine[partition] = min(offset, mine.get(partition, offset))
    return out


class Record(NamedTuple):
    """One stored record: its position, its key and its value bytes."""

    partition: int
    offset: int
    key: bytes
    value: bytes


class Append(NamedTuple):
    """One record to append to an explicit partition."""

    partition: int
    key: bytes
    value: bytes


class LogError(Exception):
    """A backend failure, translated at the adapter (no driver exception escapes)."""


class UnknownTopic(LogError):
    """The topic does not exist."""


class CorruptLog(LogError):
    """A partition holds a damaged record with acknowledged records after it,
    or a record that fails its checksum: reads past the damage and appends
    are refused until an operator restores or truncates the partition."""

    def __init__(self, damage: str) -> None:
        super().__init__(damage)
        self.damage = damage


class OwnedElsewhere(LogError):
    """Another process already acts on a partition this one asked to own."""

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(
            f"partition {partition} of {topic!r} is already owned by another process: "
            "one writer and one scheduler per partition"
        )


class Log(ABC):
    """A set of topics, each with a fixed number of partitions.

    Offsets are dense per partition and start at 0. ``append`` returns only once
    the records are durable (fsynced, or acknowledged by all in-sync replicas),
    and returns their offsets in the order given. Records appended to one
    partition are read back in append order.
    """

    @abstractmethod
    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions; a no-op if it exists with
        that many partitions, :class:`LogError` if it exists with another count."""

    @abstractmethod
    def partition_count(self, topic: str) -> int:
        """Number of partitions of ``topic``; :class:`UnknownTopic` if absent."""

    @abstractmethod
    def append(self, topic: str, records: Sequence[Append]) -> list[int]:
        """Append ``records`` durably; return their offsets, in the order given."""

    def append_many(self, batches: Sequence[tuple[str, Sequence[Append]]]) -> list[list[int]]:
        """Append each ``(topic, records)`` durably, in the order given; the
        offsets of each. This default appends them one after another; the
        embedded log makes them one group commit (one fsync per file, the
        files synced at once), so none is acknowledged before all are
        durable."""
        return [self.append(topic, records) for topic, records in batches]

    @abstractmethod
    def read(self, topic: str, partition: int, offset: int, max_records: int) -> list[Record]:
        """Up to ``max_records`` records of one partition starting at ``offset``
        (fewer, or none, at the end of the partition). Never waits for records
        to arrive; it may wait for an append in progress to become durable."""

    @abstractmethod
    def end_offset(self, topic: str, partition: int) -> int:
        """The offset the next appended record of this partition will get."""

    @abstractmethod
    def own(self, topic: str, partitions: Sequence[int]) -> None:
        """Make this handle the one process acting on these partitions of
        ``topic`` (their single writer, or the scheduler answering them) until
        it closes; :class:`LogError` if another handle already does, where
        the backend can tell."""

    def wait(self, watches: Watches, timeout_s: float) -> bool:
        """Block until a record is durable at or past the given offset of any
        watched partition, or ``timeout_s`` has passed; whether one is.
        Backends wake as soon as one is (a doorbell, a long-poll fetch); this
        default checks the end offsets in naps that double from 1 ms."""
        deadline = time.monotonic() + timeout_s
        nap = 0.001
        while not self.arrived(watches):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(nap, left))
            nap = min(nap * 2, 0.05)
        return True

    def arrived(self, watches: Watches) -> bool:
        """Whether any watched partition holds a record at or past its offset."""
        return any(
            self.end_offset(topic, partition) > offset
            for topic, offsets in watches.items()
            for partition, offset in offsets.items()
        )

    def damage(self, topic: str, partition: int) -> str | None:
        """What is wrong with the partition's stored records, if the backend
        can tell (the embedded log checks every record it indexes); None
        when nothing is known to be."""
        return None

    def holds(self, topic: str, partition: int, count: int) -> bool:
        """Whether the partition holds at least ``count`` records (a backend
        may tell without finding its end)."""
        return self.end_offset(topic, partition) >= count

    def mark(self, topic: str, partition: int, offset: int) -> tuple[int, int] | None:
        """Where record ``offset`` of the partition is and what it follows,
        in the backend's terms, once every record before it has been checked;
        what :meth:`seed` takes. None when the backend has no such thing."""
        return None

    def seed(self, topic: str, partition: int, offset: int, mark: tuple[int, int]) -> bool:
        """Let a process that reads the partition from ``offset`` on only
        check the records from there, given what :meth:`mark` said of that
        offset in a process that had checked those before it; whether the
        backend took it (it checks nothing on a read, or has read the
        partition already: not)."""
        return False

    @abstractmethod
    def close(self) -> None:
        """Release files, sockets and threads. The log is unusable afterwards."""

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Tail:
    """A topic's partitions read on, each from where the last read of it
    stopped: from their ends when the tail is made, or from the start."""

    def arrival(self, partitions: Collection[int] | None = None) -> Callable[[float], bool]:
        """A wait, up to the time it is given, for this tail's next records
        (of the given ``partitions`` only, if given)."""
        return lambda timeout_s: self.log.wait(self.watches(partitions), timeout_s)

    def watches(self, partitions: Collection[int] | None = None) -> Watches:
        """What :meth:`Log.wait` waits on for this tail's next records."""
        return {
            self.topic: {
                p: offset
                for p, offset in enumerate(self.offsets)
                if partitions is None or p in partitions
            }
        }

    def __init__(self, log: Log, topic: str, from_start: bool = False) -> None:
        self.log = log
        self.topic = topic
        count = log.partition_count(topic)
        self.offsets = [0 if from_start else log.end_offset(topic, p) for p in range(count)]

    def records(self, partitions: Collection[int] | None = None) -> Iterator[Record]:
        """Every record appended since the last read, in log order per
        partition; of the given ``partitions`` only, if given. Read them all:
        the tail moves on a batch at a time, before the batch is handed out."""
        for partition, offset in enumerate(self.offsets):
            if partitions is not None and partition not in partitions:
                continue
            while records := self.log.read(self.topic, partition, offset, 5_000):
                offset = self.offsets[partition] = records[-1].offset + 1
                yield from records
