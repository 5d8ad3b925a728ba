"""The single-writer projector: ``apply(state, offset, event) -> outcomes``.

Pure and deterministic: time is the partition clock (the largest producer
timestamp seen in the partition), there is no randomness and no I/O, so a
replay of the same log prefix reproduces every decision. Rejections are
values (:class:`schemas.outcomes.Reason`), never exceptions.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from projections.aggregates import aggregate_defined, member_event
from projections.claims import abort_pending, claim, claim_set, claim_shapes, fingerprint
from projections.emitter import Emitter
from projections.holds import finish, named
from projections.placement.decide import (
    aggregates_set,
    allocations_set,
    inventories_set,
    name_defined,
    provider_deleted,
    provider_saved,
    traits_set,
)
from projections.placement.reshape import reshaped
from projections.pool_events import pool_defined
from projections.projects import refused
from projections.providers import described, metrics_reported, provider_event
from projections.server_groups import group_created, group_deleted
from projections.state import CONSUMED, HELD, PartitionState, Reservation
from schemas.events import (
    AggregateDefined,
    AggregateMemberAdded,
    AggregateMemberRemoved,
    AggregatesSet,
    Claim,
    ClaimSet,
    Consume,
    Event,
    InventorySet,
    MetricsReported,
    PlacementAggregatesSet,
    PlacementAllocationsSet,
    PlacementInventoriesSet,
    PlacementNameDefined,
    PlacementProviderDeleted,
    PlacementProviderSaved,
    PlacementReshaped,
    PlacementTraitsSet,
    PoolDefined,
    ProviderDescribed,
    ProviderRegistered,
    ProviderRetired,
    ProviderStateSet,
    Release,
    ReleaseConsumer,
    Renew,
    ServerGroupCreated,
    ServerGroupDeleted,
    Tick,
    TraitsSet,
    TransactionDecision,
)
from schemas.outcomes import Code, Kind, Outcome, Reason

__all__ = ["apply", "claim_shapes", "fingerprint"]


def apply(state: PartitionState, offset: int, event: Event) -> list[Outcome]:
    """Decide one record of this partition; mutate ``state``; return the outcomes."""
    f = event.__dict__  # one lookup a field: pydantic's attribute hook costs two
    clock = state.clock_ms
    if f["ts_ms"] > clock:
        clock = state.clock_ms = f["ts_ms"]
    out = Emitter(state, offset, f["event_id"])
    expiry = state.expiry
    if expiry and expiry[0][0] < clock:
        _expire_due(state, out)
    acting = f["acting_project"]
    if acting is None or not refused(state, event, acting, out):
        _HANDLERS[type(event)](state, event, out)
    return out.out


def _expire_due(state: PartitionState, out: Emitter) -> None:
    heap = state.expiry
    clock = state.clock_ms
    reservations = state.reservations
    while heap and heap[0][0] < clock:
        expires_at, rid = heapq.heappop(heap)
        reservation = reservations.get(rid)
        if (
            reservation is None
            or reservation.status != HELD
            or reservation.expires_at_ms != expires_at
        ):
            continue  # consumed, released or renewed since this entry was pushed
        given = named(reservation) if reservation.identifiers else ()
        finish(state, reservation)
        out.emit(Kind.EXPIRED, rid, expires_at_ms=expires_at, identifiers=given)


# The no-op reasons, made once: a Reason is a NamedTuple, whose __new__ runs
# interpreted, and a consume or release of a reservation already expired is
# common (a fifth of the records of the replay benchmark)
_ALREADY_FINAL = (Reason(Code.ALREADY_FINAL),)
_UNKNOWN = (Reason(Code.UNKNOWN_RESERVATION),)
_ALREADY_CONSUMED = (Reason(Code.ALREADY_CONSUMED),)
_NOT_HELD = (Reason(Code.NOT_HELD),)
_NO_PENDING_CLAIMS = (Reason(Code.NO_PENDING_CLAIMS),)


def _lookup(state: PartitionState, rid: str, out: Emitter) -> Reservation | None:
    reservation = state.reservations.get(rid)
    if reservation is None:
        if rid in state.finished:
            out.emit(Kind.NOOP, rid, _ALREADY_FINAL)
        else:
            out.emit(Kind.NOOP, rid, _UNKNOWN)
    return reservation


_PENDING = (Reason(Code.NOT_HELD, detail="pending its transaction's decision"),)


def _consume(state: PartitionState, event: Consume, out: Emitter) -> None:
    reservation = _lookup(state, event.reservation_id, out)
    if reservation is None:
        return
    if reservation.status == CONSUMED:
        out.emit(Kind.NOOP, reservation.reservation_id, _ALREADY_CONSUMED)
        return
    if reservation.transaction is not None:
        out.emit(Kind.NOOP, reservation.reservation_id, _PENDING)
        return
    for provider, amounts in reservation.items:
        state.touched.add(provider.provider_id)
        index = provider.layout.index
        for rc, amount in amounts:
            i = index[rc]
            provider.held[i] -= amount
            provider.consumed[i] += amount
    reservation.status = CONSUMED
    out.emit(Kind.CONSUMED, reservation.reservation_id)


def _release(state: PartitionState, event: Release, out: Emitter) -> None:
    reservation = _lookup(state, event.reservation_id, out)
    if reservation is None:
        return
    given = named(reservation) if reservation.identifiers else ()
    finish(state, reservation)
    out.emit(Kind.RELEASED, reservation.reservation_id, identifiers=given)


def _release_consumer(state: PartitionState, event: ReleaseConsumer, out: Emitter) -> None:
    """Release everything the consumer holds here, in reservation id order."""
    owned = sorted(
        rid for rid, r in state.reservations.items() if r.consumer_id == event.consumer_id
    )
    if not owned:
        out.emit(
            Kind.NOOP,
            event.consumer_id,
            (Reason(Code.UNKNOWN_RESERVATION, detail="the consumer holds nothing here"),),
        )
        return
    for rid in owned:
        reservation = state.reservations[rid]
        given = named(reservation) if reservation.identifiers else ()
        finish(state, reservation)
        out.emit(Kind.RELEASED, rid, identifiers=given)


def _renew(state: PartitionState, event: Renew, out: Emitter) -> None:
    reservation = _lookup(state, event.reservation_id, out)
    if reservation is None:
        return
    if reservation.status != HELD:
        out.emit(Kind.NOOP, reservation.reservation_id, _NOT_HELD)
        return
    if reservation.transaction is not None:
        out.emit(Kind.NOOP, reservation.reservation_id, _PENDING)
        return
    expires_at = max(reservation.expires_at_ms, state.clock_ms + event.lease_ms)
    if expires_at != reservation.expires_at_ms:
        reservation.expires_at_ms = expires_at
        heapq.heappush(state.expiry, (expires_at, reservation.reservation_id))
    out.emit(Kind.RENEWED, reservation.reservation_id, expires_at_ms=expires_at)


def _decide_transaction(state: PartitionState, event: TransactionDecision, out: Emitter) -> None:
    """Commit the transaction's pending holds here into ordinary holds (their
    leases start now), or give them back."""
    tid = event.transaction_id
    pending = state.transactions.get(tid)
    if pending is None:
        # decided already, or every hold of it here expired or was wounded
        out.emit(Kind.NOOP, tid, _NO_PENDING_CLAIMS)
        return
    if not event.commit:
        abort_pending(state, tid, out)
        return
    del state.transactions[tid]
    for rid in pending.reservation_ids:
        reservation = state.reservations[rid]
        reservation.transaction = None
        expires_at = state.clock_ms + reservation.lease_ms
        reservation.expires_at_ms = expires_at
        heapq.heappush(state.expiry, (expires_at, rid))
        out.emit(Kind.COMMITTED, rid, expires_at_ms=expires_at)


def _tick(state: PartitionState, event: Tick, out: Emitter) -> None:
    """Nothing but the clock, which ``apply`` has already advanced."""


_HANDLERS: dict[type[Any], Callable[[PartitionState, Any, Emitter], None]] = {
    Claim: claim,
    ClaimSet: claim_set,
    TransactionDecision: _decide_transaction,
    Consume: _consume,
    Release: _release,
    ReleaseConsumer: _release_consumer,
    Renew: _renew,
    Tick: _tick,
    PoolDefined: pool_defined,
    ProviderRegistered: provider_event,
    ProviderRetired: provider_event,
    InventorySet: provider_event,
    ProviderStateSet: provider_event,
    TraitsSet: provider_event,
    AggregatesSet: provider_event,
    ProviderDescribed: described,
    MetricsReported: metrics_reported,
    AggregateDefined: aggregate_defined,
    AggregateMemberAdded: member_event,
    AggregateMemberRemoved: member_event,
    PlacementProviderSaved: provider_saved,
    PlacementProviderDeleted: provider_deleted,
    PlacementInventoriesSet: inventories_set,
    PlacementTraitsSet: traits_set,
    PlacementAggregatesSet: aggregates_set,
    PlacementNameDefined: name_defined,
    PlacementAllocationsSet: allocations_set,
    PlacementReshaped: reshaped,
    ServerGroupCreated: group_created,
    ServerGroupDeleted: group_deleted,
}
