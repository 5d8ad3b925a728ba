"""The behaviour every :class:`ledger.log.Log` backend must show.

Subclass :class:`LogContract` as ``Test<Backend>`` and implement ``make_log``;
the tests then run against that backend. Topic names are unique per test so a
shared broker can serve every test.
"""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import closing

import pytest

from ledger.log import Append, Log, LogError, Record, Tail, UnknownTopic
from ledger.partitioner import partition_for


def read_all(log: Log, topic: str, partition: int, offset: int = 0) -> list[Record]:
    out: list[Record] = []
    while True:
        batch = log.read(topic, partition, offset + len(out), 1000)
        if not batch:
            return out
        out.extend(batch)


class LogContract(ABC):
    """Every backend's subclass says how to make a fresh log."""

    @abstractmethod
    def make_log(self) -> Log:
        """A handle on this test's log, empty when the test begins; each call
        opens another handle on the same log, as another process would."""

    @pytest.fixture
    def log(self) -> Iterator[Log]:
        log = self.make_log()
        try:
            yield log
        finally:
            log.close()

    @staticmethod
    def new_topic(log: Log, partitions: int = 1) -> str:
        topic = f"t-{uuid.uuid4().hex[:12]}"
        log.create_topic(topic, partitions)
        return topic

    # -- topics -----------------------------------------------------------------

    def test_create_topic_sets_partition_count(self, log: Log) -> None:
        topic = self.new_topic(log, 3)
        assert log.partition_count(topic) == 3

    def test_create_topic_again_with_same_count_is_a_no_op(self, log: Log) -> None:
        topic = self.new_topic(log, 2)
        log.append(topic, [Append(1, b"k", b"v")])
        log.create_topic(topic, 2)
        assert log.partition_count(topic) == 2
        assert log.end_offset(topic, 1) == 1

    def test_create_topic_with_other_count_fails(self, log: Log) -> None:
        topic = self.new_topic(log, 2)
        with pytest.raises(LogError):
            log.create_topic(topic, 3)
        assert log.partition_count(topic) == 2

    def test_unknown_topic_is_reported(self, log: Log) -> None:
        topic = f"missing-{uuid.uuid4().hex[:12]}"
        with pytest.raises(UnknownTopic):
            log.partition_count(topic)
        with pytest.raises(UnknownTopic):
            log.append(topic, [Append(0, b"k", b"v")])
        with pytest.raises(UnknownTopic):
            log.read(topic, 0, 0, 10)
        with pytest.raises(UnknownTopic):
            log.end_offset(topic, 0)
        with pytest.raises(UnknownTopic):
            log.partition_count(topic)  # and asking did not create it

    def test_unknown_partition_is_an_error(self, log: Log) -> None:
        topic = self.new_topic(log, 2)
        with pytest.raises(LogError):
            log.append(topic, [Append(2, b"k", b"v")])
        with pytest.raises(LogError):
            log.read(topic, 2, 0, 10)
        with pytest.raises(LogError):
            log.end_offset(topic, -1)

    def test_bad_arguments_are_rejected(self, log: Log) -> None:
        topic = self.new_topic(log)
        with pytest.raises(ValueError):
            log.create_topic(f"x-{uuid.uuid4().hex}", 0)
        with pytest.raises(ValueError):
            log.read(topic, 0, -1, 10)

    # -- append and read --------------------------------------------------------

    def test_append_returns_dense_offsets_in_order(self, log: Log) -> None:
        topic = self.new_topic(log)
        assert log.append(topic, [Append(0, b"a", b"1"), Append(0, b"b", b"2")]) == [0, 1]
        assert log.append(topic, [Append(0, b"c", b"3")]) == [2]
        assert log.append(topic, []) == []
        assert log.end_offset(topic, 0) == 3

    def test_read_back_identical_records(self, log: Log) -> None:
        topic = self.new_topic(log)
        sent = [Append(0, f"key-{i}".encode(), bytes([i]) * (i + 1)) for i in range(20)]
        offsets = log.append(topic, sent)
        got = log.read(topic, 0, 0, 100)
        assert got == [
            Record(0, offset, a.key, a.value) for offset, a in zip(offsets, sent, strict=True)
        ]

    def test_read_from_the_middle(self, log: Log) -> None:
        topic = self.new_topic(log)
        log.append(topic, [Append(0, b"k", str(i).encode()) for i in range(10)])
        got = log.read(topic, 0, 6, 100)
        assert [(r.offset, r.value) for r in got] == [(i, str(i).encode()) for i in range(6, 10)]

    def test_max_records_is_honoured(self, log: Log) -> None:
        topic = self.new_topic(log)
        log.append(topic, [Append(0, b"k", str(i).encode()) for i in range(10)])
        assert [r.offset for r in log.read(topic, 0, 0, 3)] == [0, 1, 2]
        assert [r.offset for r in log.read(topic, 0, 8, 3)] == [8, 9]
        assert log.read(topic, 0, 0, 0) == []

    def test_reading_at_or_past_the_end_returns_nothing(self, log: Log) -> None:
        topic = self.new_topic(log)
        assert log.read(topic, 0, 0, 10) == []
        log.append(topic, [Append(0, b"k", b"v")])
        assert log.read(topic, 0, 1, 10) == []
        assert log.read(topic, 0, 50, 10) == []

    def test_reads_see_later_appends(self, log: Log) -> None:
        topic = self.new_topic(log)
        log.append(topic, [Append(0, b"k", b"a")])
        assert len(log.read(topic, 0, 0, 10)) == 1
        log.append(topic, [Append(0, b"k", b"b"), Append(0, b"k", b"c")])
        assert [r.value for r in log.read(topic, 0, 0, 10)] == [b"a", b"b", b"c"]

    def test_a_tail_reads_each_record_once_from_where_it_was_made(self, log: Log) -> None:
        topic = self.new_topic(log, 2)
        log.append(topic, [Append(0, b"k", b"before")])
        tail, whole = Tail(log, topic), Tail(log, topic, from_start=True)
        log.append(topic, [Append(0, b"k", b"a"), Append(1, b"k", b"b"), Append(1, b"k", b"c")])
        assert [(r.partition, r.value) for r in tail.records(partitions={1})] == [
            (1, b"b"),
            (1, b"c"),
        ]
        assert [r.value for r in tail.records()] == [b"a"]  # partition 1 was read already
        assert list(tail.records()) == []
        assert [r.value for r in whole.records()] == [b"before", b"a", b"b", b"c"]
        log.append(topic, [Append(1, b"k", b"d")])
        assert [r.value for r in whole.records()] == [r.value for r in tail.records()] == [b"d"]

    def test_end_offset_counts_records_per_partition(self, log: Log) -> None:
        topic = self.new_topic(log, 2)
        assert log.end_offset(topic, 0) == 0
        log.append(topic, [Append(1, b"k", b"v")] * 4)
        assert log.end_offset(topic, 0) == 0
        assert log.end_offset(topic, 1) == 4

    def test_many_partitions(self, log: Log) -> None:
        topic = self.new_topic(log, 16)
        keys = [f"reservation-{i}".encode() for i in range(200)]
        sent = [Append(partition_for(k, 16), k, k[::-1]) for k in keys]
        offsets = log.append(topic, sent)
        for partition in range(16):
            expected = [
                (offset, a.key, a.value)
                for offset, a in zip(offsets, sent, strict=True)
                if a.partition == partition
            ]
            got = [(r.offset, r.key, r.value) for r in read_all(log, topic, partition)]
            assert got == expected
            assert [o for o, _, _ in expected] == list(range(len(expected)))

    def test_one_batch_spanning_partitions(self, log: Log) -> None:
        topic = self.new_topic(log, 3)
        log.append(topic, [Append(2, b"x", b"first")])
        batch = [Append(p, b"k", f"{p}-{i}".encode()) for i in range(4) for p in (0, 2, 1)]
        offsets = log.append(topic, batch)
        assert offsets == [i + (1 if p == 2 else 0) for i in range(4) for p in (0, 2, 1)]
        assert [r.value for r in log.read(topic, 2, 0, 10)] == [
            b"first",
            b"2-0",
            b"2-1",
            b"2-2",
            b"2-3",
        ]

    @staticmethod
    def _race_appends(handles: list[Log], topic: str, threads_per_handle: int) -> None:
        """Threads on every handle append to two partitions at once; every
        append gets its own offsets, dense per partition, and every handle
        reads the same records at them."""
        acked: list[tuple[int, int, bytes]] = []
        acked_lock = threading.Lock()
        errors: list[BaseException] = []

        def writer(log: Log, name: int) -> None:
            try:
                for round_ in range(15):
                    batch = [
                        Append((name + i) % 2, b"w", f"{name}/{round_}/{i}".encode())
                        for i in range(1 + round_ % 3)
                    ]
                    offsets = log.append(topic, batch)
                    with acked_lock:
                        acked.extend(
                            (a.partition, o, a.value) for a, o in zip(batch, offsets, strict=True)
                        )
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=writer, args=(log, n * threads_per_handle + k))
            for n, log in enumerate(handles)
            for k in range(threads_per_handle)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        for partition in range(2):
            mine = sorted((o, v) for p, o, v in acked if p == partition)
            assert [o for o, _ in mine] == list(range(len(mine)))
            for log in handles:
                assert [(r.offset, r.value) for r in read_all(log, topic, partition)] == mine
                assert log.end_offset(topic, partition) == len(mine)

    def test_concurrent_appends_get_dense_unique_offsets(self, log: Log) -> None:
        self._race_appends([log], self.new_topic(log, 2), threads_per_handle=4)

    # -- several handles (processes) on one log ----------------------------------

    def test_a_second_handle_sees_topics_and_records_made_after_it_opened(self, log: Log) -> None:
        with closing(self.make_log()) as other:
            topic = self.new_topic(log, 2)
            log.append(topic, [Append(1, b"k", b"first"), Append(1, b"k", b"second")])
            assert other.partition_count(topic) == 2
            assert other.end_offset(topic, 1) == 2
            assert [r.value for r in other.read(topic, 1, 0, 10)] == [b"first", b"second"]
            assert other.append(topic, [Append(1, b"k", b"third")]) == [2]
            assert [r.value for r in log.read(topic, 1, 2, 10)] == [b"third"]

    def test_handles_creating_one_topic_at_once_agree(self, log: Log) -> None:
        topic = f"t-{uuid.uuid4().hex[:12]}"
        with closing(self.make_log()) as other:
            both = threading.Barrier(2, timeout=30)
            errors: list[BaseException] = []

            def create(handle: Log) -> None:
                try:
                    both.wait()
                    handle.create_topic(topic, 3)
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=create, args=(h,)) for h in (log, other)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not errors
            assert log.partition_count(topic) == other.partition_count(topic) == 3

    def test_handles_appending_at_once_get_dense_unique_offsets(self, log: Log) -> None:
        topic = self.new_topic(log, 2)
        with closing(self.make_log()) as other:
            self._race_appends([log, other], topic, threads_per_handle=2)

    def test_large_values(self, log: Log) -> None:
        topic = self.new_topic(log)
        big = bytes(range(256)) * 4096  # 1 MiB
        log.append(topic, [Append(0, b"small", b"s")])
        assert log.append(topic, [Append(0, b"big", big)]) == [1]
        log.append(topic, [Append(0, b"after", b"a")])
        got = read_all(log, topic, 0)
        assert [r.key for r in got] == [b"small", b"big", b"after"]
        assert got[1].value == big

    def test_empty_key_and_value(self, log: Log) -> None:
        topic = self.new_topic(log)
        log.append(topic, [Append(0, b"", b"value"), Append(0, b"key", b""), Append(0, b"", b"")])
        got = log.read(topic, 0, 0, 10)
        assert [(r.key, r.value) for r in got] == [(b"", b"value"), (b"key", b""), (b"", b"")]
