"""Record framing and partition files of the embedded log (see :mod:`ledger.embedded`).

A partition file is a sequence of records, each framed as::

    u32 length (key + value) | u32 crc32 | u32 key length | key | value

The CRC covers the key-length field as well as the key and value: a tail of
zeros (what a file extended but never written leaves after a crash) then fails
the check instead of passing as an empty record, and a damaged key length cannot
silently move bytes from the value to the key.

An offset is a record's index in its file. The byte position and key length of
every record are kept in memory, rebuilt by scanning the file on its first use,
so that a read slices records out of one ``pread`` without parsing headers. The
scan stops at the first short or corrupt record and the file is truncated there,
which is exactly what an interrupted write leaves behind.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import struct
import threading
import zlib
from array import array
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ledger.log import LogError, Record

__all__ = ["Chunk", "Fsync", "PartitionFile", "pwrite_all"]

_log = logging.getLogger(__name__)

_HEADER = struct.Struct("<III")
_KEY_LEN = struct.Struct("<I")
# The CRC starts at the key-length field, 8 bytes into the header.
_CRC_FROM = 8
_MAX_FIELD = 0xFFFFFFFF
# Bounds one read's buffer; a read still returns at least one record.
_MAX_READ_BYTES = 64 << 20

Fsync = Callable[[int], None]


_make_record: Callable[[tuple[int, int, bytes, bytes]], Record] = partial(tuple.__new__, Record)
"""Builds a :class:`Record` from its four fields in order, without the Python
frame a NamedTuple's ``__new__`` costs: a replay reads millions of records."""


def pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def _pread_all(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    while len(data) < size:
        more = os.pread(fd, size - len(data), position + len(data))
        if not more:
            raise LogError(f"partition file shrank under the log (fd {fd})")
        data += more
    return data


def _scan(fd: int, size: int) -> tuple[array[int], array[int]]:
    """Positions of every intact record plus the end of the last one, and the
    key length of every intact record."""
    positions = array("q", [0])
    key_lengths = array("I")
    if size == 0:
        return positions, key_lengths
    with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            pos = 0
            header = _HEADER.size
            unpack = _HEADER.unpack_from
            crc32 = zlib.crc32
            while pos + header <= size:
                length, crc, key_len = unpack(mm, pos)
                end = pos + header + length
                if key_len > length or end > size:
                    break
                if crc32(view[pos + _CRC_FROM : end]) != crc:
                    break
                pos = end
                positions.append(pos)
                key_lengths.append(key_len)
        finally:
            view.release()
    return positions, key_lengths


def _decode(
    data: bytes, base: int, partition: int, first: int, ends: array[int], key_lengths: array[int]
) -> list[Record]:
    """Records from ``data``, read from file position ``base``, whose ends and
    key lengths the index gives."""
    out: list[Record] = []
    append = out.append
    make = _make_record
    header = _HEADER.size
    pos = 0
    offsets = range(first, first + len(ends))
    for offset, end, key_len in zip(offsets, ends, key_lengths, strict=True):
        end -= base
        value_at = pos + header + key_len
        append(make((partition, offset, data[pos + header : value_at], data[value_at:end])))
        pos = end
    return out


class PartitionFile:
    """One partition file and the positions of its records.

    ``positions[i]`` is where record ``i`` starts and ``positions[-1]`` where the
    next one will go; ``key_lengths[i]`` is the key length of record ``i``. Only
    the commit leader appends to the file; ``lock`` orders its publication of
    new records against readers and ``close``.

    The file is scanned on first use, not on open, up to the size it had when
    opened: a process that uses a few partitions of a large log (a replay
    worker, a writer of some partitions) does not pay to check every record of
    the others. A torn tail is cut at that first use, before any append.
    """

    def __init__(
        self,
        path: Path,
        partition: int,
        fd: int,
        size: int,
        fsync: Fsync,
        read_only: bool,
    ) -> None:
        self.path = path
        self.partition = partition
        self.fd = fd
        self.lock = threading.Lock()
        self._size = size
        self._fsync = fsync
        self._read_only = read_only
        self._positions: array[int] | None = None
        self._key_lengths = array("I")

    @classmethod
    def open(
        cls, path: Path, partition: int, fsync: Fsync, read_only: bool = False
    ) -> PartitionFile:
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
        try:
            size = os.fstat(fd).st_size
        except BaseException:
            os.close(fd)
            raise
        return cls(path, partition, fd, size, fsync, read_only)

    def _index(self) -> array[int]:
        """The record positions, scanning the file the first time; the caller
        holds ``lock``."""
        positions = self._positions
        if positions is not None:
            return positions
        if self.fd < 0:
            raise LogError(f"{self.path}: log is closed")
        positions, self._key_lengths = _scan(self.fd, self._size)
        if positions[-1] < self._size and not self._read_only:
            _log.warning(
                "%s: dropping %d bytes of torn or corrupt tail after record %d",
                self.path,
                self._size - positions[-1],
                len(positions) - 1,
            )
            os.ftruncate(self.fd, positions[-1])
            self._fsync(self.fd)
        self._positions = positions
        return positions

    @property
    def end_offset(self) -> int:
        with self.lock:
            return len(self._index()) - 1

    @property
    def end_position(self) -> int:
        with self.lock:
            return self._index()[-1]

    def publish(self, ends: array[int], key_lengths: array[int]) -> None:
        with self.lock:
            self._index().extend(ends)
            self._key_lengths.extend(key_lengths)

    def read(self, offset: int, max_records: int) -> list[Record]:
        """Up to ``max_records`` published records from ``offset``."""
        with self.lock:
            if self.fd < 0:
                raise LogError(f"{self.path}: log is closed")
            positions = self._index()
            count = len(positions) - 1
            if offset >= count or max_records == 0:
                return []
            stop = min(count, offset + max_records)
            start = positions[offset]
            if positions[stop] - start > _MAX_READ_BYTES:
                limit = start + _MAX_READ_BYTES
                stop = max(offset + 1, bisect.bisect_right(positions, limit, offset, stop) - 1)
            ends = positions[offset + 1 : stop + 1]
            key_lengths = self._key_lengths[offset:stop]
            # Under the lock so that close() cannot free the fd number meanwhile.
            data = _pread_all(self.fd, ends[-1] - start, start)
        return _decode(data, start, self.partition, offset, ends, key_lengths)

    def close(self) -> None:
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


class Chunk:
    """One request's records for one partition, framed by the calling thread."""

    __slots__ = ("base", "data", "ends", "key_lengths", "partition")

    def __init__(self, partition: PartitionFile) -> None:
        self.partition = partition
        self.data = bytearray()
        self.ends = array("q")  # end of each record, relative to the chunk
        self.key_lengths = array("I")
        self.base = -1

    def add(self, key: bytes, value: bytes) -> int:
        if len(key) + len(value) > _MAX_FIELD:
            raise LogError("record too large for the embedded log's framing")
        key_len = _KEY_LEN.pack(len(key))
        crc = zlib.crc32(value, zlib.crc32(key, zlib.crc32(key_len)))
        data = self.data
        data += _HEADER.pack(len(key) + len(value), crc, len(key))
        data += key
        data += value
        self.ends.append(len(data))
        self.key_lengths.append(len(key))
        return len(self.ends) - 1
