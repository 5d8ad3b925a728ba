"""The publishing edge: validate, check the producer clock, route, append.

Everything refused here never reaches the log: the error says what to fix.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from consumers.topics import DEFAULT_TOPICS, Topics
from ledger.log import Append, Log
from ledger.partitioner import partition_for
from schemas.codec import encode_event, validate_event
from schemas.events import Claim, Event, Tick
from schemas.requests import PlacementRequest

DEFAULT_MAX_SKEW_MS = 5_000


class PublishError(ValueError):
    """An event refused at the edge; nothing was appended."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Publisher:
    """Appends events to the events topic, each in its key's partition."""

    def __init__(
        self,
        log: Log,
        topics: Topics = DEFAULT_TOPICS,
        clock_ms: Callable[[], int] = wall_clock_ms,
        max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
    ) -> None:
        self.log = log
        self.topics = topics
        self.clock_ms = clock_ms
        self.max_skew_ms = max_skew_ms
        self.partitions = log.partition_count(topics.events)

    def partition_of(self, key: str) -> int:
        return partition_for(key.encode(), self.partitions)

    def route(self, event: Event) -> int:
        """The partition an event belongs in; a claim's items must share it."""
        partition = self.partition_of(event.partition_key)
        if isinstance(event, Claim):
            for item in event.items:
                home = self.partition_of(item.provider_id)
                if home != partition:
                    raise PublishError(
                        f"claim {event.reservation_id}: provider {item.provider_id} is in "
                        f"partition {home}, partition_key {event.partition_key!r} in "
                        f"{partition}; a claim spanning partitions is a transaction"
                    )
        return partition

    def publish(self, events: Sequence[Event | Mapping[str, Any]]) -> list[tuple[int, int]]:
        """Validate and append ``events`` durably; their (partition, offset)s, in order."""
        now = self.clock_ms()
        appends = []
        for raw in events:
            event = raw if not isinstance(raw, Mapping) else validate_event(dict(raw))
            if event.ts_ms > now + self.max_skew_ms:
                raise PublishError(
                    f"event {event.event_id}: ts_ms {event.ts_ms} is "
                    f"{event.ts_ms - now} ms ahead of this edge's clock "
                    f"(at most {self.max_skew_ms} allowed); fix the producer's clock"
                )
            partition = self.route(event)
            appends.append(Append(partition, event.partition_key.encode(), encode_event(event)))
        offsets = self.log.append(self.topics.events, appends)
        return [(a.partition, offset) for a, offset in zip(appends, offsets, strict=True)]

    def submit(self, requests: Sequence[PlacementRequest]) -> list[tuple[int, int]]:
        """Append placement requests for the scheduler workers, keyed by id."""
        appends = [
            Append(
                self.partition_of(r.request_id),
                r.request_id.encode(),
                r.model_dump_json(exclude_defaults=True).encode(),
            )
            for r in requests
        ]
        offsets = self.log.append(self.topics.requests, appends)
        return [(a.partition, offset) for a, offset in zip(appends, offsets, strict=True)]

    def tick(self, partitions: Sequence[int] | None = None) -> None:
        """Append a tick with the edge's clock to each partition (all by default),
        so quiet partitions expire their overdue holds."""
        now = self.clock_ms()
        targets = range(self.partitions) if partitions is None else partitions
        appends = []
        for partition in targets:
            tick = Tick(event_id=f"tick-{uuid.uuid4()}", ts_ms=now, partition_key=f"{partition}")
            appends.append(Append(partition, b"", encode_event(tick)))
        self.log.append(self.topics.events, appends)
