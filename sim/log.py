"""The simulated log: every partition a byte array framed as the embedded
log frames its files (``ledger.frames``), in memory, with storage faults.

Reads check every record they return with ``frames.scan_buffer`` (as the
embedded log checks what it indexes), so a flipped bit is found by the
reader that meets it, never by the simulator telling the log where it is.
An append cut short (a torn tail) is cut by the next append, as the
embedded log cuts one on opening, after ``frames`` judged it torn and not
damage. Beside the bytes the log keeps what it was given (``originals``):
the operator's backup a damaged record is restored from, and the oracle
the simulator checks every acknowledged record against.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ledger import frames
from ledger.log import Append, CorruptLog, Log, LogError, Record, UnknownTopic

_FMT = frames.CURRENT_FORMAT
_HEADER = frames.header_size(_FMT)
_KEY_LENGTH_AT = 4


class Crash(Exception):
    """The component that was acting stops here (the simulator restarts it
    from what is durable)."""


@dataclass(slots=True)
class _Partition:
    number: int
    data: bytearray = field(default_factory=bytearray)
    ends: list[int] = field(default_factory=list)
    """Where each durable record ends in ``data``."""
    chains: list[int] = field(default_factory=list)
    """Each record's header crc, which the next one chains from."""
    originals: list[tuple[bytes, bytes]] = field(default_factory=list)
    unacknowledged: set[int] = field(default_factory=set)
    """Records written whole by an append that crashed before it returned."""

    def start_of(self, offset: int) -> int:
        return self.ends[offset - 1] if offset else 0

    def chain_before(self, offset: int) -> int:
        return self.chains[offset - 1] if offset else frames.chain_seed(self.number)


StorageFault = Callable[[], str | None]
"""Asked before each append: ``"torn"`` (crash part way through writing),
``"after"`` (crash once the records are durable, before the caller hears),
or None."""


class SimLog(Log):
    """A :class:`Log` in memory whose appends may tear and whose bytes may rot."""

    def __init__(self, storage_fault: StorageFault = lambda: None) -> None:
        self.topics: dict[str, list[_Partition]] = {}
        self.storage_fault = storage_fault
        self.torn = 0
        """Appends cut short; each cut again by the next append there."""
        self.cut = 0
        self.appends: dict[str, int] = {}
        """Topic -> appends to it so far: a reader that saw the same count
        has nothing new to read there."""

    # -- the port ------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int) -> None:
        existing = self.topics.get(topic)
        if existing is not None:
            if len(existing) != partitions:
                raise LogError(f"{topic} has {len(existing)} partitions, not {partitions}")
            return
        self.topics[topic] = [_Partition(p) for p in range(partitions)]

    def partition_count(self, topic: str) -> int:
        return len(self._topic(topic))

    def append(self, topic: str, records: Sequence[Append]) -> list[int]:
        parts = self._topic(topic)
        self.appends[topic] = self.appends.get(topic, 0) + 1
        fault = self.storage_fault() if records else None
        offsets = []
        written: list[tuple[_Partition, int]] = []
        for i, record in enumerate(records):
            part = parts[record.partition]
            self._cut_torn_tail(topic, part)
            if fault == "torn" and i == len(records) - 1:
                self._tear(part, record)
                for earlier, offset in written:
                    earlier.unacknowledged.add(offset)
                raise Crash(f"append to {topic} torn at partition {record.partition}")
            offsets.append(self._write(part, record))
            written.append((part, offsets[-1]))
        if fault == "after":
            for part, offset in written:
                part.unacknowledged.add(offset)
            raise Crash(f"crashed after an append to {topic} became durable")
        return offsets

    def read(self, topic: str, partition: int, offset: int, max_records: int) -> list[Record]:
        part = self._topic(topic)[partition]
        last = min(len(part.ends), offset + max_records)
        if last <= offset:
            return []
        start, limit = part.start_of(offset), part.ends[last - 1]
        found = frames.scan_buffer(part.data, _FMT, start, limit, offset, part.chain_before(offset))
        intact = len(found.ends)
        if intact < last - offset:
            where = offset + intact
            raise CorruptLog(
                f"{topic} partition {partition}: record {where} is damaged "
                f"({found.damage or 'checks failed'})"
            )
        data = part.data
        out = []
        for i, end in enumerate(found.ends):
            begin = part.start_of(offset + i)
            key_end = begin + _HEADER + found.key_lengths[i]
            key = bytes(data[begin + _HEADER : key_end])
            out.append(Record(partition, offset + i, key, bytes(data[key_end:end])))
        return out

    def end_offset(self, topic: str, partition: int) -> int:
        return len(self._topic(topic)[partition].ends)

    def own(self, topic: str, partitions: Sequence[int]) -> None:
        """One process: the simulator itself keeps each partition's writer single."""

    def wait(self, watches: object, timeout_s: float) -> bool:
        # never sleeps: the simulator steps whatever would have arrived
        return self.arrived(watches)  # type: ignore[arg-type]

    def damage(self, topic: str, partition: int) -> str | None:
        return self.scrub(topic, partition)[1]

    def close(self) -> None:
        """Nothing to release."""

    # -- storage faults and the operator's tools ------------------------------

    def flip_bit(self, rng: random.Random, topic: str, partition: int) -> int | None:
        """Flip one bit of an old record (not the last) of a partition; its
        offset, or None if the partition holds fewer than two records."""
        part = self._topic(topic)[partition]
        if len(part.ends) < 2:
            return None
        offset = rng.randrange(len(part.ends) - 1)
        position = rng.randrange(part.start_of(offset), part.ends[offset])
        part.data[position] ^= 1 << rng.randrange(8)
        return offset

    def scrub(self, topic: str, partition: int) -> tuple[int, str | None]:
        """Check every record (``berth log verify``): the first damaged
        record's offset and why, or (end, None)."""
        part = self._topic(topic)[partition]
        if not part.ends:
            return 0, None
        found = frames.scan_buffer(
            part.data, _FMT, 0, part.ends[-1], 0, frames.chain_seed(part.number)
        )
        if len(found.ends) == len(part.ends):
            return len(part.ends), None
        return len(found.ends), found.damage or "checks failed"

    def restore(self, topic: str, partition: int, offset: int) -> None:
        """Write a damaged record again from the backup, byte for byte as it
        was appended (the operator's ``berth restore`` of one partition)."""
        part = self._topic(topic)[partition]
        key, value = part.originals[offset]
        framed = bytearray()
        frames.frame(framed, _FMT, key, value)
        frames.seal(framed, _ends(framed), offset, part.chain_before(offset))
        start = part.start_of(offset)
        assert start + len(framed) == part.ends[offset], "a restored record keeps its size"
        part.data[start : part.ends[offset]] = framed

    def acknowledged(self, topic: str, partition: int) -> list[tuple[int, bytes, bytes]]:
        """Every acknowledged record as it was given: (offset, key, value)."""
        part = self._topic(topic)[partition]
        return [
            (offset, key, value)
            for offset, (key, value) in enumerate(part.originals)
            if offset not in part.unacknowledged
        ]

    def size_bytes(self) -> int:
        return sum(len(p.data) for parts in self.topics.values() for p in parts)

    # -- inside -----------------------------------------------------------------

    def _topic(self, topic: str) -> list[_Partition]:
        parts = self.topics.get(topic)
        if parts is None:
            raise UnknownTopic(topic)
        return parts

    def _write(self, part: _Partition, record: Append) -> int:
        framed = bytearray()
        frames.frame(framed, _FMT, record.key, record.value)
        offset = len(part.ends)
        chain = frames.seal(framed, _ends(framed), offset, part.chain_before(offset))
        part.data += framed
        part.ends.append(len(part.data))
        part.chains.append(chain)
        part.originals.append((record.key, record.value))
        return offset

    def _tear(self, part: _Partition, record: Append) -> None:
        framed = bytearray()
        frames.frame(framed, _FMT, record.key, record.value)
        offset = len(part.ends)
        frames.seal(framed, _ends(framed), offset, part.chain_before(offset))
        part.data += framed[: max(1, len(framed) // 2)]
        self.torn += 1

    def _cut_torn_tail(self, topic: str, part: _Partition) -> None:
        """Cut what an append left half written, once ``frames`` has judged
        it a torn tail: damage is never cut."""
        intact = part.ends[-1] if part.ends else 0
        if len(part.data) == intact:
            return
        offset = len(part.ends)
        found = frames.scan_buffer(
            part.data, _FMT, intact, len(part.data), offset, part.chain_before(offset)
        )
        if found.ends or found.damage is not None:
            where = f"{topic} partition {part.number}, past record {offset}"
            raise CorruptLog(f"{where}: {found.damage}")
        del part.data[intact:]
        self.cut += 1


def _ends(framed: bytearray) -> array[int]:
    return array("q", [len(framed)])
