"""The client's side of the log: publish events and requests (the
publishing edge, :mod:`ledger.publisher`, re-exported here for the CLI, the
API and callers of Berth), then wait for the answers and decisions on them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ledger.log import Log, Tail
from ledger.publisher import (
    DEFAULT_MAX_SKEW_MS,
    Publisher,
    PublishError,
    wall_clock_ms,
)
from ledger.topics import DEFAULT_TOPICS, Topics
from schemas.outcomes import Outcome

__all__ = [
    "DEFAULT_MAX_SKEW_MS",
    "Answers",
    "Decisions",
    "PublishError",
    "Publisher",
    "wall_clock_ms",
]


def _wait_for(
    ids: Sequence[str],
    found: Mapping[str, object],
    poll: Callable[[], list[str]],
    timeout_s: float,
    arrival: Callable[[float], object],
) -> list[str]:
    """Poll until every id is in ``found`` or ``timeout_s`` has passed; the
    ids still missing. ``poll`` returns the ids it found; between polls,
    ``arrival`` blocks until the next records arrive (or the time it is
    given passes), so an answer is read as soon as it is durable."""
    pending = set(ids) - found.keys()
    deadline = time.monotonic() + timeout_s
    while pending:
        pending.difference_update(poll())
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            break
        arrival(left)
    return sorted(pending)


class Answers:
    """Follows the placements topic for the answers to requests submitted
    after it was created: make it first, then submit, then :meth:`wait`.

    The answer to a request (or a batch) is the scheduler worker's final
    one: ``committed``, ``failed`` or placed; a queued batch's ``queued``
    answer is not final, its answer comes once it is placed or times out.
    """

    def __init__(self, log: Log, topics: Topics = DEFAULT_TOPICS) -> None:
        self._tail = Tail(log, topics.placements)
        self.found: dict[str, dict[str, Any]] = {}
        """Request or batch id -> its final answer, of those seen so far."""
        self._told: set[str] = set()

    def poll(self, partitions: Collection[int] | None = None) -> list[str]:
        """Read the answers published since the last poll (to the given
        ``partitions`` of the placements topic, if given); the ids answered."""
        answered = []
        for record in self._tail.records(partitions):
            answer = json.loads(record.value)
            if answer.get("status") == "queued":
                continue
            answer.pop("source", None)
            self.found[answer["request_id"]] = answer
            answered.append(answer["request_id"])
        return answered

    def wait(
        self,
        ids: Sequence[str],
        timeout_s: float,
        on_answer: Callable[[dict[str, Any]], object] | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[str]:
        """Wait until every id in ``ids`` has its answer, or ``timeout_s``
        has passed; ``on_answer`` is told of each of theirs once, as it
        comes. Returns the ids still unanswered (empty when all were).

        A request's answer goes to the placements partition of the request's
        own number: given the ``partitions`` :meth:`Publisher.submit`
        returned, only those are read."""
        wanted = set(ids)

        def poll() -> list[str]:
            answered = self.poll(partitions)
            self._tell(wanted, on_answer)
            return answered

        self._tell(wanted, on_answer)
        return _wait_for(ids, self.found, poll, timeout_s, self._tail.arrival(partitions))

    def _tell(self, wanted: set[str], on_answer: Callable[[dict[str, Any]], object] | None) -> None:
        for rid in sorted(wanted & self.found.keys() - self._told):
            self._told.add(rid)
            if on_answer is not None:
                on_answer(self.found[rid])


class Decisions:
    """Follows the outcomes topic for the writers' decisions on events
    published after it was created, by event id: make it first, then
    publish, then :meth:`wait`."""

    def __init__(self, log: Log, topics: Topics = DEFAULT_TOPICS) -> None:
        self._tail = Tail(log, topics.outcomes)
        self.found: dict[str, list[Outcome]] = {}
        """Event id -> the outcomes of its record (a record's outcomes are
        published together)."""

    def poll(
        self, partitions: Collection[int] | None = None, wanted: Collection[str] | None = None
    ) -> list[str]:
        """Read the outcomes published since the last poll (to the given
        ``partitions``, if given), keeping those of the ``wanted`` events
        (all, if not given); the event ids decided."""
        decided: list[str] = []
        for record in self._tail.records(partitions):
            outcome = Outcome.from_json(record.value)
            if wanted is None or outcome.event_id in wanted:
                self.found.setdefault(outcome.event_id, []).append(outcome)
                decided.append(outcome.event_id)
        return decided

    def wait(
        self,
        event_ids: Sequence[str],
        timeout_s: float,
        partitions: Collection[int] | None = None,
    ) -> list[str]:
        """Wait until every event has its decision, or ``timeout_s`` has
        passed; the event ids still undecided. An event's outcomes go to the
        outcomes partition of its own number: given the ``partitions``
        :meth:`Publisher.publish` returned, only those are read."""
        wanted = frozenset(event_ids)
        return _wait_for(
            event_ids,
            self.found,
            lambda: self.poll(partitions, wanted),
            timeout_s,
            self._tail.arrival(partitions),
        )
