"""Numbering a record's outcomes, and the reason a provider is not here."""

from __future__ import annotations

from ledger.partitioner import partition_for
from projections.state import PartitionState
from schemas.outcomes import Code, Outcome, Reason, new_outcome


class Emitter:
    """Numbers the outcomes of one record."""

    __slots__ = ("event_id", "offset", "out", "state")

    def __init__(self, state: PartitionState, offset: int, event_id: str) -> None:
        self.state = state
        self.offset = offset
        self.event_id = event_id
        self.out: list[Outcome] = []

    def emit(
        self,
        kind: str,
        subject: str,
        reasons: tuple[Reason, ...] = (),
        expires_at_ms: int | None = None,
        identifiers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        out = self.out
        state = self.state
        out.append(
            new_outcome(
                (
                    state.partition,
                    self.offset,
                    len(out),
                    kind,
                    self.event_id,
                    subject,
                    state.clock_ms,
                    reasons,
                    expires_at_ms,
                    identifiers,
                )
            )
        )


def missing_provider(state: PartitionState, provider_id: str) -> Reason:
    home = partition_for(provider_id.encode(), state.partitions)
    if home != state.partition:
        return Reason(
            Code.PROVIDER_WRONG_PARTITION,
            provider_id,
            detail=f"provider belongs to partition {home}, not {state.partition}",
        )
    return Reason(Code.PROVIDER_NOT_FOUND, provider_id)


def missing_pool(state: PartitionState, pool_id: str) -> Reason:
    home = partition_for(pool_id.encode(), state.partitions)
    if home != state.partition:
        return Reason(
            Code.POOL_WRONG_PARTITION,
            pool_id,
            detail=f"pool belongs to partition {home}, not {state.partition}",
        )
    return Reason(Code.POOL_NOT_FOUND, pool_id)
