"""The embedded, file-backed log: the default durable backend.

Layout under ``DATA_DIR/log``: one directory per topic holding ``meta.json``
(the partition count, written last so that it marks a complete creation) and one
append-only file ``p<N>.log`` per partition, whose format is described in
:mod:`ledger.embedded_file`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import threading
import time
from array import array
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ledger import frames
from ledger.doorbell import Doorbells
from ledger.embedded_file import Chunk, Fsync, PartitionFile, pwrite_all
from ledger.log import Append, CorruptLog, Log, LogError, Record, UnknownTopic, Watches
from ledger.owner_lock import lock_owner

__all__ = ["EmbeddedLog", "FileCheck"]

_log = logging.getLogger(__name__)

_TOPIC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,248}")
_META = "meta.json"
_SYNC_THREADS = 8


def _fsync_dir(path: Path, fsync: Fsync) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def _make_dirs(path: Path, fsync: Fsync) -> None:
    """``mkdir -p`` whose new directory entries survive a crash."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        _fsync_dir(directory.parent, fsync)


@dataclass(frozen=True, slots=True)
class FileCheck:
    """What a scan of one partition file found."""

    path: Path
    format: int
    records: int
    """Intact records, up to the damage if any."""
    intact_bytes: int
    file_bytes: int
    damage: str | None

    @property
    def torn_bytes(self) -> int:
        """Bytes past the intact records that are no damage: an append that
        never completed, which the next append cuts."""
        return 0 if self.damage else self.file_bytes - self.intact_bytes


class _Request:
    """One ``append`` (or ``append_many``) call waiting in the group-commit queue."""

    __slots__ = ("chunks", "done", "error", "offsets", "order", "seq", "topics")

    def __init__(
        self,
        batches: Sequence[tuple[Sequence[PartitionFile], Sequence[Append]]],
        topics: frozenset[str],
        seq: int,
    ) -> None:
        self.topics = topics
        """The topics it writes: committed by a leader of every one of them."""
        self.seq = seq
        """Its place in the order the process's appends arrived in."""
        chunks: dict[PartitionFile, Chunk] = {}
        self.order: list[tuple[Chunk, int]] = []
        for partitions, records in batches:
            for record in records:
                part = partitions[record.partition]
                chunk = chunks.get(part)
                if chunk is None:
                    chunk = chunks[part] = Chunk(part)
                self.order.append((chunk, chunk.add(record.key, record.value)))
        self.chunks = list(chunks.values())
        self.offsets: list[int] = []
        self.error: BaseException | None = None
        self.done = False


class EmbeddedLog(Log):
    """A :class:`Log` stored in files under ``data_dir``, safe for many threads
    and many processes.

    Concurrent ``append`` calls of one process to one topic share fsyncs:
    each caller queues its framed records, and whichever finds no commit of
    that topic in progress becomes the leader, locks the touched partition
    files against other processes, writes everything queued and fsyncs each
    touched partition once, then wakes the others with their offsets. Each
    topic has its queue and its leader: an append to one (a writer's
    outcomes) does not wait for the fsync of another's (the events it
    decided, and the next ones arriving). Every process sees the records and topics the
    others have made durable (see :mod:`ledger.embedded_file`). ``fsync`` is
    injectable so tests can count calls.

    An ``exclusive`` log keeps every other writable log out of the directory
    while it is open (a replay that rebuilds the view from the log holds one);
    ``read_only`` logs (parallel replay workers) take no part in that.
    """

    def __init__(
        self,
        data_dir: str | Path,
        *,
        fsync: Fsync = os.fsync,
        read_only: bool = False,
        exclusive: bool = False,
    ) -> None:
        if read_only and exclusive:
            raise ValueError("a read-only log cannot hold a directory exclusively")
        self._root = Path(data_dir) / "log"
        self._read_only = read_only
        self._exclusive = exclusive
        self._fsync = fsync
        self._topics: dict[str, list[PartitionFile]] = {}
        self._topics_lock = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._queues: dict[str, list[_Request]] = {}
        """Topic -> the appends waiting for its next commit."""
        self._leading: set[str] = set()
        """The topics a commit is in progress for."""
        self._arrived = 0
        """How many appends have been queued: each one's ``seq``."""
        self._closed = False
        self._broken: BaseException | None = None
        self._lock_fd = -1
        self._owned: dict[tuple[str, int], int] = {}
        self._syncers: ThreadPoolExecutor | None = None
        self._bells = Doorbells()
        try:
            if not read_only:
                _make_dirs(self._root, fsync)
                self._lock_fd = self._take_directory_lock(exclusive)
            self._open_existing()
        except BaseException as exc:
            self._close_files()
            if isinstance(exc, OSError):
                raise LogError(f"cannot open embedded log at {self._root}: {exc}") from exc
            raise

    # -- topics -----------------------------------------------------------------

    def topics(self) -> dict[str, int]:
        """Every topic found on open or created since, with its partition count."""
        with self._topics_lock:
            return {name: len(parts) for name, parts in sorted(self._topics.items())}

    def create_topic(self, topic: str, partitions: int) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        if not _TOPIC_NAME.fullmatch(topic):
            raise ValueError(f"invalid topic name {topic!r}")
        with self._topics_lock:
            self._check_open()
            existing = self._topics.get(topic) or self._discover(topic)
            if existing is None and not self._read_only:
                try:
                    existing = self._create_or_find(topic, partitions)
                except OSError as exc:
                    raise LogError(f"cannot create topic {topic!r}: {exc}") from exc
            if existing is None:
                raise LogError(f"{self._root} is open read-only: cannot create {topic!r}")
            if len(existing) != partitions:
                raise LogError(
                    f"topic {topic!r} exists with {len(existing)} partitions, not {partitions}"
                )

    def partition_count(self, topic: str) -> int:
        return len(self._partitions(topic))

    # -- records ----------------------------------------------------------------

    def append(self, topic: str, records: Sequence[Append]) -> list[int]:
        return self.append_many([(topic, records)])[0]

    def append_many(self, batches: Sequence[tuple[str, Sequence[Append]]]) -> list[list[int]]:
        """One group commit for them all: every file written, then each
        fsynced (at once), before any of the records is acknowledged."""
        if self._read_only:
            raise LogError(f"{self._root} is open read-only")
        located = []
        for topic, records in batches:
            partitions = self._partitions(topic)
            for record in records:
                if not 0 <= record.partition < len(partitions):
                    raise LogError(f"topic {topic!r} has no partition {record.partition}")
            located.append((partitions, records))
        if not any(records for _, records in batches):
            return [[] for _ in batches]
        topics = frozenset(topic for topic, records in batches if records)
        group: list[_Request] = []
        claimed: list[str] = []
        with self._cond:
            self._check_open()
            self._arrived += 1
            request = _Request(located, topics, self._arrived)
            for topic in topics:
                self._queues.setdefault(topic, []).append(request)
        try:
            group = self._lead(request, claimed)
            if group:
                self._commit(group)
        finally:
            with self._cond:
                if not request.done and request not in group:
                    self._unqueue(request)  # interrupted while waiting: not to be left behind
                self._leading.difference_update(claimed)
                self._cond.notify_all()
        if group and not isinstance(request.error, Exception | None):
            # the leader was interrupted (a signal's KeyboardInterrupt, an
            # exit) mid-commit: nothing was acknowledged, and the interrupt
            # goes on up as itself, so that a stopping process stops cleanly
            raise request.error
        if isinstance(request.error, CorruptLog):
            raise CorruptLog(request.error.damage) from request.error
        if request.error is not None:
            names = ", ".join(repr(topic) for topic, _ in batches)
            raise LogError(f"append to {names} failed: {request.error}") from request.error
        offsets = iter(request.offsets)
        return [[next(offsets) for _ in records] for _, records in batches]

    def _lead(self, request: _Request, claimed: list[str]) -> list[_Request]:
        """Wait until ``request`` is committed by another leader, or lead the
        commit of every topic it writes: the group to commit, ``claimed``
        filled with those topics (for the caller to release). The topics are
        claimed one at a time in their sorted order, by every caller, so that
        two appends spanning topics never each hold one the other waits for;
        once it holds one, no other leader can take ``request``."""
        with self._cond:
            for topic in sorted(request.topics):
                while topic in self._leading and not request.done:
                    self._cond.wait()
                if request.done:
                    return []
                self._leading.add(topic)
                claimed.append(topic)
            return self._take(frozenset(claimed))

    def _take(self, claimed: frozenset[str]) -> list[_Request]:
        """Out of the queues of the ``claimed`` topics, every append that
        writes no other topic, in the order they arrived."""
        group: dict[int, _Request] = {}
        for topic in claimed:
            left = []
            for request in self._queues.pop(topic, []):
                if request.topics <= claimed:
                    group[request.seq] = request
                else:
                    left.append(request)  # for a leader of all its topics
            if left:
                self._queues[topic] = left
        return [group[seq] for seq in sorted(group)]

    def _unqueue(self, request: _Request) -> None:
        for topic in request.topics:
            queue = [other for other in self._queues.get(topic, []) if other is not request]
            if queue:
                self._queues[topic] = queue
            else:
                self._queues.pop(topic, None)

    def read(self, topic: str, partition: int, offset: int, max_records: int) -> list[Record]:
        if offset < 0 or max_records < 0:
            raise ValueError("offset and max_records must be >= 0")
        part = self._partition(topic, partition)
        try:
            return part.read(offset, max_records)
        except OSError as exc:
            raise LogError(f"read of {topic!r}/{partition} failed: {exc}") from exc

    def end_offset(self, topic: str, partition: int) -> int:
        return self._partition(topic, partition).end_offset

    def wait(self, watches: Watches, timeout_s: float) -> bool:
        """Woken by the partition files' doorbell (:mod:`ledger.doorbell`):
        an append by any process rings it. A damaged partition counts as
        arrived at its damage, so that its reader reads and is told."""
        parts = [
            (self._partition(topic, p), offset)
            for topic, offsets in watches.items()
            for p, offset in offsets.items()
        ]
        bell = self._bells.mine()
        bell.watch([part.path for part, _ in parts])
        deadline = time.monotonic() + timeout_s
        while True:
            if any(part.end_offset > offset or part.damage for part, offset in parts):
                bell.rang()
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            bell.wait(left)

    def damage(self, topic: str, partition: int) -> str | None:
        part = self._partition(topic, partition)
        part.refresh()
        return None if part.damage is None else str(part.damage)

    def holds(self, topic: str, partition: int, count: int) -> bool:
        """Indexes the partition file only as far as ``count`` records."""
        return self._partition(topic, partition).holds(count)

    def mark(self, topic: str, partition: int, offset: int) -> tuple[int, int] | None:
        """Where record ``offset`` of the partition starts and the chain
        value it follows, every record before it checked (see
        :meth:`PartitionFile.seed`)."""
        return self._partition(topic, partition).mark(offset)

    def seed(self, topic: str, partition: int, offset: int, mark: tuple[int, int]) -> bool:
        """Index the partition from record ``offset`` on, which :meth:`mark`
        said ``mark`` of, if nothing of it is indexed yet."""
        return self._partition(topic, partition).seed(offset, *mark)

    def check(self, topic: str, partition: int) -> FileCheck:
        """Index the partition file to its end, every record's checks run
        (on first use, as any use would), and say what was found."""
        part = self._partition(topic, partition)
        part.refresh(whole=True)
        records, intact = part.extent()
        size = os.fstat(part.fd).st_size
        damage = None if part.damage is None else str(part.damage)
        return FileCheck(part.path, part.format, records, intact, size, damage)

    def cut(self, topic: str, partition: int, offset: int, aside: Path) -> int:
        """Remove record ``offset`` of the partition and all after it, having
        copied their bytes to ``aside``; the number of bytes cut. Only on an
        ``exclusive`` log: no other process may be reading or appending."""
        if not self._exclusive:
            raise LogError("cutting a partition needs the log held exclusively")
        part = self._partition(topic, partition)
        try:
            cut = part.cut(offset, aside)
        except OSError as exc:
            raise LogError(f"cannot cut {part.path}: {exc}") from exc
        _fsync_dir(aside.parent, self._fsync)
        return cut

    def format(self, topic: str) -> int:
        """The framing of the topic's records (:mod:`ledger.frames`)."""
        return self._partitions(topic)[0].format

    def own(self, topic: str, partitions: Sequence[int]) -> None:
        """An exclusive flock on ``p<N>.owner`` beside each partition file,
        held until this log closes (or its process dies)."""
        parts = self._partitions(topic)
        with self._topics_lock:
            for partition in partitions:
                if not 0 <= partition < len(parts):
                    raise LogError(f"topic {topic!r} has no partition {partition}")
                if (topic, partition) in self._owned:
                    continue
                path = self._root / topic / f"p{partition}.owner"
                self._owned[(topic, partition)] = lock_owner(path, topic, partition)

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            # Requests already queued were accepted, so let them commit first.
            while self._leading or self._queues:
                self._cond.wait()
        self._close_files()

    # -- internals --------------------------------------------------------------

    def _commit(self, group: list[_Request]) -> None:
        """Write and fsync every queued request: one write and one fsync per
        partition. Requests that touch a damaged partition are refused; the
        others go ahead."""
        touched = {chunk.partition for request in group for chunk in request.chunks}
        # one order in every process, so that two leaders cannot deadlock
        order = sorted(touched, key=lambda part: str(part.path))
        locked: list[PartitionFile] = []
        try:
            if self._broken is not None:
                raise LogError(f"log unusable after an earlier I/O failure: {self._broken}")
            damaged: dict[PartitionFile, CorruptLog] = {}
            for part in order:
                try:
                    part.lock_for_append()
                except CorruptLog as exc:
                    damaged[part] = exc
                    continue
                locked.append(part)
            group = _refuse_damaged(group, damaged)
            staged: dict[PartitionFile, list[Chunk]] = {}
            for request in group:
                for chunk in request.chunks:
                    staged.setdefault(chunk.partition, []).append(chunk)
            self._unlock([part for part in locked if part not in staged])
            locked = [part for part in locked if part in staged]
            published = [(part, self._write(part, staged[part])) for part in locked]
            if locked:
                self._sync([part.fd for part in locked])
        except BaseException as exc:
            if self._broken is None:
                self._fail(exc, locked)
            self._unlock(locked)
            for request in group:
                request.error = exc
                request.done = True
            return
        for part, (ends, key_lengths, chain) in published:
            part.publish(ends, key_lengths, chain)
        self._unlock(locked)
        for request in group:
            request.offsets = [chunk.base + index for chunk, index in request.order]
            request.done = True

    @staticmethod
    def _unlock(parts: list[PartitionFile]) -> None:
        for part in parts:
            try:
                part.unlock_after_append()
            except OSError:
                _log.exception("%s: cannot release the append lock", part.path)

    def _sync(self, fds: list[int]) -> None:
        """fsync every file, several at once: the kernel and the device merge
        concurrent flushes (16 partition files: 2.9 ms one after another,
        1.3 ms together, on this project's development machine). The
        calling thread syncs the first itself, then any other that no
        helper thread has started by then: on a loaded machine a helper
        may wait milliseconds for a core, longer than the fsync it would do."""
        if len(fds) == 1:
            self._fsync(fds[0])
            return
        with self._cond:  # two topics' leaders may get here at once
            if self._syncers is None:
                self._syncers = ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="berth-fsync")
            syncers = self._syncers
        helped = [(fd, syncers.submit(self._fsync, fd)) for fd in fds[1:]]
        failure: BaseException | None = None
        try:
            self._fsync(fds[0])
        except BaseException as exc:
            failure = exc
        for fd, future in helped:
            try:
                if future.cancel():
                    if failure is None:
                        self._fsync(fd)
                else:
                    future.result()  # re-raises its failure
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    @staticmethod
    def _write(part: PartitionFile, chunks: list[Chunk]) -> tuple[array[int], array[int], int]:
        """Write ``chunks`` after the partition's end; return the new records'
        ends, key lengths and chain, for publication once they are durable."""
        start = part.end_position
        offset = part.appended
        chain = part.chain
        ends = array("q")
        key_lengths = array("I")
        position = start
        for chunk in chunks:
            chain = chunk.seal(offset, chain)
            offset += len(chunk.ends)
            ends.extend([position + end for end in chunk.ends])
            key_lengths.extend(chunk.key_lengths)
            position = ends[-1]
        pwrite_all(part.fd, b"".join(chunk.data for chunk in chunks), start)
        return ends, key_lengths, chain

    def _fail(self, exc: BaseException, touched: Iterable[PartitionFile]) -> None:
        """After a failed write or fsync the page cache can no longer be trusted
        to match the file, so cut back to what was acknowledged and refuse
        further appends; reopening rescans the files from disk."""
        self._broken = exc
        _log.error("embedded log write failed, refusing further appends: %s", exc)
        for part in touched:
            try:
                os.ftruncate(part.fd, part.end_position)
            except OSError:
                _log.exception("%s: cannot truncate after failed write", part.path)

    def _partitions(self, topic: str) -> list[PartitionFile]:
        self._check_open()
        parts = self._topics.get(topic)
        if parts is None:
            with self._topics_lock:
                parts = self._topics.get(topic) or self._discover(topic)
            if parts is None:
                raise UnknownTopic(topic)
        return parts

    def _discover(self, topic: str) -> list[PartitionFile] | None:
        """A topic another process created since this log looked; the caller
        holds ``_topics_lock``."""
        if not _TOPIC_NAME.fullmatch(topic):
            return None
        parts = self._open_topic(self._root / topic / _META)
        if parts is not None:
            self._topics[topic] = parts
        return parts

    def _partition(self, topic: str, partition: int) -> PartitionFile:
        parts = self._partitions(topic)
        if not 0 <= partition < len(parts):
            raise LogError(f"topic {topic!r} has no partition {partition}")
        return parts[partition]

    def _check_open(self) -> None:
        if self._closed:
            raise LogError("embedded log is closed")

    def _take_directory_lock(self, exclusive: bool) -> int:
        fd = os.open(self._root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            held = "open in another log" if exclusive else "held exclusively (a replay?)"
            raise LogError(f"{self._root} is {held}") from exc
        return fd

    def _open_existing(self) -> None:
        for meta in sorted(self._root.glob(f"*/{_META}")):
            parts = self._open_topic(meta)
            if parts is not None:
                self._topics[meta.parent.name] = parts

    def _open_topic(self, meta: Path) -> list[PartitionFile] | None:
        """The partition files of the topic ``meta`` describes; None if it does
        not exist (yet)."""
        try:
            described = json.loads(meta.read_text())
            count = int(described["partitions"])
            fmt = int(described.get("format", 1))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise LogError(f"unreadable topic metadata {meta}: {exc}") from exc
        if fmt not in frames.FORMATS:
            raise LogError(
                f"{meta}: record format {fmt} is not one this Berth reads "
                f"({', '.join(map(str, frames.FORMATS))}): written by a newer version?"
            )
        return self._open_partitions(meta.parent, count, fmt, must_exist=True)

    def _create_or_find(self, topic: str, partitions: int) -> list[PartitionFile]:
        """Create ``topic``, or open it if another process created it first:
        creations are serialised across processes by a lock file."""
        fd = os.open(self._root / ".create.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            parts = self._discover(topic)
            if parts is None:
                parts = self._topics[topic] = self._create_files(topic, partitions)
            return parts
        finally:
            os.close(fd)  # closing releases the flock

    def _open_partitions(
        self, directory: Path, count: int, fmt: int, *, must_exist: bool
    ) -> list[PartitionFile]:
        parts: list[PartitionFile] = []
        try:
            for index in range(count):
                path = directory / f"p{index}.log"
                if must_exist and not path.exists():
                    raise LogError(f"missing partition file {path}")
                parts.append(PartitionFile.open(path, index, self._fsync, fmt, self._read_only))
        except BaseException:
            for part in parts:
                part.close()
            raise
        return parts

    def _create_files(self, topic: str, partitions: int) -> list[PartitionFile]:
        # meta.json goes last, after the partition files and their directory
        # entries are durable: a topic directory without it is an unfinished
        # creation, which open ignores and a new create_topic completes.
        directory = self._root / topic
        directory.mkdir(exist_ok=True)
        fmt = frames.CURRENT_FORMAT
        parts = self._open_partitions(directory, partitions, fmt, must_exist=False)
        try:
            # bytes, not indexed records: a file is only indexed on first use
            if any(os.fstat(part.fd).st_size for part in parts):
                raise LogError(f"{directory} holds records of an unregistered topic")
            for part in parts:
                self._fsync(part.fd)
            _fsync_dir(directory, self._fsync)
            tmp = directory / f"{_META}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                meta = {"format": fmt, "partitions": partitions}
                pwrite_all(fd, json.dumps(meta).encode(), 0)
                self._fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, directory / _META)
            _fsync_dir(directory, self._fsync)
            _fsync_dir(self._root, self._fsync)
        except BaseException:
            for part in parts:
                part.close()
            raise
        return parts

    def _close_files(self) -> None:
        self._bells.close()
        for fd in self._owned.values():
            os.close(fd)  # closing releases the flock
        self._owned.clear()
        if self._syncers is not None:
            self._syncers.shutdown()
            self._syncers = None
        with self._topics_lock:
            for parts in self._topics.values():
                for part in parts:
                    part.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = -1


def _refuse_damaged(
    group: list[_Request], damaged: dict[PartitionFile, CorruptLog]
) -> list[_Request]:
    """The requests that touch no damaged partition; the others are answered
    with the damage (a request is all or nothing, like its append)."""
    if not damaged:
        return group
    going: list[_Request] = []
    for request in group:
        refused = next(
            (damaged[c.partition] for c in request.chunks if c.partition in damaged), None
        )
        if refused is None:
            going.append(request)
        else:
            request.error = refused
            request.done = True
    return going
