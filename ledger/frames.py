"""How the embedded log frames its records, checks them, and tells a torn
tail from damage.

Format 2 (every topic created since it exists)::

    u32 length (key + value) | u32 key length | u32 body crc | u32 header crc | key | value

``body crc`` is the CRC-32 of key and value, seeded so that an empty record's is
not zero. ``header crc`` is the CRC-32 of the first twelve header bytes (so of
the body's checksum too) started from the previous record's header crc XOR the
record's offset (the first record chains from a seed naming its partition):
it covers the record's place as well as its header. Starting from a value
rather than hashing one more field costs nothing per record, which a scan of
millions of records notices. The
header crcs form a chain: a record moved, dropped, duplicated or copied from
another partition breaks it, not only a flipped bit. The body checksum alone
is enough to recognise an intact record found past damage, whose offset and
predecessor are unknown.

Format 1 (topics created before format 2)::

    u32 length (key + value) | u32 crc | u32 key length | key | value

with the CRC over the key-length field, key and value: no chain, no separate
header check.

A scan reads records from a known good position until one fails its checks.
What is left after the last intact record is then either a **torn tail**, the
remains of one append that never completed and so was never acknowledged, which
may be cut; or **damage**, which must never be cut or written over. It is torn
only when nothing intact follows it and it is plainly unfinished: a header cut
short, a record whose (checked) header declares more bytes than the file holds,
or bytes never written (zeros to the end of the file). Everything else is
damage: a record that is all there but fails its checksum, a header that fails
its own, any intact record further on. Format 1 cannot check a header, so there
a flipped length that points past the end reads as torn.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from array import array
from dataclasses import dataclass
from pathlib import Path

Buffer = mmap.mmap | bytes | bytearray
"""What a scan reads: a mapped file, or bytes in memory."""

__all__ = [
    "CURRENT_FORMAT",
    "FORMATS",
    "Damage",
    "Scan",
    "chain_seed",
    "frame",
    "header_size",
    "scan",
    "scan_buffer",
    "seal",
]

FORMATS = (1, 2)
CURRENT_FORMAT = 2

_V1 = struct.Struct("<III")  # length, crc, key length
_V1_CRC_FROM = 8  # the CRC starts at the key-length field
_V2 = struct.Struct("<IIII")  # length, key length, body crc, header crc
_V2_CHECKED = 12  # header bytes the header crc covers
_OFFSET_BITS = 0xFFFFFFFF
_U32 = struct.Struct("<I")
_BODY_SEED = 0x62657274
_ZEROS_AT_ONCE = 1 << 20
MAX_FIELD = 0xFFFFFFFF


def header_size(fmt: int) -> int:
    return _V2.size if fmt == 2 else _V1.size


def chain_seed(partition: int) -> int:
    """What the first record of a partition chains from: a file copied into
    another partition's place fails its first check."""
    return zlib.crc32(b"berth partition %d" % partition)


def frame(data: bytearray, fmt: int, key: bytes, value: bytes) -> None:
    """Append a record's bytes to ``data``; a format 2 header crc is left for
    :func:`seal`, which needs the record's offset and predecessor."""
    if len(key) + len(value) > MAX_FIELD:
        raise ValueError("record too large for the embedded log's framing")
    if fmt == 2:
        body = zlib.crc32(value, zlib.crc32(key, _BODY_SEED))
        data += _V2.pack(len(key) + len(value), len(key), body, 0)
    else:
        key_len = _U32.pack(len(key))
        crc = zlib.crc32(value, zlib.crc32(key, zlib.crc32(key_len)))
        data += _V1.pack(len(key) + len(value), crc, len(key))
    data += key
    data += value


def seal(data: bytearray, ends: array[int], offset: int, previous: int) -> int:
    """Fill in the header crcs of format 2 records framed into ``data``
    (``ends`` relative to it), the first at ``offset`` chaining from
    ``previous``; return the last record's header crc."""
    crc32 = zlib.crc32
    start = 0
    for end in ends:
        previous = crc32(data[start : start + _V2_CHECKED], previous ^ (offset & _OFFSET_BITS))
        _U32.pack_into(data, start + _V2_CHECKED, previous)
        offset += 1
        start = end
    return previous


@dataclass(frozen=True, slots=True)
class Damage:
    """Where a partition file stops being readable, and why."""

    path: Path
    offset: int
    """The first record that cannot be read."""
    position: int
    """Its byte position in the file."""
    reason: str

    def __str__(self) -> str:
        return (
            f"{self.path}: record {self.offset} at byte {self.position} is damaged "
            f"({self.reason}); the partition refuses appends and reads past it"
        )


@dataclass(slots=True)
class Scan:
    """The intact records found, and what follows them."""

    ends: array[int]
    key_lengths: array[int]
    chain: int
    """The last intact record's header crc (format 2)."""
    stop: int
    """Where the intact records end."""
    damage: str | None = None
    """Why what follows is damage and not a torn tail; None if torn or none."""


def scan(
    fd: int, fmt: int, start: int, size: int, offset: int, chain: int, judge: bool = True
) -> Scan:
    """The intact records from file position ``start`` (record ``offset``,
    chaining from ``chain``) up to ``size``, and a judgement of the rest;
    without ``judge``, none: ``size`` is not the file's end but where a scan
    of part of it stops (the records it cuts through are left for the next)."""
    result = Scan(array("q"), array("I"), chain, start)
    if size <= start:
        return result
    # mmap offsets must be multiples of the allocation granularity
    base = start - start % mmap.ALLOCATIONGRANULARITY
    with mmap.mmap(fd, size - base, access=mmap.ACCESS_READ, offset=base) as mm:
        _scan_into(result, mm, fmt, base, start - base, size - base, offset, judge)
    return result


def scan_buffer(data: Buffer, fmt: int, start: int, limit: int, offset: int, chain: int) -> Scan:
    """:func:`scan` of bytes held in memory, from ``start`` up to ``limit``:
    the same checks and the same judgement of what follows the intact
    records (the simulator's log keeps its partitions this way)."""
    result = Scan(array("q"), array("I"), chain, start)
    if limit > start:
        _scan_into(result, data, fmt, 0, start, limit, offset)
    return result


def _scan_into(
    result: Scan,
    data: Buffer,
    fmt: int,
    base: int,
    pos: int,
    limit: int,
    offset: int,
    judge: bool = True,
) -> None:
    """Scan ``data`` (whose byte 0 is file position ``base``) from ``pos`` to
    ``limit`` into ``result``."""
    view = memoryview(data)
    try:
        if fmt == 2:
            stop = _scan_v2(data, view, base, pos, limit, offset, result)
        else:
            stop = _scan_v1(data, view, base, pos, limit, result)
        result.stop = stop + base
        if stop < limit and judge:
            at = offset + len(result.ends)
            result.damage = _judge(view, fmt, stop, limit, result.chain, at)
    finally:
        view.release()


def _scan_v1(mm: Buffer, view: memoryview, base: int, pos: int, limit: int, result: Scan) -> int:
    ends = result.ends
    key_lengths = result.key_lengths
    unpack = _V1.unpack_from
    crc32 = zlib.crc32
    header = _V1.size
    while pos + header <= limit:
        length, crc, key_len = unpack(mm, pos)
        end = pos + header + length
        if key_len > length or end > limit or crc32(view[pos + _V1_CRC_FROM : end]) != crc:
            break
        pos = end
        ends.append(base + pos)
        key_lengths.append(key_len)
    return pos


def _scan_v2(
    mm: Buffer, view: memoryview, base: int, pos: int, limit: int, offset: int, result: Scan
) -> int:
    ends = result.ends
    key_lengths = result.key_lengths
    unpack = _V2.unpack_from
    crc32 = zlib.crc32
    header = _V2.size
    previous = result.chain
    while pos + header <= limit:
        length, key_len, body, head = unpack(mm, pos)
        if crc32(view[pos : pos + _V2_CHECKED], previous ^ (offset & _OFFSET_BITS)) != head:
            break
        end = pos + header + length
        if key_len > length or end > limit:
            break
        if crc32(view[pos + header : end], _BODY_SEED) != body:
            break
        pos = end
        previous = head
        offset += 1
        ends.append(base + pos)
        key_lengths.append(key_len)
    result.chain = previous
    return pos


def _judge(view: memoryview, fmt: int, pos: int, limit: int, chain: int, offset: int) -> str | None:
    """None if the bytes from ``pos`` to ``limit`` are a torn tail; else why
    they are damage. The record at ``pos`` is record ``offset`` and should
    chain from ``chain``."""
    if _all_zeros(view, pos, limit):
        return None  # space the file was given but never written
    fault, unfinished = _fault(view, fmt, pos, limit, chain, offset)
    intact = _next_intact(view, fmt, pos + 1, limit)
    if intact is not None:
        return f"{fault}; an intact record follows {intact - pos} bytes further on"
    return None if unfinished else fault


def _fault(
    view: memoryview, fmt: int, pos: int, limit: int, chain: int, offset: int
) -> tuple[str, bool]:
    """What is wrong with the record at ``pos``, and whether that is what an
    append cut short looks like."""
    if limit - pos < header_size(fmt):
        return "header cut short", True
    if fmt == 1:
        length, _crc, key_len = _V1.unpack_from(view, pos)
        if key_len <= length and pos + _V1.size + length > limit:
            # format 1 cannot check a length: take it at its word
            return "record cut short", True
        return "checksum mismatch", False
    length, key_len, _body, head = _V2.unpack_from(view, pos)
    expected = zlib.crc32(view[pos : pos + _V2_CHECKED], chain ^ (offset & _OFFSET_BITS))
    if expected != head:
        return (
            "header checksum mismatch: a changed header, or a record moved, dropped or copied",
            False,
        )
    if key_len > length:
        return "key longer than the record", False
    if pos + _V2.size + length > limit:
        return "record cut short", True  # its header intact
    return "body checksum mismatch", False


def _all_zeros(view: memoryview, pos: int, limit: int) -> bool:
    while pos < limit:
        step = min(_ZEROS_AT_ONCE, limit - pos)
        if view[pos : pos + step] != bytes(step):
            return False
        pos += step
    return True


def _next_intact(view: memoryview, fmt: int, pos: int, limit: int) -> int | None:
    """The first position from ``pos`` where a whole record passes the
    checks that need no predecessor (its body's checksum), if any."""
    crc32 = zlib.crc32
    if fmt == 2:
        unpack2 = _V2.unpack_from
        header = _V2.size
        for q in range(pos, limit - header + 1):
            length, key_len, body, _head = unpack2(view, q)
            end = q + header + length
            if (
                key_len <= length
                and end <= limit
                and crc32(view[q + header : end], _BODY_SEED) == body
            ):
                return q
        return None
    unpack1 = _V1.unpack_from
    header = _V1.size
    for q in range(pos, limit - header + 1):
        length, crc, key_len = unpack1(view, q)
        end = q + header + length
        if key_len <= length and end <= limit and crc32(view[q + _V1_CRC_FROM : end]) == crc:
            return q
    return None
