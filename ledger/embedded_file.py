"""Partition files of the embedded log (see :mod:`ledger.embedded`); their
records' framing and checks are :mod:`ledger.frames`'.

An offset is a record's index in its file. The byte position and key length of
every record are kept in memory, built by scanning the file as far as it is
read (every record's checksums checked: a read of the first records does not
scan a large file to its end) and extended as it grows, so that a read
slices records out of one ``pread`` without parsing headers. A scan stops at the
first record that fails its checks; what follows is either a torn tail (an
append that never completed) or damage, which :mod:`ledger.frames` tells apart.

Several processes may append to one file. An appender holds an exclusive
``flock`` from the moment it looks at the file's end until its records are
written, fsynced and indexed, so appends never interleave and offsets stay
dense. A process that finds the file longer than its index scans the new tail
under a shared ``flock``, which it can only hold between appends: it never
indexes a record that is not yet durable. A torn tail found while no appender
holds the lock can only be what an appender that died mid-write left behind;
the next appender cuts it off before it writes. Damage is never cut: the
partition refuses appends, and reads past the damage, with
:class:`~ledger.log.CorruptLog` naming the file, the record and its byte.

Records another process appended are durable once it fsynced them, unless
it died between its write and its fsync, which the file alone cannot tell.
So an appender, once its fsync returns and before it lets go of the lock,
notes in ``p<N>.synced`` beside the file where its records end and the
last one's chain (format 2): a process indexing records that end exactly
there, with that chain, knows them synced; any other (a dead appender's
records, a marker from before a cut, format 1) it fsyncs itself before it
reads them. The marker is never synced: lost in a crash, it only costs
that fsync.
"""

from __future__ import annotations

import bisect
import fcntl
import logging
import os
import struct
import threading
from array import array
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ledger import frames
from ledger.frames import Damage
from ledger.log import CorruptLog, LogError, Record

__all__ = ["Chunk", "Fsync", "PartitionFile", "pwrite_all"]

_log = logging.getLogger(__name__)

# Bounds one read's buffer; a read still returns at least one record.
_MAX_READ_BYTES = 64 << 20
_SCAN_WINDOW = 4 << 20
"""Bytes a scan for the records a read wants takes at a time (the rest of
the file is scanned only when it is wanted)."""

Fsync = Callable[[int], None]

_SYNCED = struct.Struct("<QI")
"""``p<N>.synced``: where the records an appender fsynced end, and the last one's chain."""


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


def _copy_range(fd: int, start: int, end: int, target: Path, fsync: Fsync) -> None:
    """Bytes ``start`` to ``end`` of ``fd`` into a new file ``target``, synced."""
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        position = start
        while position < end:
            chunk = _pread_all(fd, min(end - position, _MAX_READ_BYTES), position)
            pwrite_all(out, chunk, position - start)
            position += len(chunk)
        fsync(out)
    finally:
        os.close(out)


def _decode(
    data: bytes,
    base: int,
    header: int,
    partition: int,
    first: int,
    ends: array[int],
    key_lengths: array[int],
) -> list[Record]:
    """Records from ``data``, read from file position ``base``, whose ends and
    key lengths the index gives; each has a header of ``header`` bytes."""
    out: list[Record] = []
    append = out.append
    make = _make_record
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
    next one will go; ``key_lengths[i]`` is the key length of record ``i``;
    ``chain`` is the last record's header crc (format 2), what the next one
    chains from. ``lock`` guards them within the process; the file locks
    described in the module order this process's appends and scans against
    other processes'. ``damage``, once found, stays: bytes that fail their
    checks do not heal.

    The file is scanned on first use, not on open: a process that uses a few
    partitions of a large log (a replay worker, a writer of some partitions)
    does not pay to check every record of the others.

    A process that needs only the records from some offset on (``berth
    explain`` continuing a checkpoint of the view) may :meth:`seed` the index
    there, with the position and chain value a process that had checked the
    records up to it noted (:meth:`mark`): the scan then starts there and
    checks the chain on from that value, so a record after it that is
    damaged, moved or replaced still fails. ``_base`` is the offset of the
    record ``_positions[0]`` starts (0 unless seeded). A read before it, a
    check of the whole file, a cut, or damage found by the seeded scan
    drops the seed and indexes the file from its start: damage is only ever
    judged by a scan from record 0.
    """

    def __init__(
        self, path: Path, partition: int, fd: int, fsync: Fsync, fmt: int, read_only: bool = False
    ) -> None:
        self.path = path
        self.partition = partition
        self.fd = fd
        self.format = fmt
        self.header = frames.header_size(fmt)
        self.lock = threading.Lock()
        self._fsync = fsync
        self._positions = array("q", [0])
        self._key_lengths = array("I")
        self.chain = frames.chain_seed(partition)
        self._base = 0
        self._base_chain = self.chain
        """What record ``_base`` chains from."""
        self.damage: Damage | None = None
        # The shared flock goes on a second descriptor: flock() on the one this
        # process's appender locks would convert its exclusive lock, not wait.
        self._scan_fd = -1
        self._scanning = threading.Lock()
        self._read_only = read_only
        self._synced_fd = -1
        self._synced_writable = False

    @classmethod
    def open(
        cls, path: Path, partition: int, fsync: Fsync, fmt: int, read_only: bool = False
    ) -> PartitionFile:
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
        return cls(path, partition, fd, fsync, fmt, read_only)

    def _grown(self) -> bool:
        """Whether the file holds bytes past the indexed records that no scan
        has yet judged damage; the caller holds ``lock``."""
        if self.fd < 0:
            raise LogError(f"{self.path}: log is closed")
        return self.damage is None and os.fstat(self.fd).st_size > self._positions[-1]

    def _extend(self, wanted: int | None = None) -> int:
        """Index the intact records past the known ones, if any, and judge
        what follows them; return the file's size. With ``wanted``, stop
        once that many records are indexed: a read of the records before a
        point does not scan the file past it (whatever a window of the file
        does not settle, the scan to its end judges). The caller holds
        ``lock`` and one of the flocks, so no append is half written
        meanwhile."""
        size = os.fstat(self.fd).st_size
        if self.damage is not None:
            return size
        if wanted is not None and self._index_windows(wanted, size):
            return size
        known = self._count()
        found = frames.scan(self.fd, self.format, self._positions[-1], size, known, self.chain)
        if found.damage is not None and self._base > 0:
            # judged from a seed: judge it again from record 0
            self._unseed()
            return self._extend()
        self._index(found)
        if found.damage is not None:
            offset = self._count()
            self.damage = Damage(self.path, offset, found.stop, found.damage)
            _log.error("%s", self.damage)
        return size

    def _index_windows(self, wanted: int, size: int) -> bool:
        """Index the file a window at a time until ``wanted`` records are;
        whether they are. A window settles only its intact records: one
        that finds none (damage, a record longer than the window) or the
        file's last window leave the rest to the scan that judges it. The
        caller holds ``lock`` and a flock."""
        while self._count() < wanted:
            start = self._positions[-1]
            if start + _SCAN_WINDOW >= size:
                return False
            window = frames.scan(
                self.fd, self.format, start, start + _SCAN_WINDOW, self._count(), self.chain, False
            )
            if not window.ends:
                return False
            self._index(window)
        return True

    def _index(self, found: frames.Scan) -> None:
        """Add the records a scan found to the index; the caller holds ``lock``."""
        if found.ends:
            if not self._synced(found.ends[-1], found.chain):
                # appended by another process that did not say it fsynced
                # them (it died first?): make sure before anything is decided
                self._fsync(self.fd)
            self._positions.extend(found.ends)
            self._key_lengths.extend(found.key_lengths)
            self.chain = found.chain

    def _count(self) -> int:
        """Records indexed (those before a seed included); the caller holds ``lock``."""
        return self._base + len(self._positions) - 1

    def _unseed(self) -> None:
        """Forget a seeded index, to index the file from its start; the
        caller holds ``lock``."""
        self._positions = array("q", [0])
        self._key_lengths = array("I")
        self.chain = self._base_chain = frames.chain_seed(self.partition)
        self._base = 0

    def refresh(self, whole: bool = False, wanted: int | None = None) -> None:
        """Index what other processes have appended since the last look;
        ``whole``: from record 0 if the index was seeded past it; ``wanted``:
        only until that many records are indexed, if the file holds them."""
        with self.lock:
            if not self._grown() and not (whole and self._base > 0):
                return
        with self._scanning:
            if self._scan_fd < 0:
                self._scan_fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            # blocks only while an append is between its write and its fsync
            fcntl.flock(self._scan_fd, fcntl.LOCK_SH)
            try:
                with self.lock:
                    if whole and self._base > 0:
                        self._unseed()
                    self._extend(wanted)
            finally:
                fcntl.flock(self._scan_fd, fcntl.LOCK_UN)

    def seed(self, offset: int, position: int, chain: int) -> bool:
        """Start the index at record ``offset``, which starts at file
        position ``position`` and chains from ``chain`` (what :meth:`mark`
        said of it in a process that had checked the records before it),
        if nothing is indexed yet; whether it was. Format 2 only: format 1
        has no chain to check the records after it against."""
        with self.lock:
            if self.format < 2 or offset <= 0 or self.damage is not None or self._count() > 0:
                return False
            if self.fd < 0 or os.fstat(self.fd).st_size < position:
                return False  # not this file (cut since?): index it from its start
            self._positions = array("q", [position])
            self._base = offset
            self.chain = self._base_chain = chain
            return True

    def mark(self, offset: int) -> tuple[int, int] | None:
        """Where record ``offset`` starts and what it chains from, once every
        record before it has been checked (indexed): what :meth:`seed` takes.
        None if it is not readable, or the file has no chain (format 1)."""
        if self.format < 2 or offset <= 0:
            return None
        if not self.holds(offset):
            return None
        with self.lock:
            if offset < self._base:
                return None  # not checked here: only from the seed on
            position = self._positions[offset - self._base]
            if offset == self._base:
                return position, self._base_chain
            header_crc_at = self._positions[offset - 1 - self._base] + self.header - 4
            return position, int.from_bytes(_pread_all(self.fd, 4, header_crc_at), "little")

    def lock_for_append(self) -> None:
        """Take the exclusive flock and index what other processes appended;
        cut off what an appender that died mid-write left after them.
        :class:`CorruptLog`, with the flock released, if the file is damaged."""
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            with self.lock:
                size = self._extend()
                if self.damage is not None:
                    raise CorruptLog(str(self.damage))
                end = self._positions[-1]
                if size > end:
                    _log.warning(
                        "%s: cutting %d bytes after record %d, the torn tail of an "
                        "append that never completed (so was never acknowledged)",
                        self.path,
                        size - end,
                        self._count() - 1,
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
        """Records readable: up to the damage, if any."""
        self.refresh()
        with self.lock:
            return self._count()

    def holds(self, count: int) -> bool:
        """Whether the file holds at least ``count`` readable records,
        indexing it only as far as that takes."""
        with self.lock:
            if self._count() >= count:
                return True
        self.refresh(wanted=count)
        with self.lock:
            return self._count() >= count

    @property
    def end_position(self) -> int:
        """Where the next record goes; the caller holds the append flock."""
        with self.lock:
            return self._positions[-1]

    def extent(self) -> tuple[int, int]:
        """Records indexed, and where they end, read together."""
        with self.lock:
            return self._count(), self._positions[-1]

    @property
    def appended(self) -> int:
        """Records indexed so far; the caller holds the append flock."""
        with self.lock:
            return self._count()

    def publish(self, ends: array[int], key_lengths: array[int], chain: int) -> None:
        """Index records this process appended and fsynced; the caller
        holds the append flock."""
        with self.lock:
            self._positions.extend(ends)
            self._key_lengths.extend(key_lengths)
            self.chain = chain
            self._note_synced()

    def _synced(self, end: int, chain: int) -> bool:
        """Whether the appender of the records ending at ``end`` with
        ``chain`` noted it fsynced them; the caller holds a flock."""
        if self.format < 2:
            return False  # no chain to tell one run of records from another
        try:
            if self._synced_fd < 0:
                self._synced_fd = os.open(self._synced_path, os.O_RDONLY | os.O_CLOEXEC)
            noted = os.pread(self._synced_fd, _SYNCED.size, 0)
        except OSError:
            return False  # none yet, or unreadable: the caller fsyncs
        return len(noted) == _SYNCED.size and _SYNCED.unpack(noted) == (end, chain)

    def _note_synced(self) -> None:
        """Note that the records indexed are fsynced; the caller holds the
        append flock and ``lock``."""
        if self.format < 2 or self._read_only:
            return
        try:
            if self._synced_fd < 0 or not self._synced_writable:
                if self._synced_fd >= 0:
                    os.close(self._synced_fd)
                    self._synced_fd = -1
                flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
                self._synced_fd = os.open(self._synced_path, flags, 0o644)
                self._synced_writable = True
            pwrite_all(self._synced_fd, _SYNCED.pack(self._positions[-1], self.chain), 0)
        except OSError as exc:
            # the records are durable whatever becomes of the note: without
            # it, other processes only fsync them again
            _log.warning("%s: cannot note the records synced: %s", self._synced_path, exc)

    @property
    def _synced_path(self) -> Path:
        return self.path.with_suffix(".synced")

    def read(self, offset: int, max_records: int) -> list[Record]:
        """Up to ``max_records`` durable records from ``offset``;
        :class:`CorruptLog` for a read that starts at the damage or past it."""
        if offset < self._base:
            self.refresh(whole=True)  # before the seed: index it all
        elif offset + max_records > self._base + len(self._positions) - 1:
            self.refresh(wanted=offset + max_records)
        with self.lock:
            if self.fd < 0:
                raise LogError(f"{self.path}: log is closed")
            positions = self._positions
            count = self._count()
            if offset >= count and self.damage is not None:
                raise CorruptLog(str(self.damage))
            if offset >= count or max_records == 0:
                return []
            base = self._base
            if offset < base:
                raise LogError(f"{self.path}: record {offset} is before the index (a race)")
            stop = min(count, offset + max_records)
            start = positions[offset - base]
            if positions[stop - base] - start > _MAX_READ_BYTES:
                limit = start + _MAX_READ_BYTES
                found = bisect.bisect_right(positions, limit, offset - base, stop - base) - 1
                stop = max(offset + 1, found + base)
            ends = positions[offset + 1 - base : stop + 1 - base]
            key_lengths = self._key_lengths[offset - base : stop - base]
            # Under the lock so that close() cannot free the fd number meanwhile.
            data = _pread_all(self.fd, ends[-1] - start, start)
        return _decode(data, start, self.header, self.partition, offset, ends, key_lengths)

    def cut(self, offset: int, aside: Path) -> int:
        """Remove record ``offset`` and everything after it, damage included,
        first copying those bytes to ``aside`` (durably); return how many
        were cut. Only for an operator who asked for it, on a log no other
        process has open."""
        self.refresh(whole=True)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            with self.lock:
                if not 0 <= offset <= len(self._positions) - 1:
                    raise LogError(
                        f"{self.path}: cannot cut at record {offset}: "
                        f"{len(self._positions) - 1} records are readable"
                    )
                position = self._positions[offset]
                size = os.fstat(self.fd).st_size
                _copy_range(self.fd, position, size, aside, self._fsync)
                os.ftruncate(self.fd, position)
                self._fsync(self.fd)
                del self._positions[offset + 1 :]
                del self._key_lengths[offset:]
                self.chain = self._chain_before(offset)
                self.damage = None
                self._note_synced()
                return size - position
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def _chain_before(self, offset: int) -> int:
        """What record ``offset`` chains from; the caller holds ``lock``."""
        if offset == 0 or self.format == 1:
            return frames.chain_seed(self.partition)
        header_crc_at = self._positions[offset - 1] + self.header - 4
        return int.from_bytes(_pread_all(self.fd, 4, header_crc_at), "little")

    def close(self) -> None:
        with self._scanning, self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            if self._scan_fd >= 0:
                os.close(self._scan_fd)
                self._scan_fd = -1
            if self._synced_fd >= 0:
                os.close(self._synced_fd)
                self._synced_fd = -1


class Chunk:
    """One request's records for one partition, framed by the calling thread;
    their chain (format 2) is sealed by the appender, which alone knows where
    they go."""

    __slots__ = ("base", "data", "ends", "key_lengths", "partition")

    def __init__(self, partition: PartitionFile) -> None:
        self.partition = partition
        self.data = bytearray()
        self.ends = array("q")  # end of each record, relative to the chunk
        self.key_lengths = array("I")
        self.base = -1

    def add(self, key: bytes, value: bytes) -> int:
        try:
            frames.frame(self.data, self.partition.format, key, value)
        except ValueError as exc:
            raise LogError(str(exc)) from exc
        self.ends.append(len(self.data))
        self.key_lengths.append(len(key))
        return len(self.ends) - 1

    def seal(self, offset: int, chain: int) -> int:
        """Place the records at ``offset``, after a record whose header crc
        is ``chain``; return the last one's."""
        self.base = offset
        if self.partition.format == 1:
            return chain
        return frames.seal(self.data, self.ends, offset, chain)
