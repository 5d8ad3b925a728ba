"""Readers wake on arrival: a wait on a partition returns as soon as a record
is durable there, appended by this process or another, and returns when its
timeout passes if none comes."""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
import uuid
from contextlib import closing
from multiprocessing.connection import Connection
from pathlib import Path

from ledger.doorbell import Doorbell
from ledger.embedded import EmbeddedLog
from ledger.kafka import KafkaLog
from ledger.log import Append, Tail

_ROUNDS = 30
_SPAWN = multiprocessing.get_context("spawn")


def _waiter(data_dir: str, rounds: int, pipe: Connection) -> None:
    """In a process of its own: for each offset, say it is about to wait,
    wait for that record, and report when it woke (the monotonic clock is
    the machine's, so the parent can compare)."""
    with closing(EmbeddedLog(data_dir, read_only=True)) as log:
        for offset in range(rounds):
            pipe.send(offset)
            arrived = log.wait({"t": {0: offset}}, timeout_s=10.0)
            woke = time.monotonic()
            records = log.read("t", 0, offset, 1)
            pipe.send((arrived, woke, [r.value for r in records]))


def test_a_process_wakes_for_another_process_append_at_once(tmp_path: Path) -> None:
    with closing(EmbeddedLog(tmp_path)) as log:
        log.create_topic("t", 2)
        parent, child = _SPAWN.Pipe()
        process = _SPAWN.Process(target=_waiter, args=(str(tmp_path), _ROUNDS, child))
        process.start()
        delays = []
        try:
            for offset in range(_ROUNDS):
                assert parent.poll(30) and parent.recv() == offset
                time.sleep(0.002)  # let it block: the test is of waking, not of not waiting
                log.append("t", [Append(1, b"elsewhere", b"not watched")])
                appended = time.monotonic()
                log.append("t", [Append(0, b"k", f"record {offset}".encode())])
                assert parent.poll(30)
                arrived, woke, values = parent.recv()
                assert arrived and values == [f"record {offset}".encode()]
                delays.append(woke - appended)
        finally:
            process.join(30)
        assert process.exitcode == 0
    # 10 ms is the target (a few ms on a quiet machine); the bound leaves room
    # for a loaded one, whose scheduler alone can take that long
    assert statistics.median(delays) < 0.020, delays
    assert max(delays) < 1.0, delays


def test_the_doorbell_blocks_until_a_write_rather_than_napping(tmp_path: Path) -> None:
    """What makes the wake-ups above wake-ups: with nothing written the bell
    waits its whole timeout (naps would end within 20 ms), and a write by
    another process ends the wait at once."""
    path = tmp_path / "p0.log"
    path.write_bytes(b"")
    bell = Doorbell()
    assert bell.rings  # inotify, on Linux
    bell.watch([path])
    started = time.monotonic()
    bell.wait(0.3)
    assert time.monotonic() - started >= 0.3
    writer = _SPAWN.Process(target=_write_after, args=(str(path), 0.1))
    writer.start()
    started = time.monotonic()
    bell.wait(10.0)
    assert time.monotonic() - started < 5.0
    writer.join(30)
    bell.close()


def _write_after(path: str, delay_s: float) -> None:
    time.sleep(delay_s)  # the other side of the test: a write some time later
    with open(path, "ab") as file:
        file.write(b"x")


def test_a_thread_wakes_for_an_append_in_its_own_process(tmp_path: Path) -> None:
    with closing(EmbeddedLog(tmp_path)) as log:
        log.create_topic("t", 1)
        woke: list[float] = []

        def wait() -> None:
            assert log.wait({"t": {0: 0}}, timeout_s=10.0)
            woke.append(time.monotonic())

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.05)
        appended = time.monotonic()
        log.append("t", [Append(0, b"k", b"v")])
        thread.join(10)
        assert woke and woke[0] - appended < 0.1


def test_a_wait_with_nothing_arriving_returns_at_its_timeout(tmp_path: Path) -> None:
    with closing(EmbeddedLog(tmp_path)) as log:
        log.create_topic("t", 1)
        log.append("t", [Append(0, b"k", b"v")])
        assert log.wait({"t": {0: 0}}, timeout_s=5.0)  # already there: at once
        started = time.monotonic()
        assert not log.wait({"t": {0: 1}}, timeout_s=0.2)
        assert 0.2 <= time.monotonic() - started < 2.0


def test_a_tail_waits_for_its_next_records(tmp_path: Path) -> None:
    with closing(EmbeddedLog(tmp_path)) as log, closing(EmbeddedLog(tmp_path)) as other:
        log.create_topic("t", 2)
        tail = Tail(log, "t")
        arrival = tail.arrival({1})
        assert not arrival(0.05)
        other.append("t", [Append(0, b"k", b"not mine")])
        assert not arrival(0.05)  # partition 0 is not among the tail's
        other.append("t", [Append(1, b"k", b"mine")])
        assert arrival(5.0)
        assert [r.value for r in tail.records({1})] == [b"mine"]


def test_kafka_wakes_a_waiter_with_a_long_poll(kafka_bootstrap: str) -> None:
    topic = f"wait-{uuid.uuid4().hex[:8]}"
    with closing(KafkaLog(kafka_bootstrap)) as log, closing(KafkaLog(kafka_bootstrap)) as other:
        log.create_topic(topic, 2)
        started = time.monotonic()
        assert not log.wait({topic: {0: 0}}, timeout_s=0.3)
        assert time.monotonic() - started >= 0.3
        woke: list[float] = []

        def wait() -> None:
            assert log.wait({topic: {0: 0, 1: 0}}, timeout_s=20.0)
            woke.append(time.monotonic())

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.2)
        other.append(topic, [Append(1, b"k", b"v")])
        appended = time.monotonic()
        thread.join(20)
        assert woke and woke[0] - appended < 2.0
