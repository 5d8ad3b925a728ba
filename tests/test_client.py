"""The publishing edge: routing, clock skew and cross-partition claims."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.client import Publisher, PublishError
from consumers.topics import DEFAULT_TOPICS
from ledger.embedded import EmbeddedLog
from ledger.log import Log
from ledger.partitioner import partition_for
from schemas.codec import EventDecodeError, decode_event
from tests.builders import claim_items, register

NOW_MS = 1_000_000


@pytest.fixture()
def log(tmp_path: Path) -> Log:
    log = EmbeddedLog(tmp_path)
    log.create_topic(DEFAULT_TOPICS.events, 8)
    return log


def publisher(log: Log, max_skew_ms: int = 5_000) -> Publisher:
    return Publisher(log, clock_ms=lambda: NOW_MS, max_skew_ms=max_skew_ms)


def two_providers_in_different_partitions() -> tuple[str, str]:
    names = [f"n{k}" for k in range(50)]
    first = names[0]
    home = partition_for(first.encode(), 8)
    other = next(n for n in names if partition_for(n.encode(), 8) != home)
    return first, other


def test_events_land_in_their_key_partition(log: Log) -> None:
    placed = publisher(log).publish([register(f"n{k}", ts=NOW_MS) for k in range(20)])
    for k, (partition, offset) in enumerate(placed):
        assert partition == partition_for(f"n{k}".encode(), 8)
        record = log.read(DEFAULT_TOPICS.events, partition, offset, 1)[0]
        assert decode_event(record.value).partition_key == f"n{k}"


def test_a_clock_too_far_ahead_is_refused_and_nothing_is_appended(log: Log) -> None:
    edge = publisher(log, max_skew_ms=100)
    edge.publish([register("n1", ts=NOW_MS + 100)])  # exactly at the limit
    with pytest.raises(PublishError, match="101 ms ahead"):
        edge.publish([register("n2", ts=NOW_MS), register("n3", ts=NOW_MS + 101)])
    total = sum(log.end_offset(DEFAULT_TOPICS.events, p) for p in range(8))
    assert total == 1


def test_a_claim_spanning_partitions_is_refused(log: Log) -> None:
    a, b = two_providers_in_different_partitions()
    spanning = claim_items("r1", {a: {"VCPU": 1}, b: {"VCPU": 1}}, ts=NOW_MS)
    with pytest.raises(PublishError, match="transaction"):
        publisher(log).publish([spanning])


def test_mappings_are_validated_at_the_edge(log: Log) -> None:
    with pytest.raises(EventDecodeError, match="reservation_id"):
        publisher(log).publish(
            [{"type": "claim", "event_id": "e", "ts_ms": NOW_MS, "partition_key": "n1"}]
        )
