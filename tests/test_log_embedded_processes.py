"""The embedded log shared by several processes: what only files and locks can show.

The contract suite (``tests/contracts/log_contract.py``) already runs two
handles on one directory; these tests use real processes, a handle stopped
between its write and its fsync, and an appender killed mid-write.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from ledger import frames
from ledger.embedded import EmbeddedLog
from ledger.log import Append, Record
from tests.contracts.log_contract import read_all

_SPAWN = multiprocessing.get_context("spawn")


def _append_rounds(data_dir: str, name: int, rounds: int, acked: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """A child process: append ``rounds`` small batches to both partitions and
    report every offset it was given."""
    with EmbeddedLog(data_dir) as log:
        for round_ in range(rounds):
            batch = [Append(i % 2, b"k", f"{name}/{round_}/{i}".encode()) for i in range(3)]
            offsets = log.append("t", batch)
            acked.put([(a.partition, o, a.value) for a, o in zip(batch, offsets, strict=True)])
    acked.put(None)


def _append_forever(data_dir: str, acked: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    with EmbeddedLog(data_dir) as log:
        n = 0
        while True:
            value = f"{n:08d}".encode() * 64
            [offset] = log.append("t", [Append(0, b"k", value)])
            acked.put((offset, value))
            n += 1


def _records(log: EmbeddedLog, partition: int) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for r in read_all(log, "t", partition)]


def test_processes_appending_at_once_get_dense_unique_offsets(tmp_path: Path) -> None:
    with closing(EmbeddedLog(tmp_path)) as log:
        log.create_topic("t", 2)
        acked_queue = _SPAWN.Queue()
        children = [
            _SPAWN.Process(target=_append_rounds, args=(str(tmp_path), n, 60, acked_queue))
            for n in range(3)
        ]
        for child in children:
            child.start()
        acked: list[tuple[int, int, bytes]] = []
        finished = 0
        seen: list[Record] = []
        while finished < len(children):
            # the parent reads while the children write, and never sees a gap
            seen.extend(log.read("t", 0, len(seen), 1000))
            report = acked_queue.get(timeout=60)
            if report is None:
                finished += 1
            else:
                acked.extend(report)
        for child in children:
            child.join(timeout=30)
            assert child.exitcode == 0
        assert [r.offset for r in seen] == list(range(len(seen)))
        for partition in (0, 1):
            mine = sorted((o, v) for p, o, v in acked if p == partition)
            # each batch puts two records in partition 0 and one in partition 1
            assert [o for o, _ in mine] == list(range((2 - partition) * 3 * 60))
            assert _records(log, partition) == mine


def test_a_record_is_visible_to_other_handles_only_once_it_is_durable(tmp_path: Path) -> None:
    writing = threading.Event()
    release = threading.Event()
    gate = {"on": False}

    def slow_fsync(fd: int) -> None:
        os.fsync(fd)
        if gate["on"]:
            writing.set()
            assert release.wait(30)

    with (
        closing(EmbeddedLog(tmp_path, fsync=slow_fsync)) as writer,
        closing(EmbeddedLog(tmp_path)) as reader,
    ):
        writer.create_topic("t", 1)
        assert reader.end_offset("t", 0) == 0
        gate["on"] = True
        appending = threading.Thread(target=writer.append, args=("t", [Append(0, b"k", b"v")]))
        appending.start()
        assert writing.wait(30)
        # written to the file, not yet fsynced: the other handle waits for it
        assert (tmp_path / "log" / "t" / "p0.log").stat().st_size > 0
        got: list[list[Record]] = []
        reading = threading.Thread(target=lambda: got.append(reader.read("t", 0, 0, 10)))
        reading.start()
        reading.join(timeout=0.5)
        assert reading.is_alive() and not got
        release.set()
        reading.join(timeout=30)
        appending.join(timeout=30)
        assert [r.value for r in got[0]] == [b"v"]


def test_what_a_dead_appender_left_half_written_is_cut_by_the_next_append(
    tmp_path: Path,
) -> None:
    # what the dead appender was writing: the same second record, framed and
    # chained exactly as it would have been, of which only half got out
    with closing(EmbeddedLog(tmp_path / "model")) as model:
        model.create_topic("t", 1)
        model.append("t", [Append(0, b"k", b"whole"), Append(0, b"k", b"x" * 64)])
    framed = (tmp_path / "model" / "log" / "t" / "p0.log").read_bytes()
    second = framed[len(framed) - (frames.header_size(2) + 65) :]
    with closing(EmbeddedLog(tmp_path)) as writer, closing(EmbeddedLog(tmp_path)) as reader:
        writer.create_topic("t", 1)
        writer.append("t", [Append(0, b"k", b"whole")])
        with open(tmp_path / "log" / "t" / "p0.log", "ab") as file:
            file.write(second[:30])
        assert [r.value for r in reader.read("t", 0, 0, 10)] == [b"whole"]
        assert reader.end_offset("t", 0) == 1
        assert reader.append("t", [Append(0, b"k", b"next")]) == [1]
        assert [r.value for r in writer.read("t", 0, 0, 10)] == [b"whole", b"next"]
        assert writer.append("t", [Append(0, b"k", b"last")]) == [2]
    with closing(EmbeddedLog(tmp_path)) as log:
        assert [r.value for r in log.read("t", 0, 0, 10)] == [b"whole", b"next", b"last"]


@pytest.mark.parametrize("acknowledged", [20, 200])
def test_an_appender_killed_mid_stream_loses_no_acknowledged_record(
    tmp_path: Path, acknowledged: int
) -> None:
    with closing(EmbeddedLog(tmp_path)) as log:
        log.create_topic("t", 1)
        acked_queue = _SPAWN.Queue()
        child = _SPAWN.Process(target=_append_forever, args=(str(tmp_path), acked_queue))
        child.start()
        acked = [acked_queue.get(timeout=60) for _ in range(acknowledged)]
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=30)
        stored = _records(log, 0)
        # every acknowledged record is there, in order; at most a few more
        # (written before the kill, not yet acknowledged) follow them
        assert stored[: len(acked)] == acked
        assert [o for o, _ in stored] == list(range(len(stored)))
        [offset] = log.append("t", [Append(0, b"k", b"after")])
        assert offset == len(stored)
        assert log.read("t", 0, offset, 1)[0].value == b"after"


def _counting(calls: list[int]) -> Callable[[int], None]:
    def fsync(fd: int) -> None:
        calls.append(fd)
        os.fsync(fd)

    return fsync


def test_records_another_process_noted_as_synced_are_read_without_an_fsync(
    tmp_path: Path,
) -> None:
    calls: list[int] = []
    with closing(EmbeddedLog(tmp_path, fsync=_counting(calls))) as reader:
        reader.create_topic("t", 2)
        calls.clear()
        acked_queue = _SPAWN.Queue()
        child = _SPAWN.Process(target=_append_rounds, args=(str(tmp_path), 0, 5, acked_queue))
        child.start()
        reports = list(iter(lambda: acked_queue.get(timeout=60), None))
        child.join(timeout=30)
        assert child.exitcode == 0
        acked = sorted((o, v) for report in reports for p, o, v in report if p == 0)
        assert _records(reader, 0) == acked
        # the appender fsynced them and said so beside the file: no second fsync
        assert calls == []


def test_records_no_appender_noted_as_synced_are_fsynced_before_they_are_read(
    tmp_path: Path,
) -> None:
    # a whole record that an appender wrote and died before fsyncing: framed
    # and chained as the log would have, written behind the log's back
    with closing(EmbeddedLog(tmp_path / "model")) as model:
        model.create_topic("t", 1)
        model.append("t", [Append(0, b"k", b"first"), Append(0, b"k", b"unsynced")])
    framed = (tmp_path / "model" / "log" / "t" / "p0.log").read_bytes()
    second = framed[len(framed) - (frames.header_size(2) + len(b"kunsynced")) :]
    calls: list[int] = []
    with (
        closing(EmbeddedLog(tmp_path)) as writer,
        closing(EmbeddedLog(tmp_path, fsync=_counting(calls))) as reader,
    ):
        writer.create_topic("t", 1)
        writer.append("t", [Append(0, b"k", b"first")])
        calls.clear()
        assert [r.value for r in reader.read("t", 0, 0, 10)] == [b"first"]
        assert calls == []
        with open(tmp_path / "log" / "t" / "p0.log", "ab") as file:
            file.write(second)
        assert [r.value for r in reader.read("t", 0, 0, 10)] == [b"first", b"unsynced"]
        assert len(calls) == 1  # synced by the reader before it was read


def test_an_append_whose_note_cannot_be_written_is_still_acknowledged(tmp_path: Path) -> None:
    calls: list[int] = []
    with (
        closing(EmbeddedLog(tmp_path)) as writer,
        closing(EmbeddedLog(tmp_path, fsync=_counting(calls))) as reader,
    ):
        writer.create_topic("t", 1)
        (tmp_path / "log" / "t" / "p0.synced").mkdir()  # where the note would go
        assert writer.append("t", [Append(0, b"k", b"v")]) == [0]
        calls.clear()
        assert [r.value for r in reader.read("t", 0, 0, 10)] == [b"v"]
        assert len(calls) == 1  # unnoted, so synced again by the reader
