"""The publishing edge: validate, check the producer clock, route, append.

Everything refused here never reaches the log: the error says what to fix.
It sits in the ledger, below every worker that publishes (the scheduler,
the coordinator, the reaper, the balancer): it needs only the log, its
partitioner and the event schemas.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ledger.log import Append, Log
from ledger.partitioner import partition_for
from ledger.topics import DEFAULT_TOPICS, Topics
from schemas.codec import encode_event, validate_event
from schemas.events import AggregateDefined, Claim, ClaimSet, ClaimSpec, Event, Tick
from schemas.requests import BatchRequest, PlacementRequest, request_key

DEFAULT_MAX_SKEW_MS = 5_000


class PublishError(ValueError):
    """An event refused at the edge; nothing was appended."""


class Encoded(NamedTuple):
    """An event encoded for the log (``value``), with what the edge checks
    and routes it by."""

    event_id: str
    ts_ms: int
    partition_key: str
    value: bytes


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@functools.cache
def partition_keys(partitions: int) -> tuple[str, ...]:
    """One partition key per partition that hashes to it (``partition-0``,
    ``partition-1``, ... searched in order, so every edge picks the same ones).

    An event the edge appends to every partition on purpose (a consumer's
    release) still lives in its key's partition, as every other event does.
    """
    keys: dict[int, str] = {}
    n = 0
    while len(keys) < partitions:
        key = f"partition-{n}"
        keys.setdefault(partition_for(key.encode(), partitions), key)
        n += 1
    return tuple(keys[p] for p in range(partitions))


class Publisher:
    """Appends events to the events topic, each in its key's partition."""

    def __init__(
        self,
        log: Log,
        topics: Topics = DEFAULT_TOPICS,
        clock_ms: Callable[[], int] = wall_clock_ms,
        max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
        new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        """``new_id`` names the events the edge makes itself (ticks, a
        consumer's releases, aggregate and pool definitions); a seeded
        simulation gives one that repeats run after run."""
        self.log = log
        self.new_id = new_id
        self.topics = topics
        self.clock_ms = clock_ms
        self.max_skew_ms = max_skew_ms
        self.partitions = log.partition_count(topics.events)

    def partition_of(self, key: str) -> int:
        return partition_for(key.encode(), self.partitions)

    def route(self, event: Event) -> int:
        """The partition an event belongs in. Whatever a claim, or any member of
        a claim set, names (providers, identifier pools, a server group) must live there too: the
        partition's writer decides alone, so it can only give out what it owns."""
        partition = self.partition_of(event.partition_key)
        if isinstance(event, AggregateDefined):
            raise PublishError(
                f"event {event.event_id}: an aggregate is defined in every partition, not "
                "one: define_aggregate (berth aggregate create|set, PUT /v1/aggregates/ID) "
                "appends a copy to each"
            )
        if isinstance(event, Claim):
            self._refuse_elsewhere(event, f"claim {event.reservation_id}", event, partition)
        elif isinstance(event, ClaimSet):
            for member in event.claims:
                what = f"claim_set {event.event_id}: claim {member.reservation_id}"
                self._refuse_elsewhere(member, what, event, partition)
        return partition

    def _refuse_elsewhere(self, spec: ClaimSpec, what: str, event: Event, partition: int) -> None:
        named = [("provider", item.provider_id) for item in spec.items]
        named += [("pool", item.pool_id) for item in spec.identifiers]
        if spec.server_group is not None:
            named.append(("server group", spec.server_group))
        for noun, name in named:
            home = self.partition_of(name)
            if home != partition:
                raise PublishError(
                    f"{what}: {noun} {name} is in partition {home}, partition_key "
                    f"{event.partition_key!r} in {partition}; a claim spanning partitions "
                    "is a transaction (one claim_set per partition)"
                )

    def publish(self, events: Sequence[Event | Mapping[str, Any]]) -> list[tuple[int, int]]:
        """Validate and append ``events`` durably; their (partition, offset)s, in order."""
        now = self.clock_ms()
        encoded = []
        for raw in events:
            event = raw if not isinstance(raw, Mapping) else validate_event(dict(raw))
            self._check_clock(event.event_id, event.ts_ms, now)
            encoded.append(self.encoded(event))
        return self._append(encoded)

    def encoded(self, event: Event) -> Encoded:
        """``event`` as :meth:`publish_encoded` takes it, routed (a
        :class:`PublishError` if what it names lives in other partitions)."""
        self.route(event)
        return Encoded(event.event_id, event.ts_ms, event.partition_key, encode_event(event))

    def publish_encoded(self, events: Sequence[Encoded]) -> list[tuple[int, int]]:
        """Append events already encoded (each ``encode_event`` of a valid
        event whose partition key's partition holds everything it names:
        :meth:`encoded`'s, or a claim a scheduler wrote out itself for one
        provider, keyed by it) durably, each in its key's partition, after
        the clock check; their (partition, offset)s, in order."""
        now = self.clock_ms()
        for event in events:
            self._check_clock(event.event_id, event.ts_ms, now)
        return self._append(events)

    def _check_clock(self, event_id: str, ts_ms: int, now: int) -> None:
        if ts_ms > now + self.max_skew_ms:
            raise PublishError(
                f"event {event_id}: ts_ms {ts_ms} is "
                f"{ts_ms - now} ms ahead of this edge's clock "
                f"(at most {self.max_skew_ms} allowed); fix the producer's clock"
            )

    def _append(self, events: Sequence[Encoded]) -> list[tuple[int, int]]:
        appends = [
            Append(self.partition_of(e.partition_key), e.partition_key.encode(), e.value)
            for e in events
        ]
        offsets = self.log.append(self.topics.events, appends)
        return [(a.partition, offset) for a, offset in zip(appends, offsets, strict=True)]

    def submit(self, requests: Sequence[PlacementRequest | BatchRequest]) -> list[tuple[int, int]]:
        """Append placement requests and batches for the scheduler workers, keyed by id."""
        appends = []
        for r in requests:
            key = request_key(r)
            if isinstance(r, BatchRequest):
                # the type tag is a default, but the worker tells batches by it
                data = {**r.model_dump(mode="json", exclude_defaults=True), "type": r.type}
                value = json.dumps(data, separators=(",", ":"))
            else:
                value = r.model_dump_json(exclude_defaults=True)
            appends.append(Append(self.partition_of(key), key.encode(), value.encode()))
        offsets = self.log.append(self.topics.requests, appends)
        return [(a.partition, offset) for a, offset in zip(appends, offsets, strict=True)]

    def tick(self, partitions: Sequence[int] | None = None) -> None:
        """Append a tick with the edge's clock to each partition (all by default),
        so quiet partitions expire their overdue holds."""
        now = self.clock_ms()
        targets = range(self.partitions) if partitions is None else partitions
        keys = partition_keys(self.partitions)
        appends = []
        for partition in targets:
            key = keys[partition]
            tick = Tick(event_id=f"tick-{self.new_id()}", ts_ms=now, partition_key=key)
            appends.append(Append(partition, key.encode(), encode_event(tick)))
        self.log.append(self.topics.events, appends)

    def release_consumer(self, consumer_id: str) -> list[tuple[int, int]]:
        """Release everything ``consumer_id`` holds, in every partition, in one
        append (deleting an instance): a release_consumer per partition, each
        keyed so that it hashes to its partition. Where the consumer holds
        nothing the writer records a no-op. Returns the (partition, offset)s."""
        now = self.clock_ms()
        request = f"release-consumer-{self.new_id()}"
        appends = []
        for partition, key in enumerate(partition_keys(self.partitions)):
            event = validate_event(
                {
                    "type": "release_consumer",
                    "event_id": f"{request}-{partition}",
                    "ts_ms": now,
                    "partition_key": key,
                    "consumer_id": consumer_id,
                    # one id for the whole deletion, to find its records again
                    "correlation_id": request,
                }
            )
            appends.append(Append(partition, key.encode(), encode_event(event)))
        offsets = self.log.append(self.topics.events, appends)
        return [(a.partition, offset) for a, offset in zip(appends, offsets, strict=True)]

    def define_aggregate(
        self, aggregate_id: str, metadata: Mapping[str, str], event_id: str | None = None
    ) -> list[tuple[int, int]]:
        """Define an aggregate, or its metadata anew, in one append: an
        ``aggregate_defined`` per partition, each keyed to hash to it, so
        every writer applies the aggregate's allocation ratios to its own
        members in its log order. ``event_id`` (default: a new one) names
        the definition; copy ``p`` is ``EVENT_ID-p``. The (partition,
        offset)s; :class:`EventDecodeError` says what is wrong with it."""
        now = self.clock_ms()
        base = event_id or f"aggregate-{self.new_id()}"
        appends = []
        for partition, key in enumerate(partition_keys(self.partitions)):
            event = validate_event(
                {
                    "type": "aggregate_defined",
                    "event_id": f"{base}-{partition}",
                    "ts_ms": now,
                    "partition_key": key,
                    "aggregate_id": aggregate_id,
                    "metadata": dict(metadata),
                    "correlation_id": base,
                }
            )
            appends.append(Append(partition, key.encode(), encode_event(event)))
        offsets = self.log.append(self.topics.events, appends)
        return [(a.partition, offset) for a, offset in zip(appends, offsets, strict=True)]

    def define_pool(
        self,
        pool_id: str,
        kind: str,
        *,
        cidr: str | None = None,
        first: int | None = None,
        last: int | None = None,
        members: Sequence[str] = (),
        excluded: Sequence[str] = (),
    ) -> tuple[int, int]:
        """Define (or redefine, while none of it is taken) a pool of identifiers
        in its key's partition; :class:`EventDecodeError` says what is wrong
        with a definition. Returns its (partition, offset)."""
        data: dict[str, Any] = {
            "type": "pool_defined",
            "event_id": f"pool-{self.new_id()}",
            "ts_ms": self.clock_ms(),
            "partition_key": pool_id,
            "pool_id": pool_id,
            "kind": kind,
            "members": list(members),
            "excluded": list(excluded),
        }
        optional = {"cidr": cidr, "first": first, "last": last}
        data.update({name: value for name, value in optional.items() if value is not None})
        return self.publish([data])[0]
