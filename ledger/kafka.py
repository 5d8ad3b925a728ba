"""The Kafka backend, over kafka-python.

Partitions are chosen by the caller (see :mod:`ledger.partitioner`), so every
record is sent to an explicit partition. No kafka-python exception leaves this
module: each is translated into :class:`LogError` or :class:`UnknownTopic`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

from ledger.log import Append, Log, LogError, Record, UnknownTopic, Watches

__all__ = ["KafkaLog"]

_UNKNOWN_TOPIC_CODE = UnknownTopicOrPartitionError.errno
_METADATA_RETRY_S = 0.05


@contextmanager
def _translated(action: str) -> Iterator[None]:
    try:
        yield
    except LogError:
        raise
    except UnknownTopicOrPartitionError as exc:
        raise UnknownTopic(f"{action}: {exc}") from exc
    except (KafkaError, OSError) as exc:
        raise LogError(f"{action}: {exc}") from exc


class KafkaLog(Log):
    """A :class:`Log` on a Kafka cluster (or any broker speaking its protocol).

    ``append`` waits for acknowledgement by all in-sync replicas. Reads use one
    group-less consumer positioned by hand, so nothing is committed to the
    broker; it is shared by all threads behind a lock, as kafka-python
    consumers are not thread-safe (the producer is).

    Timeouts are in seconds: ``request_timeout`` bounds each broker call,
    ``metadata_timeout`` how long a newly created topic may take to show up in
    metadata, and ``read_timeout`` how long one ``read`` may wait for records
    the broker says exist.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        client_id: str = "berth",
        *,
        replication_factor: int = 1,
        request_timeout: float = 30.0,
        metadata_timeout: float = 10.0,
        read_timeout: float = 10.0,
        linger_ms: int = 5,
        batch_size: int = 256 * 1024,
        max_request_size: int = 8 * 1024 * 1024,
    ) -> None:
        self._replication_factor = replication_factor
        self._request_timeout = request_timeout
        self._metadata_timeout = metadata_timeout
        self._read_timeout = read_timeout
        self._counts: dict[str, int] = {}
        self._ends: dict[TopicPartition, int] = {}
        # Where the reading consumer is assigned and positioned, so that
        # sequential reads skip the seek and keep its prefetched data.
        self._assigned: TopicPartition | None = None
        self._position = -1
        self._read_lock = threading.Lock()
        self._admin_lock = threading.Lock()
        # Waiting consumers, one per thread waiting at a time: a wait can last
        # long (an API thread waiting for a decision), and a writer's loop in
        # the same process must never queue behind it for its own.
        self._waiters_lock = threading.Lock()
        self._idle_waiters: list[Any] = []
        self._waiters: list[Any] = []
        self._common: dict[str, Any] = {}
        common: dict[str, Any] = {
            "bootstrap_servers": bootstrap_servers,
            "request_timeout_ms": int(request_timeout * 1000),
            "bootstrap_timeout_ms": int(request_timeout * 1000),
        }
        self._common = common
        self._admin: Any = None
        self._producer: Any = None
        self._consumer: Any = None
        try:
            with _translated(f"connect to {bootstrap_servers}"):
                self._admin = KafkaAdminClient(client_id=f"{client_id}-admin", **common)
                self._producer = KafkaProducer(
                    client_id=f"{client_id}-producer",
                    acks="all",
                    linger_ms=linger_ms,
                    batch_size=batch_size,
                    max_request_size=max_request_size,
                    # Topics come only from create_topic, with their partition count.
                    allow_auto_create_topics=False,
                    **common,
                )
                self._consumer = KafkaConsumer(
                    client_id=f"{client_id}-reader",
                    group_id=None,
                    enable_auto_commit=False,
                    allow_auto_create_topics=False,
                    # Reading below the log start must fail, not jump elsewhere.
                    auto_offset_reset="none",
                    max_partition_fetch_bytes=max(max_request_size, 1024 * 1024),
                    **common,
                )
        except BaseException:
            self.close()
            raise

    # -- topics -----------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        # The dict form: kafka-python 3 deprecates NewTopic objects.
        spec = {
            topic: {"num_partitions": partitions, "replication_factor": self._replication_factor}
        }
        with _translated(f"create topic {topic!r}"):
            try:
                with self._admin_lock:
                    self._admin.create_topics(spec, timeout_ms=int(self._request_timeout * 1000))
            except TopicAlreadyExistsError:
                existing = self._described_count(topic)
                if existing is None:
                    raise LogError(f"topic {topic!r} exists but is not visible") from None
                if existing != partitions:
                    raise LogError(
                        f"topic {topic!r} exists with {existing} partitions, not {partitions}"
                    ) from None
            self._counts[topic] = self._await_metadata(topic)

    def partition_count(self, topic: str) -> int:
        count = self._counts.get(topic)
        if count is None:
            with _translated(f"partition count of {topic!r}"):
                count = self._counts[topic] = self._await_metadata(topic)
        return count

    # -- records ----------------------------------------------------------------

    def append(self, topic: str, records: Sequence[Append]) -> list[int]:
        count = self.partition_count(topic)
        for record in records:
            self._check_partition(topic, record.partition, count)
        if not records:
            return []
        with _translated(f"append to {topic!r}"):
            futures = [
                self._producer.send(
                    topic, key=record.key, value=record.value, partition=record.partition
                )
                for record in records
            ]
            self._producer.flush(timeout=self._request_timeout)
            return [int(future.get(timeout=self._request_timeout).offset) for future in futures]

    def read(self, topic: str, partition: int, offset: int, max_records: int) -> list[Record]:
        if offset < 0 or max_records < 0:
            raise ValueError("offset and max_records must be >= 0")
        self._check_partition(topic, partition, self.partition_count(topic))
        if max_records == 0:
            return []
        tp = TopicPartition(topic, partition)
        with self._read_lock, _translated(f"read {topic!r}/{partition}"):
            # The cached end saves a round trip per read in the middle of a
            # replay; it is refreshed whenever the read could reach past it.
            end = self._ends.get(tp, 0)
            if offset + max_records > end:
                end = self._fetch_end(tp)
                if offset >= end:
                    return []
            return self._poll(tp, offset, min(end, offset + max_records))

    def end_offset(self, topic: str, partition: int) -> int:
        self._check_partition(topic, partition, self.partition_count(topic))
        tp = TopicPartition(topic, partition)
        with self._read_lock, _translated(f"end offset of {topic!r}/{partition}"):
            return self._fetch_end(tp)

    def own(self, topic: str, partitions: Sequence[int]) -> None:
        """Kafka cannot tell without consumer groups, which Berth does not
        use: a deployment splits the partitions between its processes
        (``berth projector --owned``, ``berth scheduler --owned``), and the
        app holds them through its view (:mod:`projections.view.ownership`)."""
        self.partition_count(topic)  # an unknown topic is still an error

    def wait(self, watches: Watches, timeout_s: float) -> bool:
        """A long-poll fetch from the watched offsets on a consumer of its
        own: the broker answers as soon as a record is there (or after
        ``fetch.max.wait.ms``, and the consumer asks again until the
        timeout). What it fetches is dropped; ``read`` reads it."""
        wanted = {
            TopicPartition(topic, p): offset
            for topic, offsets in watches.items()
            for p, offset in offsets.items()
        }
        if not wanted:
            return False
        with _translated("wait for records"):
            waiter = self._take_waiter()
            try:
                waiter.assign(list(wanted))
                for tp, offset in wanted.items():
                    waiter.seek(tp, offset)
                deadline = time.monotonic() + timeout_s
                while (left := deadline - time.monotonic()) > 0:
                    if waiter.poll(timeout_ms=max(1, int(left * 1000)), max_records=1):
                        return True
                return False
            finally:
                with self._waiters_lock:
                    self._idle_waiters.append(waiter)

    def _take_waiter(self) -> Any:
        """An idle waiting consumer, or a new one when every one is in use."""
        with self._waiters_lock:
            if self._idle_waiters:
                return self._idle_waiters.pop()
        waiter = KafkaConsumer(
            client_id="berth-waiter",
            group_id=None,
            enable_auto_commit=False,
            allow_auto_create_topics=False,
            auto_offset_reset="none",
            **self._common,
        )
        with self._waiters_lock:
            self._waiters.append(waiter)
        return waiter

    def close(self) -> None:
        producer, consumer, admin = self._producer, self._consumer, self._admin
        with self._waiters_lock:
            waiters, self._waiters, self._idle_waiters = self._waiters, [], []
        self._producer = self._consumer = self._admin = None
        errors: list[BaseException] = []
        closing: dict[str, Any] = {
            "autocommit": False,
            "timeout_ms": int(self._request_timeout * 1000),
        }
        for client, kwargs in (
            (producer, {"timeout": self._request_timeout}),
            (consumer, closing),
            *((waiter, closing) for waiter in waiters),
            (admin, {}),
        ):
            if client is None:
                continue
            try:
                client.close(**kwargs)
            except (KafkaError, OSError) as exc:
                errors.append(exc)
        if errors:
            raise LogError(f"close failed: {errors[0]}") from errors[0]

    # -- internals --------------------------------------------------------------

    def _poll(self, tp: TopicPartition, offset: int, stop: int) -> list[Record]:
        """Records ``offset`` to ``stop`` (exclusive) of ``tp``, which the broker
        has reported as written; polls until they all arrive or ``read_timeout``
        passes."""
        self._seek(tp, offset)
        out: list[Record] = []
        deadline = time.monotonic() + self._read_timeout
        while self._position < stop:
            messages = self._poll_once(tp, stop - self._position, deadline)
            if messages is None:
                break
            out.extend(
                Record(tp.partition, m.offset, m.key or b"", m.value or b"") for m in messages
            )
        if not out:
            raise LogError(
                f"no records from {tp.topic}/{tp.partition} at {offset} within "
                f"{self._read_timeout}s although the partition ends at {stop} or later"
            )
        return out

    def _fetch_end(self, tp: TopicPartition) -> int:
        ends = self._consumer.end_offsets([tp], timeout_ms=int(self._request_timeout * 1000))
        end = int(ends[tp])
        if end > 0:
            # Some brokers (tansu 0.6) answer ListOffsets with the base offset of
            # the last batch plus one rather than the high watermark. A fetch
            # from just before that point returns the last batch along with the
            # true high watermark; on Kafka it costs one small fetch.
            self._seek(tp, end - 1)
            deadline = time.monotonic() + self._read_timeout
            messages: list[Any] = []
            while not messages:
                polled = self._poll_once(tp, 1 << 16, deadline)
                if polled is None:
                    raise LogError(f"no fetch response for {tp.topic}/{tp.partition}")
                messages = polled
            end = max(end, messages[-1].offset + 1, int(self._consumer.highwater(tp) or 0))
        self._ends[tp] = end
        return end

    def _seek(self, tp: TopicPartition, offset: int) -> None:
        if self._assigned != tp:
            self._consumer.assign([tp])
            self._assigned = tp
            self._position = -1
        if self._position != offset:
            self._consumer.seek(tp, offset)
            self._position = offset

    def _poll_once(self, tp: TopicPartition, max_records: int, deadline: float) -> list[Any] | None:
        """The next records of ``tp`` at the consumer's position, filtered to
        that position onwards; ``None`` once ``deadline`` has passed."""
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        batch = self._consumer.poll(timeout_ms=int(left * 1000) + 1, max_records=max_records)
        messages = [m for m in batch.get(tp, ()) if m.offset >= self._position]
        if messages:
            self._position = messages[-1].offset + 1
        return messages

    def _await_metadata(self, topic: str) -> int:
        """The partition count from the reading consumer's metadata, which can
        trail a fresh creation; the broker's own topic description tells a lag
        apart from a topic that does not exist."""
        deadline = time.monotonic() + self._metadata_timeout
        while True:
            with self._read_lock:
                partitions = self._consumer.partitions_for_topic(topic)
            if partitions:
                return len(partitions)
            if self._described_count(topic) is None:
                raise UnknownTopic(topic)
            if time.monotonic() >= deadline:
                raise LogError(f"topic {topic!r} did not appear in metadata")
            time.sleep(_METADATA_RETRY_S)

    def _described_count(self, topic: str) -> int | None:
        with self._admin_lock:
            described = self._admin.describe_topics([topic])
        for entry in described:
            if entry.get("name") != topic:
                continue
            code = entry.get("error_code", 0)
            if code == _UNKNOWN_TOPIC_CODE:
                return None
            if code:
                raise LogError(f"describe topic {topic!r}: error code {code}")
            return len(entry.get("partitions") or ())
        return None

    @staticmethod
    def _check_partition(topic: str, partition: int, count: int) -> None:
        if not 0 <= partition < count:
            raise LogError(f"topic {topic!r} has no partition {partition}")
