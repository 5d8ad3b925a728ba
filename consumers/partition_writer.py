"""The single writer of one partition: read, decode, apply, publish, commit.

It decides nothing itself: :func:`projections.projector.apply` does. Outcomes
are published before the view commits, so a crash in between republishes them
on restart (at-least-once on the outcomes topic, identified by partition,
offset and seq) while the view applies every record exactly once.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterable

from consumers.topics import DEFAULT_TOPICS, Topics
from ledger.log import Append, Log
from projections.batch import Batch, decide
from projections.state import PartitionState
from projections.view.loader import load_state
from projections.view.writer import ViewWriter

log = logging.getLogger(__name__)


def dead_letter_value(partition: int, offset: int, reason: str, value: bytes) -> bytes:
    """The dead-letter topic's record: where the bad record is, why, and its bytes."""
    return json.dumps(
        {
            "partition": partition,
            "offset": offset,
            "reason": reason,
            "value_b64": base64.b64encode(value).decode(),
        },
        separators=(",", ":"),
    ).encode()


class PartitionWriter:
    """Owns one partition of the events topic."""

    def __init__(
        self,
        log_: Log,
        view: ViewWriter,
        partition: int,
        partitions: int,
        topics: Topics = DEFAULT_TOPICS,
        batch_size: int = 2000,
        publish: bool = True,
        until: int | None = None,
    ) -> None:
        self.log = log_
        self.view = view
        self.partition = partition
        self.partitions = partitions
        self.topics = topics
        self.batch_size = batch_size
        self.publish = publish
        self.until = until
        """The offset to stop before (a replay as of a time); None for the log's end."""
        with view.engine.connect() as conn:
            self.state, self.next_offset = load_state(conn, partition, partitions)
        # records below next_offset are in the view; the state matches it
        self.state.touched.clear()
        self.state.reshaped.clear()

    def step(self) -> Batch | None:
        """Apply and commit the next batch of records; None at the end of the log."""
        topic = self.topics.events
        wanted = self.batch_size
        if self.until is not None:
            wanted = min(wanted, self.until - self.next_offset)
            if wanted <= 0:
                return None
        records = self.log.read(topic, self.partition, self.next_offset, wanted)
        if not records:
            return None
        state: PartitionState = self.state
        batch = decide(state, records)
        if self.publish:
            self._publish(batch)
        self.view.commit(state, batch)
        self.next_offset = batch.end
        return batch

    def _publish(self, batch: Batch) -> None:
        partition = self.partition
        outcomes = [
            Append(partition, o.subject.encode(), o.to_json())
            for applied in batch.applied
            for o in applied.outcomes
        ]
        if outcomes:
            self.log.append(self.topics.outcomes, outcomes)
        if batch.dead:
            for dead in batch.dead:
                log.warning(
                    "dead letter: partition %d offset %d: %s", partition, dead.offset, dead.reason
                )
            self.log.append(
                self.topics.dead_letters,
                [
                    Append(
                        0,
                        f"{partition}:{d.offset}".encode(),
                        dead_letter_value(partition, d.offset, d.reason, d.value),
                    )
                    for d in batch.dead
                ],
            )

    def catch_up(self) -> int:
        """Apply every record up to the partition's current end; return how many."""
        total = 0
        while (batch := self.step()) is not None:
            total += batch.end - batch.start
        return total


def step_all(writers: Iterable[PartitionWriter]) -> bool:
    """One batch from every writer that has records waiting; whether any had.
    Every writer gets its turn each round, so no partition waits on another."""
    busy = False
    for writer in writers:
        busy = writer.step() is not None or busy
    return busy


def catch_up_all(writers: Iterable[PartitionWriter]) -> int:
    """Every writer up to its partition's current end; how many records that took."""
    return sum(writer.catch_up() for writer in writers)
