"""The publishing edge: routing, clock skew, cross-partition claims, pools and
releasing a consumer everywhere."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from berth.app import App, Settings
from berth.client import Publisher, PublishError
from consumers.partition_writer import PartitionWriter
from ledger.embedded import EmbeddedLog
from ledger.log import Append, Log
from ledger.partitioner import partition_for
from ledger.topics import DEFAULT_TOPICS
from schemas.codec import EventDecodeError, decode_event
from schemas.events import (
    Claim,
    ClaimItem,
    ClaimSet,
    ClaimSpec,
    IdentifierItem,
    PoolDefined,
    ReleaseConsumer,
)
from schemas.outcomes import Kind, Outcome
from tests.builders import claim, claim_items, next_id, provider, register

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


# --- pools, claim sets and releasing a consumer ------------------------------


def key_in(partition: int, prefix: str, partitions: int = 8) -> str:
    """A key (provider or pool id) that lands in ``partition``."""
    return next(
        f"{prefix}{k}"
        for k in range(1000)
        if partition_for(f"{prefix}{k}".encode(), partitions) == partition
    )


def spec(rid: str, node: str | None = None, pool_id: str | None = None) -> ClaimSpec:
    return ClaimSpec(
        reservation_id=rid,
        consumer_id=f"c-{rid}",
        project_id="proj",
        items=() if node is None else (ClaimItem(provider_id=node, resources={"VCPU": 1}),),
        identifiers=() if pool_id is None else (IdentifierItem(pool_id=pool_id),),
    )


def claim_set(key: str, *specs: ClaimSpec) -> ClaimSet:
    return ClaimSet(event_id=next_id(), ts_ms=NOW_MS, partition_key=key, claims=specs)


def appended(log: Log, partitions: int = 8) -> int:
    return sum(log.end_offset(DEFAULT_TOPICS.events, p) for p in range(partitions))


def take(rid: str, pool_id: str, identifiers: tuple[IdentifierItem, ...], consumer: str) -> Claim:
    """A claim of identifiers only, keyed by their pool."""
    return Claim(
        event_id=next_id(),
        ts_ms=NOW_MS,
        partition_key=pool_id,
        reservation_id=rid,
        consumer_id=consumer,
        project_id="proj",
        identifiers=identifiers,
        lease_ms=60_000,
    )


def drain(writers: Sequence[PartitionWriter]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for writer in writers:
        while (batch := writer.step()) is not None:
            outcomes += [o for applied in batch.applied for o in applied.outcomes]
    return outcomes


def test_a_claim_naming_a_pool_in_another_partition_is_refused(log: Log) -> None:
    node, pool_id = key_in(1, "n"), key_in(5, "pool-")
    with_address = Claim(
        event_id="e",
        ts_ms=NOW_MS,
        partition_key=node,
        reservation_id="r1",
        consumer_id="c1",
        project_id="proj",
        items=(ClaimItem(provider_id=node, resources={"VCPU": 1}),),
        identifiers=(IdentifierItem(pool_id=pool_id, value="7"),),
    )
    with pytest.raises(PublishError, match=f"claim r1: pool {pool_id} is in partition 5"):
        publisher(log).publish([with_address])
    assert appended(log) == 0


def test_a_claim_set_must_keep_every_member_in_its_partition(log: Log) -> None:
    node, pool_id = key_in(3, "n"), key_in(3, "pool-")
    elsewhere_node, elsewhere_pool = key_in(6, "n"), key_in(0, "pool-")
    edge = publisher(log)
    good = claim_set(node, spec("r1", node, pool_id), spec("r2", pool_id=pool_id))
    assert edge.publish([good]) == [(3, 0)]
    member_elsewhere = claim_set(node, spec("r3", node), spec("r4", elsewhere_node))
    with pytest.raises(
        PublishError, match=f"claim r4: provider {elsewhere_node} is in partition 6"
    ):
        edge.publish([member_elsewhere])
    identifier_elsewhere = claim_set(pool_id, spec("r5", node, elsewhere_pool))
    with pytest.raises(PublishError, match=f"claim r5: pool {elsewhere_pool} is in partition 0"):
        edge.publish([identifier_elsewhere])
    assert appended(log) == 1


def test_releasing_a_consumer_appends_to_every_partition_in_one_append(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    append = log.append

    def counting(topic: str, records: Sequence[Append]) -> list[int]:
        calls.append(len(records))
        return append(topic, records)

    monkeypatch.setattr(log, "append", counting)
    placed = publisher(log).release_consumer("instance-7")
    assert calls == [8]
    assert [partition for partition, _ in placed] == list(range(8))
    events = [
        decode_event(log.read(DEFAULT_TOPICS.events, p, offset, 1)[0].value) for p, offset in placed
    ]
    assert all(isinstance(e, ReleaseConsumer) and e.consumer_id == "instance-7" for e in events)
    # each lives in its key's partition, as every event does
    assert [partition_for(e.partition_key.encode(), 8) for e in events] == list(range(8))
    assert len({e.correlation_id for e in events}) == 1 and events[0].correlation_id
    assert len({e.event_id for e in events}) == 8


def test_a_bad_consumer_id_is_refused_before_anything_is_appended(log: Log) -> None:
    with pytest.raises(EventDecodeError, match="consumer_id"):
        publisher(log).release_consumer("")
    assert appended(log) == 0


def test_define_pool_publishes_to_the_pools_partition(log: Log) -> None:
    edge = publisher(log)
    partition, offset = edge.define_pool("vlans", "vlan", first=100, last=199, excluded=["150"])
    assert partition == partition_for(b"vlans", 8)
    event = decode_event(log.read(DEFAULT_TOPICS.events, partition, offset, 1)[0].value)
    assert isinstance(event, PoolDefined)
    assert (event.kind, event.first, event.last, event.excluded) == (
        "vlan",
        100,
        199,
        frozenset({"150"}),
    )
    with pytest.raises(EventDecodeError, match="4094"):
        edge.define_pool("bad", "vlan", first=1, last=5000)
    with pytest.raises(EventDecodeError, match="cidr"):
        edge.define_pool("net", "ipv4")
    assert appended(log) == 1


def test_deleting_a_consumer_frees_what_it_holds_in_every_partition(tmp_path: Path) -> None:
    partitions = 4
    node = key_in(1, "n", partitions)
    pool_id = key_in(2, "addresses-", partitions)
    with App(Settings(data_dir=tmp_path, partitions=partitions)) as app:
        edge = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        edge.define_pool(pool_id, "ipv4", cidr="10.0.0.0/29")
        address = (IdentifierItem(pool_id=pool_id, value="10.0.0.5"),)
        edge.publish(
            [
                *provider(node, VCPU=4, ts=NOW_MS),
                claim("vm-cpu", node, ts=NOW_MS, consumer="vm-1", lease_ms=60_000, VCPU=4),
                take("vm-ip", pool_id, address, "vm-1"),
                take("other-ip", pool_id, (IdentifierItem(pool_id=pool_id),), "vm-2"),
                take("late-ip", pool_id, address, "vm-3"),  # taken: rejected
            ]
        )
        writers = app.writers()
        before = drain(writers)
        assert [(o.kind, o.subject) for o in before if o.kind != Kind.APPLIED] == [
            (Kind.ACCEPTED, "vm-cpu"),
            (Kind.ACCEPTED, "vm-ip"),
            (Kind.ACCEPTED, "other-ip"),
            (Kind.REJECTED, "late-ip"),
        ]
        edge.release_consumer("vm-1")
        released = drain(writers)
        assert [(o.partition, o.kind, o.subject) for o in released if o.kind != Kind.NOOP] == [
            (1, Kind.RELEASED, "vm-cpu"),
            (2, Kind.RELEASED, "vm-ip"),
        ]
        assert [o.identifiers for o in released if o.subject == "vm-ip"] == [
            ((pool_id, "10.0.0.5"),)
        ]
        # partitions where vm-1 held nothing record why nothing changed
        assert {o.partition for o in released if o.kind == Kind.NOOP} == {0, 3}
        # the address and the capacity are free again; vm-2 keeps what it has
        edge.publish(
            [
                take("again-ip", pool_id, address, "vm-4"),
                claim("again-cpu", node, ts=NOW_MS, consumer="vm-4", VCPU=4),
            ]
        )
        after = drain(writers)
        assert sorted((o.kind, o.subject) for o in after) == [
            (Kind.ACCEPTED, "again-cpu"),
            (Kind.ACCEPTED, "again-ip"),
        ]
