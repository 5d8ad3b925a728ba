"""The long-running scheduler: consumes placement requests, publishes results.

Its progress lives in the log: every result names the request's partition
and offset, so a restarted worker reads the placements topic and resumes
after the last request it answered. A request it was working on when it
stopped is scheduled again under a new generation of reservation ids; the
holds the earlier run made are abandoned and expire at their lease.
"""

from __future__ import annotations

import json
import logging

from pydantic import ValidationError

from consumers.scheduler import Scheduled, Scheduler
from consumers.topics import Topics
from ledger.log import Append, Log
from schemas.requests import PlacementRequest

log = logging.getLogger(__name__)


class SchedulerWorker:
    """Answers the requests of the given partitions of the requests topic."""

    def __init__(
        self,
        log_: Log,
        topics: Topics,
        scheduler: Scheduler,
        partitions: list[int] | None = None,
        batch_size: int = 200,
    ) -> None:
        self.log = log_
        self.topics = topics
        count = log_.partition_count(topics.requests)
        self.partitions = list(range(count)) if partitions is None else partitions
        self.batch_size = batch_size
        self.next_offsets = self._resume()
        self.scheduler = scheduler
        # a new generation per start: end of the placements topic is unique
        self.scheduler.generation = "g" + "-".join(
            str(log_.end_offset(topics.placements, p))
            for p in range(log_.partition_count(topics.placements))
        )

    def _resume(self) -> dict[int, int]:
        """Next request offset per partition, and the answers given so far, from
        the results already published."""
        self.answered: dict[str, Scheduled] = {}
        nexts = {p: 0 for p in self.partitions}
        for p in range(self.log.partition_count(self.topics.placements)):
            offset = 0
            while records := self.log.read(self.topics.placements, p, offset, 5000):
                offset = records[-1].offset + 1
                for record in records:
                    data = json.loads(record.value)
                    source = data.pop("source")
                    self.answered[data["request_id"]] = Scheduled.from_dict(data)
                    if source[0] in nexts:
                        nexts[source[0]] = max(nexts[source[0]], source[1] + 1)
        return nexts

    def step(self) -> int:
        """Answer the next batch of requests of every partition; how many."""
        answered = 0
        for partition in self.partitions:
            records = self.log.read(
                self.topics.requests, partition, self.next_offsets[partition], self.batch_size
            )
            if not records:
                continue
            valid: list[tuple[int, PlacementRequest]] = []
            results: list[tuple[int, Scheduled]] = []
            for record in records:
                try:
                    request = PlacementRequest.model_validate_json(record.value)
                except ValidationError as error:
                    reason = f"invalid request: {error.error_count()} errors: " + "; ".join(
                        f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                        for e in error.errors(include_url=False)
                    )
                    log.warning("requests %d@%d: %s", partition, record.offset, reason)
                    results.append(
                        (record.offset, Scheduled(f"?{record.offset}", False, (), 0, reason))
                    )
                    continue
                earlier = self.answered.get(request.request_id)
                if earlier is not None or any(request.request_id == r.request_id for _, r in valid):
                    # a resubmitted request gets its first answer, not a second placement
                    again = earlier or Scheduled(
                        request.request_id, False, (), 0, "duplicate request id in one batch"
                    )
                    results.append((record.offset, again))
                    continue
                valid.append((record.offset, request))
            scheduled = self.scheduler.schedule([r for _, r in valid])
            for result in scheduled:
                self.answered[result.request_id] = result
            results.extend(zip((o for o, _ in valid), scheduled, strict=True))
            results.sort(key=lambda pair: pair[0])
            self.log.append(
                self.topics.placements,
                [
                    Append(
                        partition,
                        result.request_id.encode(),
                        json.dumps({**result.to_dict(), "source": [partition, offset]}).encode(),
                    )
                    for offset, result in results
                ],
            )
            self.next_offsets[partition] = records[-1].offset + 1
            answered += len(records)
        return answered
