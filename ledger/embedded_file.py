"""Record framing and partition files of the embedded log (see :mod:`ledger.embedded`).

A partition file is a sequence of records, each framed as::

    u32 length (key + value) | u32 crc32 | u32 key length | key | value

The CRC covers the key-length field as well as the key and value: a tail of
zeros (what a file extended but never written leaves after a crash) then fails
the check instead of passing as an empty record, and a damaged key length cannot
silently move bytes from the value to the key.

An offset is a record's index in its file. The byte position and key length of
every record are kept in memory, built by scanning the file on its first use
and extended as it grows, so that a read slices records out of one ``pread``
without parsing headers. A scan stops at the first short or corrupt record.

Several processes may append to one file. An appender holds an exclusive
``flock`` from the moment it looks at the file's end until its records are
written, fsynced and indexed, so appends never interleave and offsets stay
dense. A process that finds the file longer than its index scans the new tail
under a shared ``flock``, which it can only hold between appends: it never
indexes a record that is not yet durable. Bytes after the last intact record
while no appender holds the lock can only be what an appender that died
mid-write left behind; the next appender cuts them off before it writes.
"""

from __future__ import annotations

import bisect
import fcntl
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


def _scan(fd: int, start: int, size: int) -> tuple[array[int], array[int]]:
    """The ends of the intact records from file position ``start`` up to
    ``size``, and their key lengths."""
    ends = array("q")
    key_lengths = array("I")
    if size <= start:
        return ends, key_lengths
    # mmap offsets must be multiples of the allocation granularity
    base = start - start % mmap.ALLOCATIONGRANULARITY
    with mmap.mmap(fd, size - base, access=mmap.ACCESS_READ, offset=base) as mm:
        view = memoryview(mm)
        try:
            pos = start - base
            limit = size - base
            header = _HEADER.size
            unpack = _HEADER.unpack_from
            crc32 = zlib.crc32
            while pos + header <= limit:
                length, crc, key_len = unpack(mm, pos)
                end = pos + header + length
                if key_len > length or end > limit:
                    break
                if crc32(view[pos + _CRC_FROM : end]) != crc:
                    break
                pos = end
                ends.append(base + pos)
                key_lengths.append(key_len)
        finally:
            view.release()
    return ends, key_lengths


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
    next one will go; ``key_lengths[i]`` is the key length of record ``i``.
    ``lock`` guards them within the process; the file locks described in the
    module order this process's appends and scans against other processes'.

    The file is scanned on first use, not on open: a process that uses a few
    partitions of a large log (a replay worker, a writer of some partitions)
    does not pay to check every record of the others.
    """

    def __init__(self, path: Path, partition: int, fd: int, fsync: Fsync) -> None:
        self.path = path
        self.partition = partition
        self.fd = fd
        self.lock = threading.Lock()
        self._fsync = fsync
        self._positions = array("q", [0])
        self._key_lengths = array("I")
        # The shared flock goes on a second descriptor: flock() on the one this
        # process's appender locks would convert its exclusive lock, not wait.
        self._scan_fd = -1
        self._scanning = threading.Lock()

    @classmethod
    def open(
        cls, path: Path, partition: int, fsync: Fsync, read_only: bool = False
    ) -> PartitionFile:
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
        return cls(path, partition, fd, fsync)

    def _grown(self) -> bool:
        """Whether the file holds bytes past the indexed records; the caller
        holds ``lock``."""
        if self.fd < 0:
            raise LogError(f"{self.path}: log is closed")
        return os.fstat(self.fd).st_size > self._positions[-1]

    def _extend(self) -> int:
        """Index the intact records past the known ones, if any; return the
        file's size. The caller holds ``lock`` and one of the flocks."""
        size = os.fstat(self.fd).st_size
        ends, key_lengths = _scan(self.fd, self._positions[-1], size)
        if ends:
            # appended by another process, which fsynced them unless it died
            # first: make sure before anything is decided on them
            self._fsync(self.fd)
            self._positions.extend(ends)
            self._key_lengths.extend(key_lengths)
        return size

    def _refresh(self) -> None:
        """Index what other processes have appended since the last look."""
        with self.lock:
            if not self._grown():
                return
        with self._scanning:
            if self._scan_fd < 0:
                self._scan_fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            # blocks only while an append is between its write and its fsync
            fcntl.flock(self._scan_fd, fcntl.LOCK_SH)
            try:
                with self.lock:
                    self._extend()
            finally:
                fcntl.flock(self._scan_fd, fcntl.LOCK_UN)

    def lock_for_append(self) -> None:
        """Take the exclusive flock and index what other processes appended;
        cut off what an appender that died mid-write left after them."""
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            with self.lock:
                size = self._extend()
                end = self._positions[-1]
                if size > end:
                    _log.warning(
                        "%s: dropping %d bytes of torn or corrupt tail after record %d",
                        self.path,
                        size - end,
                        len(self._positions) - 1,
                    )
                    os.ftruncate(self.fd, end)
                    self._fsync(self.fd)
        except BaseException:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            raise

    def unlock_after_append(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    @property
    def end_offset(self) -> int:
        self._refresh()
        with self.lock:
            return len(self._positions) - 1

    @property
    def end_position(self) -> int:
        """Where the next record goes; the caller holds the append flock."""
        with self.lock:
            return self._positions[-1]

    @property
    def appended(self) -> int:
        """Records indexed so far; the caller holds the append flock."""
        with self.lock:
            return len(self._positions) - 1

    def publish(self, ends: array[int], key_lengths: array[int]) -> None:
        with self.lock:
            self._positions.extend(ends)
            self._key_lengths.extend(key_lengths)

    def read(self, offset: int, max_records: int) -> list[Record]:
        """Up to ``max_records`` durable records from ``offset``."""
        if offset + max_records > len(self._positions) - 1:
            self._refresh()
        with self.lock:
            if self.fd < 0:
                raise LogError(f"{self.path}: log is closed")
            positions = self._positions
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
        with self._scanning, self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            if self._scan_fd >= 0:
                os.close(self._scan_fd)
                self._scan_fd = -1


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
