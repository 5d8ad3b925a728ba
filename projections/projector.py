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

from projections.emitter import Emitter, missing_provider
from projections.providers import provider_event
from projections.state import (
    CONSUMED,
    HELD,
    Amounts,
    PartitionState,
    ProviderState,
    Reservation,
)
from schemas.events import (
    AggregatesSet,
    Claim,
    Consume,
    Event,
    InventorySet,
    ProviderRegistered,
    ProviderRetired,
    ProviderStateSet,
    Release,
    Renew,
    Tick,
    TraitsSet,
)
from schemas.outcomes import Code, Kind, Outcome, Reason

NO_TAGS: frozenset[str] = frozenset()


def apply(state: PartitionState, offset: int, event: Event) -> list[Outcome]:
    """Decide one record of this partition; mutate ``state``; return the outcomes."""
    if event.ts_ms > state.clock_ms:
        state.clock_ms = event.ts_ms
    out = Emitter(state, offset, event.event_id)
    if state.expiry and state.expiry[0][0] < state.clock_ms:
        _expire_due(state, out)
    _HANDLERS[type(event)](state, event, out)
    return out.out


# --- reservations ----------------------------------------------------------


def fingerprint(claim: Claim, shapes: tuple[tuple[str, Amounts], ...]) -> int:
    """A digest of a claim's content, to tell a duplicate from a reused id.

    It is compared only within one process (a restarted writer recomputes it
    from the view), so Python's per-process string hashing is good enough.
    """
    return hash(
        (
            claim.consumer_id,
            claim.project_id,
            shapes,
            claim.lease_ms,
            claim.anti_affinity_group,
            claim.tags,
            claim.require_with_tags,
            claim.require_without_tags,
        )
    )


def claim_shapes(state: PartitionState, claim: Claim) -> tuple[tuple[str, Amounts], ...]:
    """Each item's provider id and interned amounts."""
    items = claim.items
    shape = state.shape
    if len(items) == 1:
        item = items[0]
        return ((item.provider_id, shape(item.resources)),)
    return tuple((item.provider_id, shape(item.resources)) for item in items)


def _claim(state: PartitionState, claim: Claim, out: Emitter) -> None:
    rid = claim.reservation_id
    shapes = claim_shapes(state, claim)
    existing = state.reservations.get(rid)
    known = existing.fingerprint if existing is not None else state.finished.get(rid)
    if known is not None:
        if known == fingerprint(claim, shapes):
            out.emit(Kind.NOOP, rid, (Reason(Code.DUPLICATE, detail="claim already decided"),))
        else:
            reason = Reason(
                Code.RESERVATION_ID_CONFLICT,
                detail="reservation id already used by a claim with other content",
            )
            out.emit(Kind.REJECTED, rid, (reason,))
        return

    providers = state.providers
    group = claim.anti_affinity_group
    constrained = group is not None or claim.require_with_tags or claim.require_without_tags
    items: list[tuple[ProviderState, Amounts]] = []
    reasons: list[Reason] = []
    for provider_id, amounts in shapes:
        provider = providers.get(provider_id)
        if provider is None:
            reasons.append(missing_provider(state, provider_id))
            continue
        if provider.state != "enabled":
            reasons.append(Reason(Code.PROVIDER_NOT_ENABLED, provider_id, detail=provider.state))
            continue
        if not _misfits(provider, amounts, reasons) and constrained:
            _check_tags(provider, claim, reasons)
        items.append((provider, amounts))
    if reasons:
        out.emit(Kind.REJECTED, rid, tuple(reasons))
        return

    tags = claim.tags or NO_TAGS
    touched = state.touched
    for provider, amounts in items:
        touched.add(provider.provider_id)
        provider.take(amounts, provider.held, tags, group)
    expires_at = state.clock_ms + claim.lease_ms
    state.reservations[rid] = Reservation(
        rid, tuple(items), HELD, expires_at, fingerprint(claim, shapes), group, tags
    )
    heapq.heappush(state.expiry, (expires_at, rid))
    emitted = out.out
    emitted.append(
        Outcome(
            state.partition,
            out.offset,
            len(emitted),
            Kind.ACCEPTED,
            out.event_id,
            rid,
            state.clock_ms,
            (),
            expires_at,
        )
    )


def _misfits(provider: ProviderState, amounts: Amounts, reasons: list[Reason]) -> bool:
    """Append, per resource class, the first check that fails; report whether
    any failed (True means the amounts do NOT all fit)."""
    layout = provider.layout
    index = layout.index
    held = provider.held
    consumed = provider.consumed
    failed = False
    for rc, amount in amounts:
        i = index.get(rc)
        if i is None:
            reasons.append(
                Reason(Code.RESOURCE_CLASS_NOT_PROVIDED, provider.provider_id, rc, amount, 0)
            )
            failed = True
            continue
        limits = layout.limits[i]
        free = limits.capacity - held[i] - consumed[i]
        if amount < limits.min_unit:
            code = Code.BELOW_MIN_UNIT
            detail = f"min_unit {limits.min_unit}"
        elif amount > limits.max_unit:
            code = Code.ABOVE_MAX_UNIT
            detail = f"max_unit {limits.max_unit}"
        elif amount % limits.step_size:
            code = Code.NOT_A_STEP_MULTIPLE
            detail = f"step_size {limits.step_size}"
        elif amount > free:
            code = Code.INSUFFICIENT_CAPACITY
            detail = ""
        else:
            continue
        reasons.append(Reason(code, provider.provider_id, rc, amount, free, detail))
        failed = True
    return failed


def _check_tags(provider: ProviderState, claim: Claim, reasons: list[Reason]) -> None:
    group = claim.anti_affinity_group
    if group is not None and provider.group_counts and provider.group_counts.get(group):
        reasons.append(
            Reason(
                Code.ANTI_AFFINITY_CONFLICT,
                provider.provider_id,
                detail=f"group {group} already has a member here",
            )
        )
    counts = provider.tag_counts or {}
    for tag in sorted(claim.require_with_tags):
        if not counts.get(tag):
            reasons.append(Reason(Code.REQUIRED_TAG_ABSENT, provider.provider_id, detail=tag))
    for tag in sorted(claim.require_without_tags):
        if counts.get(tag):
            reasons.append(Reason(Code.FORBIDDEN_TAG_PRESENT, provider.provider_id, detail=tag))


def _finish(state: PartitionState, reservation: Reservation) -> None:
    """Give a reservation's capacity and tags back and move it to ``finished``."""
    was_held = reservation.status == HELD
    for provider, amounts in reservation.items:
        state.touched.add(provider.provider_id)
        used = provider.held if was_held else provider.consumed
        index = provider.layout.index
        for rc, amount in amounts:
            used[index[rc]] -= amount
        provider.active -= 1
        if reservation.tags and provider.tag_counts is not None:
            _decrement(provider.tag_counts, reservation.tags)
        if reservation.group is not None and provider.group_counts is not None:
            _decrement(provider.group_counts, (reservation.group,))
    del state.reservations[reservation.reservation_id]
    state.finished[reservation.reservation_id] = reservation.fingerprint


def _decrement(counts: dict[str, int], keys: frozenset[str] | tuple[str, ...]) -> None:
    for key in keys:
        left = counts[key] - 1
        if left:
            counts[key] = left
        else:
            del counts[key]


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
        _finish(state, reservation)
        out.emit(Kind.EXPIRED, rid, expires_at_ms=expires_at)


def _lookup(state: PartitionState, rid: str, out: Emitter) -> Reservation | None:
    reservation = state.reservations.get(rid)
    if reservation is None:
        if rid in state.finished:
            out.emit(Kind.NOOP, rid, (Reason(Code.ALREADY_FINAL),))
        else:
            out.emit(Kind.NOOP, rid, (Reason(Code.UNKNOWN_RESERVATION),))
    return reservation


def _consume(state: PartitionState, event: Consume, out: Emitter) -> None:
    reservation = _lookup(state, event.reservation_id, out)
    if reservation is None:
        return
    if reservation.status == CONSUMED:
        out.emit(Kind.NOOP, reservation.reservation_id, (Reason(Code.ALREADY_CONSUMED),))
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
    _finish(state, reservation)
    out.emit(Kind.RELEASED, reservation.reservation_id)


def _renew(state: PartitionState, event: Renew, out: Emitter) -> None:
    reservation = _lookup(state, event.reservation_id, out)
    if reservation is None:
        return
    if reservation.status != HELD:
        out.emit(Kind.NOOP, reservation.reservation_id, (Reason(Code.NOT_HELD),))
        return
    expires_at = max(reservation.expires_at_ms, state.clock_ms + event.lease_ms)
    if expires_at != reservation.expires_at_ms:
        reservation.expires_at_ms = expires_at
        heapq.heappush(state.expiry, (expires_at, reservation.reservation_id))
    out.emit(Kind.RENEWED, reservation.reservation_id, expires_at_ms=expires_at)


# --- the dispatch table -------------------------------------------------


def _tick(state: PartitionState, event: Tick, out: Emitter) -> None:
    """Nothing but the clock, which ``apply`` has already advanced."""


_HANDLERS: dict[type[Any], Callable[[PartitionState, Any, Emitter], None]] = {
    Claim: _claim,
    Consume: _consume,
    Release: _release,
    Renew: _renew,
    Tick: _tick,
    ProviderRegistered: provider_event,
    ProviderRetired: provider_event,
    InventorySet: provider_event,
    ProviderStateSet: provider_event,
    TraitsSet: provider_event,
    AggregatesSet: provider_event,
}
