"""A run of one partition's records, decoded and decided: what a writer hands
to the view, and what it publishes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ledger.log import Record
from projections.projector import apply
from projections.state import PartitionState
from schemas.codec import EventDecodeError, decode_event
from schemas.events import Event
from schemas.outcomes import Outcome

# Applied and DeadLetter are made once per record: they are plain classes with
# their own __init__, which mypyc compiles (a dataclass's generated __init__
# stays interpreted and costs several times more).


class Applied:
    """One record of the log that decoded, and what the projector decided."""

    __slots__ = ("event", "offset", "outcomes")

    def __init__(self, offset: int, event: Event, outcomes: list[Outcome]) -> None:
        self.offset = offset
        self.event = event
        self.outcomes = outcomes

    def __repr__(self) -> str:
        return f"Applied(offset={self.offset}, event={self.event!r}, outcomes={self.outcomes!r})"


class DeadLetter:
    """One record of the log that did not decode, and why."""

    __slots__ = ("offset", "reason", "value")

    def __init__(self, offset: int, reason: str, value: bytes) -> None:
        self.offset = offset
        self.reason = reason
        self.value = value

    def __repr__(self) -> str:
        return f"DeadLetter(offset={self.offset}, reason={self.reason!r}, value={self.value!r})"


@dataclass(slots=True)
class Batch:
    """Consecutive records ``[start, end)`` of one partition, all accounted for."""

    partition: int
    start: int
    end: int
    applied: list[Applied] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)


def decide(state: PartitionState, records: Sequence[Record]) -> Batch:
    """Decode and apply consecutive ``records`` of ``state``'s partition, in
    order; a record that does not decode is a dead letter, and the rest go on.
    Compiled with the projector, since a replay runs this loop a million times."""
    batch = Batch(state.partition, records[0].offset, records[-1].offset + 1)
    applied, dead = batch.applied, batch.dead
    for record in records:
        offset, value = record.offset, record.value
        try:
            event = decode_event(value)
        except EventDecodeError as error:
            dead.append(DeadLetter(offset, error.reason, value))
            continue
        applied.append(Applied(offset, event, apply(state, offset, event)))
    return batch
