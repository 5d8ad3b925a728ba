"""Projects that cannot touch each other.

An event may carry the project that published it (``acting_project``; the
HTTP API stamps it on every event a project's credentials publish). Such an
event may claim only for that project, consume, renew or release only
that project's reservations, and create or delete only that project's
server groups; anything else it names is rejected here, in
the partition's writer, with ``PROJECT_MISMATCH``. Deciding it in the core
rather than at an edge means no publisher gets around it, whichever log it
writes to, and a replay decides it again the same way. An event without an
acting project is the system's (a scheduler, the coordinator, an operator):
it is not checked.
"""

from __future__ import annotations

from projections.emitter import Emitter
from projections.state import PartitionState
from schemas.events import (
    Claim,
    ClaimSet,
    Consume,
    Event,
    PoolDefined,
    ProviderEvent,
    Release,
    ReleaseConsumer,
    Renew,
    ServerGroupCreated,
    ServerGroupDeleted,
    TransactionDecision,
)
from schemas.outcomes import Code, Kind, Reason

_NOT_ITS_OWN = (Reason(Code.PROJECT_MISMATCH, detail="the reservation is another project's"),)


def refused(state: PartitionState, event: Event, acting: str, out: Emitter) -> bool:
    """Whether ``event``, published by project ``acting``, reaches beyond
    that project's own; if it does, its rejection has been emitted."""
    if isinstance(event, Claim):
        if event.project_id == acting:
            return False
        _reject(out, event.reservation_id, f"the claim is for project {event.project_id}")
        return True
    if isinstance(event, ClaimSet):
        if all(spec.project_id == acting for spec in event.claims):
            return False
        for spec in event.claims:
            _reject(out, spec.reservation_id, "the claim set holds another project's claim")
        return True
    if isinstance(event, (Consume, Release, Renew)):
        reservation = state.reservations.get(event.reservation_id)
        if reservation is None or reservation.project_id == acting:
            return False  # not here (a no-op, said as ever), or its own
        out.emit(Kind.REJECTED, event.reservation_id, _NOT_ITS_OWN)
        return True
    if isinstance(event, ReleaseConsumer):
        consumer = event.consumer_id
        if all(
            r.project_id == acting for r in state.reservations.values() if r.consumer_id == consumer
        ):
            return False
        _reject(out, consumer, "the consumer holds another project's reservations")
        return True
    if isinstance(event, ServerGroupCreated):
        if event.project_id == acting:
            return False  # a project makes its own groups, as in Nova
        _reject(out, event.group_id, f"the server group is for project {event.project_id}")
        return True
    if isinstance(event, ServerGroupDeleted):
        group = state.groups.get(event.group_id)
        if group is None or group.project_id == acting:
            return False  # not here (a no-op, said as ever), or its own
        _reject(out, event.group_id, "the server group is another project's")
        return True
    _reject(out, _subject(event), f"a project may not publish {event.type}")
    return True


def _subject(event: Event) -> str:
    if isinstance(event, ProviderEvent):
        return event.provider_id
    if isinstance(event, PoolDefined):
        return event.pool_id
    if isinstance(event, TransactionDecision):
        return event.transaction_id
    return event.partition_key


def _reject(out: Emitter, subject: str, detail: str) -> None:
    out.emit(Kind.REJECTED, subject, (Reason(Code.PROJECT_MISMATCH, detail=detail),))
