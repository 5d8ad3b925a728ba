"""The log contract on the embedded backend, plus what only files can show."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from ledger import frames
from ledger.embedded import EmbeddedLog
from ledger.log import Append, CorruptLog, Log, LogError, Record
from tests.contracts.log_contract import LogContract, read_all
from tests.polling import wait_for


class TestEmbeddedLog(LogContract):
    @pytest.fixture(autouse=True)
    def _data_dir(self, tmp_path: Path) -> None:
        self.data_dir = tmp_path

    def make_log(self) -> Log:
        return EmbeddedLog(self.data_dir)


class CountingFsync:
    """os.fsync, counted; ``delay`` mimics a slower disk so that commits overlap."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls = 0
        self.delay = delay
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
        os.fsync(fd)
        time.sleep(self.delay)


def _fill(log: EmbeddedLog, topic: str, partitions: int, count: int) -> list[Record]:
    log.create_topic(topic, partitions)
    batch = [Append(i % partitions, f"k{i}".encode(), f"value-{i}".encode()) for i in range(count)]
    offsets = log.append(topic, batch)
    return [Record(a.partition, o, a.key, a.value) for a, o in zip(batch, offsets, strict=True)]


def _stored(log: Log, topic: str) -> list[Record]:
    return [r for p in range(log.partition_count(topic)) for r in read_all(log, topic, p)]


def test_reopen_keeps_topics_and_records(tmp_path: Path) -> None:
    with closing(EmbeddedLog(tmp_path)) as log:
        written = _fill(log, "orders", 3, 30)
        log.create_topic("empty", 2)
    with closing(EmbeddedLog(tmp_path)) as log:
        assert log.topics() == {"empty": 2, "orders": 3}
        assert sorted(_stored(log, "orders"), key=lambda r: (r.partition, r.offset)) == sorted(
            written, key=lambda r: (r.partition, r.offset)
        )
        assert log.append("orders", [Append(1, b"k", b"more")]) == [10]


def _damage_last_record(tmp_path: Path, damage: str) -> Path:
    """Ten records of topic ``t``, the last one or what follows it damaged."""
    with closing(EmbeddedLog(tmp_path)) as log:
        _fill(log, "t", 1, 10)
    path = tmp_path / "log" / "t" / "p0.log"
    data = path.read_bytes()
    last_record = len(data) - (frames.header_size(2) + len(b"k9") + len(b"value-9"))
    if damage == "cut_in_value":
        data = data[:-3]
    elif damage == "cut_in_header":
        data = data[: last_record + 5]
    elif damage == "flip_last_byte":
        data = data[:-1] + bytes([data[-1] ^ 0xFF])
    elif damage == "zero_tail":
        data = data + bytes(4096)
    else:
        data = data + os.urandom(100)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("damage", ["cut_in_value", "cut_in_header", "zero_tail"])
def test_a_torn_tail_is_cut_by_the_next_append(tmp_path: Path, damage: str) -> None:
    _damage_last_record(tmp_path, damage)
    expected = 10 if damage == "zero_tail" else 9
    with closing(EmbeddedLog(tmp_path)) as log:
        records = log.read("t", 0, 0, 100)
        assert [r.value for r in records] == [f"value-{i}".encode() for i in range(expected)]
        assert log.append("t", [Append(0, b"k", b"after")]) == [expected]
    with closing(EmbeddedLog(tmp_path)) as log:
        assert log.read("t", 0, expected, 10)[0].value == b"after"


@pytest.mark.parametrize("damage", ["flip_last_byte", "garbage_tail"])
def test_a_damaged_last_record_is_refused_not_cut(tmp_path: Path, damage: str) -> None:
    path = _damage_last_record(tmp_path, damage)
    before = path.read_bytes()
    readable = 9 if damage == "flip_last_byte" else 10
    with closing(EmbeddedLog(tmp_path)) as log:
        records = log.read("t", 0, 0, 100)
        assert [r.value for r in records] == [f"value-{i}".encode() for i in range(readable)]
        with pytest.raises(CorruptLog, match=f"record {readable} at byte"):
            log.read("t", 0, readable, 10)
        with pytest.raises(CorruptLog, match=r"p0\.log"):
            log.append("t", [Append(0, b"k", b"after")])
        assert log.damage("t", 0) is not None
    assert path.read_bytes() == before


def test_one_batch_costs_one_fsync_per_touched_partition(tmp_path: Path) -> None:
    fsync = CountingFsync()
    with closing(EmbeddedLog(tmp_path, fsync=fsync)) as log:
        log.create_topic("t", 4)
        before = fsync.calls
        log.append("t", [Append(p, b"k", b"v") for p in (0, 2) for _ in range(500)])
        assert fsync.calls - before == 2


def test_the_partitions_of_one_commit_are_synced_together(tmp_path: Path) -> None:
    # each fsync waits for the other: one after another, the first would time out
    both = threading.Barrier(2, timeout=10)
    syncing = {"on": False}

    def fsync(fd: int) -> None:
        os.fsync(fd)
        if syncing["on"]:
            both.wait()

    with closing(EmbeddedLog(tmp_path, fsync=fsync)) as log:
        log.create_topic("t", 2)
        syncing["on"] = True
        assert log.append("t", [Append(0, b"k", b"a"), Append(1, b"k", b"b")]) == [0, 0]
    with closing(EmbeddedLog(tmp_path)) as log:
        assert [log.read("t", p, 0, 10)[0].value for p in (0, 1)] == [b"a", b"b"]


def test_append_many_is_one_commit_over_topics_and_fails_whole(tmp_path: Path) -> None:
    fsync = CountingFsync()
    failing = {"on": False}

    def sync(fd: int) -> None:
        if failing["on"] and os.readlink(f"/proc/self/fd/{fd}").endswith("/b/p0.log"):
            raise OSError(5, "simulated I/O error")
        fsync(fd)

    with closing(EmbeddedLog(tmp_path, fsync=sync)) as log:
        log.create_topic("a", 2)
        log.create_topic("b", 1)
        log.append("a", [Append(1, b"k", b"first")])
        before = fsync.calls
        offsets = log.append_many(
            [
                ("a", [Append(0, b"k", b"a0"), Append(1, b"k", b"a1")]),
                ("b", [Append(0, b"k", b"b0")]),
            ]
        )
        assert offsets == [[0, 1], [0]]
        assert fsync.calls - before == 3  # one group commit: a file each
        assert log.append_many([("a", []), ("b", [])]) == [[], []]
        # one file's fsync fails: neither topic's records are acknowledged
        failing["on"] = True
        with pytest.raises(LogError, match="'a', 'b'"):
            log.append_many([("a", [Append(0, b"k", b"lost")]), ("b", [Append(0, b"k", b"lost")])])
    with closing(EmbeddedLog(tmp_path)) as log:
        assert [r.value for r in log.read("a", 0, 0, 10)] == [b"a0"]
        assert [r.value for r in log.read("a", 1, 0, 10)] == [b"first", b"a1"]
        assert [r.value for r in log.read("b", 0, 0, 10)] == [b"b0"]


def test_concurrent_appends_share_fsyncs(tmp_path: Path) -> None:
    fsync = CountingFsync(delay=0.002)
    threads_count, per_thread = 8, 40
    with closing(EmbeddedLog(tmp_path, fsync=fsync)) as log:
        log.create_topic("t", 1)
        before = fsync.calls
        start = threading.Barrier(threads_count)

        def writer(n: int) -> None:
            start.wait()
            for i in range(per_thread):
                log.append("t", [Append(0, b"k", f"{n}-{i}".encode())])

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(threads_count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        appends = threads_count * per_thread
        assert log.end_offset("t", 0) == appends
        # With 8 writers, a leader finds about 7 others queued behind each commit.
        assert fsync.calls - before < appends / 3
        assert len({r.value for r in read_all(log, "t", 0)}) == appends


class GatedFsync:
    """os.fsync, held at a gate for the files of one topic once ``armed``:
    an fsync there waits until the gate opens."""

    def __init__(self, held_dir: Path) -> None:
        self.held_dir = held_dir
        self.armed = False
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def __call__(self, fd: int) -> None:
        if self.armed and Path(os.readlink(f"/proc/self/fd/{fd}")).parent == self.held_dir:
            self.waiting.set()
            assert self.gate.wait(30), "the gate never opened"
        os.fsync(fd)


@contextmanager
def _slow_topic_in_its_fsync(
    tmp_path: Path, first: bytes, fast_partitions: int
) -> Iterator[tuple[EmbeddedLog, GatedFsync, threading.Thread]]:
    """A log whose topic "slow" has an append held in its fsync until the
    gate opens (on leaving, at the latest), beside a topic "fast"."""
    fsync = GatedFsync(tmp_path / "log" / "slow")
    with closing(EmbeddedLog(tmp_path, fsync=fsync)) as log:
        log.create_topic("slow", 1)
        log.create_topic("fast", fast_partitions)
        fsync.armed = True
        slow = threading.Thread(target=log.append, args=("slow", [Append(0, b"k", first)]))
        slow.start()
        assert fsync.waiting.wait(30)  # the slow topic's leader is in its fsync
        try:
            yield log, fsync, slow
        finally:
            fsync.gate.set()
            slow.join(timeout=30)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names an fd through /proc")
def test_an_append_to_one_topic_does_not_wait_for_another_topics_fsync(tmp_path: Path) -> None:
    with _slow_topic_in_its_fsync(tmp_path, b"held", 1) as (log, fsync, slow):
        # a group commit per topic: this one leads its own, and returns
        assert log.append("fast", [Append(0, b"k", b"v")]) == [0]
        assert slow.is_alive()  # still in its fsync
        fsync.gate.set()
        slow.join(timeout=30)
        assert [r.value for r in read_all(log, "slow", 0)] == [b"held"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names an fd through /proc")
def test_appends_spanning_topics_lead_each_topics_commit_in_one_order(tmp_path: Path) -> None:
    with _slow_topic_in_its_fsync(tmp_path, b"first", 2) as (log, fsync, slow):
        acknowledged: list[bool] = []

        def spanning(n: int) -> None:
            # half name the topics one way round, half the other
            batches = [
                ("slow", [Append(0, b"k", b"s%d" % n)]),
                ("fast", [Append(n % 2, b"k", b"f%d" % n)]),
            ]
            log.append_many(batches if n % 2 else batches[::-1])
            acknowledged.append(fsync.gate.is_set())

        threads = [threading.Thread(target=spanning, args=(n,)) for n in range(8)]
        threads += [
            threading.Thread(target=log.append, args=("fast", [Append(n % 2, b"k", b"one%d" % n)]))
            for n in range(8)
        ]
        try:
            for thread in threads:
                thread.start()
            # every spanning append queued
            wait_for(lambda: len(log._queues.get("slow", [])) >= 8, "the spanning appends", 30)
        finally:
            fsync.gate.set()
        # no two of them wait for each other: all are done, each record once
        for thread in [slow, *threads]:
            thread.join(timeout=30)
            assert not thread.is_alive()
        # none acknowledged before the slow topic's commit ahead of it was durable
        assert acknowledged == [True] * 8
        slows = [r.value for r in read_all(log, "slow", 0)]
        assert slows[0] == b"first" and sorted(slows[1:]) == sorted(b"s%d" % n for n in range(8))
        fasts = [r.value for p in (0, 1) for r in read_all(log, "fast", p)]
        expected = [b"f%d" % n for n in range(8)] + [b"one%d" % n for n in range(8)]
        assert sorted(fasts) == sorted(expected)


def test_readers_see_only_whole_records_during_appends(tmp_path: Path) -> None:
    with closing(EmbeddedLog(tmp_path)) as log:
        log.create_topic("t", 1)
        done = threading.Event()
        problems: list[str] = []

        def reader() -> None:
            while not done.is_set():
                records = log.read("t", 0, 0, 100_000)
                if [r.offset for r in records] != list(range(len(records))):
                    problems.append("offsets not dense")
                if any(r.value != r.key * 50 for r in records):
                    problems.append("torn record")

        thread = threading.Thread(target=reader)
        thread.start()
        for i in range(200):
            key = f"{i:04}".encode()
            log.append("t", [Append(0, key, key * 50)] * 5)
        done.set()
        thread.join()
        assert not problems


def test_a_failed_fsync_fails_the_append_and_stops_further_appends(tmp_path: Path) -> None:
    failing = {"on": False}

    def fsync(fd: int) -> None:
        if failing["on"]:
            raise OSError(5, "simulated I/O error")
        os.fsync(fd)

    with closing(EmbeddedLog(tmp_path, fsync=fsync)) as log:
        log.create_topic("t", 1)
        log.append("t", [Append(0, b"k", b"kept")])
        failing["on"] = True
        with pytest.raises(LogError):
            log.append("t", [Append(0, b"k", b"lost")])
        failing["on"] = False
        with pytest.raises(LogError):
            log.append("t", [Append(0, b"k", b"refused")])
        assert [r.value for r in log.read("t", 0, 0, 10)] == [b"kept"]
    with closing(EmbeddedLog(tmp_path)) as log:
        assert [r.value for r in log.read("t", 0, 0, 10)] == [b"kept"]


def test_an_exclusive_log_keeps_other_writable_logs_out(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path), pytest.raises(LogError, match="open in another log"):
        EmbeddedLog(tmp_path, exclusive=True)
    with EmbeddedLog(tmp_path, exclusive=True):
        with pytest.raises(LogError, match="held exclusively"):
            EmbeddedLog(tmp_path)
        EmbeddedLog(tmp_path, read_only=True).close()
    EmbeddedLog(tmp_path).close()


def test_unsafe_topic_names_are_rejected(tmp_path: Path) -> None:
    with closing(EmbeddedLog(tmp_path)) as log:
        for name in ("", "..", "a/b", ".hidden", "x" * 250):
            with pytest.raises(ValueError):
                log.create_topic(name, 1)


def test_closed_log_refuses_use(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path)
    log.create_topic("t", 1)
    log.close()
    with pytest.raises(LogError):
        log.append("t", [Append(0, b"k", b"v")])
    with pytest.raises(LogError):
        log.read("t", 0, 0, 1)


def test_a_large_read_is_bounded_but_progresses(tmp_path: Path) -> None:
    with closing(EmbeddedLog(tmp_path)) as log:
        log.create_topic("t", 1)
        big = b"x" * (20 << 20)
        log.append("t", [Append(0, b"k", big)] * 4)
        first = log.read("t", 0, 0, 10)
        assert 1 <= len(first) < 4
        assert len(read_all(log, "t", 0)) == 4


def test_unfinished_topic_creation_is_ignored_then_completed(tmp_path: Path) -> None:
    (tmp_path / "log" / "half").mkdir(parents=True)
    (tmp_path / "log" / "half" / "p0.log").touch()
    with closing(EmbeddedLog(tmp_path)) as log:
        assert log.topics() == {}
        log.create_topic("half", 2)
        assert log.append("half", [Append(1, b"k", b"v")]) == [0]


def test_read_only_logs_share_a_directory_with_writers(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as writer:
        writer.create_topic("t", 2)
        writer.append("t", [Append(1, b"k", b"v")])
        with EmbeddedLog(tmp_path, read_only=True) as a, EmbeddedLog(tmp_path, read_only=True) as b:
            assert [r.value for r in a.read("t", 1, 0, 10)] == [b"v"]
            writer.append("t", [Append(1, b"k", b"w")])
            assert b.end_offset("t", 1) == 2
            a.create_topic("t", 2)  # exists: allowed
            with pytest.raises(LogError):
                a.append("t", [Append(0, b"k", b"w")])
            with pytest.raises(LogError):
                a.create_topic("other", 1)


def test_a_partition_is_owned_by_one_handle_at_a_time(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as first, EmbeddedLog(tmp_path) as second:
        first.create_topic("t", 3)
        first.own("t", [0, 1])
        first.own("t", [1])  # again by the owner: nothing changes
        second.own("t", [2])
        with pytest.raises(LogError, match="partition 1 of 't' is already owned"):
            second.own("t", [2, 1])
        with pytest.raises(LogError, match="no partition 3"):
            second.own("t", [3])
        first.close()  # closing gives them up
        second.own("t", [0, 1])


def test_records_left_without_a_topic_are_not_adopted(tmp_path: Path) -> None:
    with closing(EmbeddedLog(tmp_path)) as log:
        log.create_topic("t", 1)
        log.append("t", [Append(0, b"k", b"orphan")])
    (tmp_path / "log" / "t" / "meta.json").unlink()
    with closing(EmbeddedLog(tmp_path)) as log, pytest.raises(LogError, match="unregistered"):
        log.create_topic("t", 1)


def test_an_interrupted_append_raises_the_interrupt_and_acknowledges_nothing(
    tmp_path: Path,
) -> None:
    """A signal's KeyboardInterrupt while the leader syncs (berth serve told
    to stop mid-commit) goes up as itself, so the process stops cleanly; the
    records it was writing were never acknowledged and are not kept."""
    interrupt = threading.Event()

    def fsync(fd: int) -> None:
        os.fsync(fd)
        if interrupt.is_set():
            raise KeyboardInterrupt

    with closing(EmbeddedLog(tmp_path, fsync=fsync)) as log:
        log.create_topic("t", 1)
        log.append("t", [Append(0, b"k", b"kept")])
        interrupt.set()
        with pytest.raises(KeyboardInterrupt):
            log.append("t", [Append(0, b"k", b"interrupted")])
    with closing(EmbeddedLog(tmp_path)) as log:
        assert [r.value for r in log.read("t", 0, 0, 10)] == [b"kept"]
