"""Deciding claims: one reservation, or a set of them in one record.

A claim takes effect only if everything it asks for still fits, in log order.
A set is atomic by default (all of its claims or none); with a transaction its
holds are pending until the coordinator decides, and an older transaction may
abort a younger one's pending holds that stand in its way (wound-wait), so the
oldest transaction always makes progress and two batches cannot livelock.
"""

from __future__ import annotations

from typing import NamedTuple

from projections.emitter import Emitter, missing_pool, missing_provider
from projections.fitting import fit_reasons
from projections.holds import finish, give_back, hold, named
from projections.pools import PoolState
from projections.server_groups import membership_refused
from projections.state import (
    Amounts,
    PartitionState,
    PendingTransaction,
    ProviderState,
    Reservation,
    Shapes,
    Taken,
    content_digest,
)
from schemas.events import Claim, ClaimSet, ClaimSpec, IdentifierItem, TransactionRef
from schemas.outcomes import Code, Kind, Reason

FINGERPRINTS = "blake2b-64/text-1"
"""Which digest :func:`fingerprint` is and of what encoding: a checkpoint's
manifest names it, and states saved with any other are not decided on."""


def fingerprint(spec: ClaimSpec, shapes: Shapes) -> int:
    """A digest of a claim's content, to tell a duplicate from a reused id.

    The same in every process and every run: checkpoints carry it to other
    processes (``berth checkpoint``, ``berth explain``), so it is BLAKE2b
    over a canonical text, never Python's per-process ``hash()``. The text
    cannot be read two ways: each id is prefixed by its length, resource
    classes are ``[A-Z0-9_]+``, and the rarer fields are one ``repr`` (tag
    sets sorted). 64 bits is enough: two digests are compared only for one
    reservation id, so a reused id with other content passes for a
    duplicate with probability 2**-64 per reuse.
    """
    f = spec.__dict__
    return content_digest(
        f["consumer_id"], f["project_id"], f["lease_ms"], shapes, _rare_fields(spec)
    )


def _rare_fields(spec: ClaimSpec) -> str:
    """The fields most claims leave empty, as one ``repr``; "" if all are."""
    f = spec.__dict__
    identifiers = f["identifiers"]
    items = f["items"]
    fits: tuple[object, ...] = ()
    if len(items) != 1 or items[0].__dict__["fit"] is not None:
        fits = tuple(item.fit for item in items)
    rare = (
        tuple((i.pool_id, i.value) for i in identifiers) if identifiers else (),
        f["anti_affinity_group"],
        _sorted(f["tags"]),
        _sorted(f["require_with_tags"]),
        _sorted(f["require_without_tags"]),
        f["server_group"],
        f["group_host"],
        fits,
    )
    if rare == _NONE_RARE:
        return ""
    return "|" + repr(rare)


_NONE_RARE: tuple[object, ...] = ((), None, (), (), (), None, None, ())


def _print_now(spec: ClaimSpec, shapes: Shapes) -> int | None:
    """The fingerprint to hold, or None for a claim that sets none of its
    rare fields: its reservation makes it from its own fields when asked."""
    f = spec.__dict__
    items = f["items"]
    if (
        len(items) == 1
        and items[0].__dict__["fit"] is None
        and not f["identifiers"]
        and f["anti_affinity_group"] is None
        and not f["tags"]
        and not f["require_with_tags"]
        and not f["require_without_tags"]
        and f["server_group"] is None  # and so group_host
    ):
        return None
    return fingerprint(spec, shapes)


def _sorted(tags: frozenset[str]) -> tuple[str, ...]:
    # a frozenset's order follows the per-process string hash
    return tuple(sorted(tags)) if tags else ()


def claim_shapes(state: PartitionState, spec: ClaimSpec) -> Shapes:
    """Each item's provider id and interned amounts."""
    items = spec.items
    shape = state.shape
    if len(items) == 1:
        item = items[0]
        return ((item.provider_id, shape(item.resources)),)
    return tuple((item.provider_id, shape(item.resources)) for item in items)


def claim(state: PartitionState, event: Claim, out: Emitter) -> None:
    """One reservation: the hot path."""
    f = event.__dict__
    rid = f["reservation_id"]
    items = f["items"]
    if (
        len(items) == 1
        and not f["identifiers"]
        and f["anti_affinity_group"] is None
        and f["server_group"] is None
        and not f["require_with_tags"]
        and not f["require_without_tags"]
        and rid not in state.reservations
        and rid not in state.finished
    ):
        # the common claim: one provider, no identifiers, no local rules, a new
        # id; if it fits cleanly it is held here, anything else takes the ladder
        item = items[0].__dict__
        provider_id = item["provider_id"]
        provider = state.providers.get(provider_id)
        if provider is not None and provider.state == "enabled" and item["fit"] is None:
            amounts = state.shape(item["resources"])
            if _fits(provider, amounts):
                expires_at = state.clock_ms + f["lease_ms"]
                # without tags none of its fingerprint's rare fields is set: the
                # reservation makes it from its own fields if ever asked (its id
                # again, its end, a checkpoint), rather than every claim now
                print_ = fingerprint(event, ((provider_id, amounts),)) if f["tags"] else None
                hold(state, event, ((provider, amounts),), (), expires_at, print_)
                out.emit(Kind.ACCEPTED, rid, (), expires_at)
                return
    _claim_on_the_ladder(state, event, out)


def _claim_on_the_ladder(state: PartitionState, event: Claim, out: Emitter) -> None:
    """Any claim, every check in order of precedence, each failure a reason."""
    rid = event.reservation_id
    shapes = claim_shapes(state, event)
    if _already_decided(state, event, shapes, out):
        return
    reasons: list[Reason] = []
    items, picks = _decide(state, event, shapes, reasons)
    if reasons:
        out.emit(Kind.REJECTED, rid, tuple(reasons))
        return
    expires_at = state.clock_ms + event.lease_ms
    reservation = hold(state, event, items, picks, expires_at, _print_now(event, shapes))
    out.emit(Kind.ACCEPTED, rid, (), expires_at, named(reservation) if picks else ())


class _Decided(NamedTuple):
    spec: ClaimSpec
    reservation: Reservation | None
    reasons: tuple[Reason, ...]


def claim_set(state: PartitionState, event: ClaimSet, out: Emitter) -> None:
    txn = event.transaction
    if txn is not None and state.clock_ms > txn.deadline_ms:
        late = Reason(
            Code.TRANSACTION_DEADLINE_PASSED,
            detail=f"deadline {txn.deadline_ms}, partition clock {state.clock_ms}",
        )
        for spec in event.claims:
            out.emit(Kind.REJECTED, spec.reservation_id, (late,))
        return
    fresh: list[tuple[ClaimSpec, Shapes]] = []
    conflicts: list[str] = []
    for spec in event.claims:
        shapes = claim_shapes(state, spec)
        seen = _seen_before(state, spec, shapes)
        if seen is None:
            fresh.append((spec, shapes))
        elif seen.code == Code.DUPLICATE:
            out.emit(Kind.NOOP, spec.reservation_id, (seen,))
        else:
            out.emit(Kind.REJECTED, spec.reservation_id, (seen,))
            conflicts.append(spec.reservation_id)
    if conflicts and event.atomic:
        _refuse_together(fresh, f"{conflicts[0]} reuses a reservation id", out)
        return
    if not fresh:
        return
    decided = _decide_set(state, event, fresh)
    failed = [d for d in decided if d.reservation is None]
    if failed and txn is not None and _wound(state, txn, failed, out):
        if event.atomic:
            decided = _decide_set(state, event, fresh)
        else:
            again = {d.spec.reservation_id for d in failed}
            retried = {
                d.spec.reservation_id: d
                for d in _decide_set(
                    state, event, [f for f in fresh if f[0].reservation_id in again]
                )
            }
            decided = [retried.get(d.spec.reservation_id, d) for d in decided]
    _emit_set(event, fresh, decided, out)


def _decide_set(
    state: PartitionState, event: ClaimSet, fresh: list[tuple[ClaimSpec, Shapes]]
) -> list[_Decided]:
    txn = event.transaction
    decided: list[_Decided] = []
    for spec, shapes in fresh:
        reasons: list[Reason] = []
        items, picks = _decide(state, spec, shapes, reasons)
        if reasons:
            decided.append(_Decided(spec, None, tuple(reasons)))
            if event.atomic:
                break
            continue
        expires_at = state.clock_ms + spec.lease_ms if txn is None else txn.deadline_ms
        print_ = _print_now(spec, shapes)
        if txn is None:
            reservation = hold(state, spec, items, picks, expires_at, print_)
        else:
            reservation = hold(state, spec, items, picks, expires_at, print_, txn.transaction_id)
            pending = state.transactions.get(txn.transaction_id)
            if pending is None:
                pending = state.transactions[txn.transaction_id] = PendingTransaction(
                    (txn.priority, txn.transaction_id), []
                )
            pending.reservation_ids.append(spec.reservation_id)
        decided.append(_Decided(spec, reservation, ()))
    if event.atomic and decided[-1].reservation is None:
        for d in decided[:-1]:
            assert d.reservation is not None
            give_back(state, d.reservation)  # undone, not finished: it never took effect
            state.joined.pop(d.reservation.reservation_id, None)
        return [d for d in decided if d.reservation is None]
    return decided


def _emit_set(
    event: ClaimSet,
    fresh: list[tuple[ClaimSpec, Shapes]],
    decided: list[_Decided],
    out: Emitter,
) -> None:
    if event.atomic and decided[0].reservation is None:
        failed = decided[0]
        _refuse_together(fresh, f"{failed.spec.reservation_id} did not fit", out, failed)
        return
    kind = Kind.ACCEPTED if event.transaction is None else Kind.PREPARED
    for d in decided:
        r = d.reservation
        if r is None:
            out.emit(Kind.REJECTED, d.spec.reservation_id, d.reasons)
        else:
            out.emit(kind, r.reservation_id, expires_at_ms=r.expires_at_ms, identifiers=named(r))


def _refuse_together(
    members: list[tuple[ClaimSpec, Shapes]],
    why: str,
    out: Emitter,
    culprit: _Decided | None = None,
) -> None:
    """Reject every member of an atomic set one of them sank, in set order;
    the culprit, if among them, with its own reasons."""
    together = (Reason(Code.BATCH_MEMBER_REJECTED, detail=f"{why} and the set is atomic"),)
    for spec, _ in members:
        if culprit is not None and spec is culprit.spec:
            out.emit(Kind.REJECTED, spec.reservation_id, culprit.reasons)
        else:
            out.emit(Kind.REJECTED, spec.reservation_id, together)


def abort_pending(
    state: PartitionState, transaction_id: str, out: Emitter, reasons: tuple[Reason, ...] = ()
) -> None:
    """Give back every pending hold of a transaction here."""
    pending = state.transactions.get(transaction_id)
    if pending is None:
        return
    for rid in list(pending.reservation_ids):
        reservation = state.reservations[rid]
        given = named(reservation)
        finish(state, reservation)
        out.emit(Kind.ABORTED, rid, reasons, identifiers=given)


_CONTESTED = frozenset(
    {
        Code.INSUFFICIENT_CAPACITY,
        Code.ANTI_AFFINITY_CONFLICT,
        Code.AFFINITY_CONFLICT,
        Code.IDENTIFIER_TAKEN,
        Code.POOL_EXHAUSTED,
        Code.TOPOLOGY_TAKEN,
    }
)


def _wound(
    state: PartitionState, txn: TransactionRef, failed: list[_Decided], out: Emitter
) -> bool:
    """Abort the younger transactions whose pending holds are on a provider or
    pool where ``txn`` did not fit; True if there were any."""
    blocked = {
        reason.provider_id
        for d in failed
        for reason in d.reasons
        if reason.code in _CONTESTED and reason.provider_id is not None
    }
    if not blocked:
        return False
    mine = (txn.priority, txn.transaction_id)
    victims = sorted(
        (pending.priority, tid)
        for tid, pending in state.transactions.items()
        # never itself: a later set of the transaction may carry another priority
        if pending.priority > mine
        and tid != txn.transaction_id
        and any(_stands_on(state.reservations[rid], blocked) for rid in pending.reservation_ids)
    )
    wounded = (Reason(Code.WOUNDED, detail=f"by older transaction {txn.transaction_id}"),)
    for _, tid in victims:
        abort_pending(state, tid, out, wounded)
    return bool(victims)


def _stands_on(reservation: Reservation, blocked: set[str]) -> bool:
    membership = reservation.membership
    return (
        any(p.provider_id in blocked for p, _ in reservation.items)
        or any(pool.pool_id in blocked for pool, _ in reservation.identifiers)
        # a younger pending member of a group on the host an older one needs
        or (membership is not None and membership[1] in blocked)
    )


def _already_decided(state: PartitionState, spec: ClaimSpec, shapes: Shapes, out: Emitter) -> bool:
    """Answer a claim whose reservation id was seen before; False if it is new."""
    seen = _seen_before(state, spec, shapes)
    if seen is None:
        return False
    kind = Kind.NOOP if seen.code == Code.DUPLICATE else Kind.REJECTED
    out.emit(kind, spec.reservation_id, (seen,))
    return True


def _seen_before(state: PartitionState, spec: ClaimSpec, shapes: Shapes) -> Reason | None:
    """Why a claim's reservation id is not new (a duplicate, or a reuse with
    other content), or None if it is."""
    rid = spec.reservation_id
    existing = state.reservations.get(rid)
    known = existing.fingerprint if existing is not None else state.finished.get(rid)
    if known is None:
        return None
    if known == fingerprint(spec, shapes):
        return _DUPLICATE
    return _CONFLICT


_DUPLICATE = Reason(Code.DUPLICATE, detail="claim already decided")
_CONFLICT = Reason(
    Code.RESERVATION_ID_CONFLICT,
    detail="reservation id already used by a claim with other content",
)


def _decide(
    state: PartitionState, spec: ClaimSpec, shapes: Shapes, reasons: list[Reason]
) -> tuple[list[tuple[ProviderState, Amounts]], Taken]:
    """Check every item; on success take the claim's identifiers from their
    pools (the caller holds them). Reasons are appended, never raised."""
    providers = state.providers
    group = spec.anti_affinity_group
    constrained = group is not None or spec.require_with_tags or spec.require_without_tags
    items: list[tuple[ProviderState, Amounts]] = []
    specs = spec.items
    for n, (provider_id, amounts) in enumerate(shapes):
        provider = providers.get(provider_id)
        if provider is None:
            reasons.append(missing_provider(state, provider_id))
            continue
        if provider.state != "enabled":
            reasons.append(Reason(Code.PROVIDER_NOT_ENABLED, provider_id, detail=provider.state))
            continue
        if not _misfits(provider, amounts, reasons) and constrained:
            _check_tags(provider, spec, reasons)
        fit = specs[n].fit
        if fit is not None:
            reasons.extend(fit_reasons(provider, fit))
        items.append((provider, amounts))
    if spec.server_group is not None and not reasons:
        refused = membership_refused(state, spec)
        if refused is not None:
            reasons.append(refused)
    if not spec.identifiers or reasons:
        return items, ()
    return items, _pick(state, spec.identifiers, reasons)


def _pick(
    state: PartitionState, wanted: tuple[IdentifierItem, ...], reasons: list[Reason]
) -> Taken:
    """Take the named identifiers, then the lowest free ones for the rest; all
    or none (what was taken is given back if anything is missing)."""
    pools = state.pools
    taken: list[tuple[PoolState, int]] = []
    anys: dict[str, int] = {}
    for item in wanted:
        pool = pools.get(item.pool_id)
        if pool is None:
            reasons.append(missing_pool(state, item.pool_id))
            continue
        if item.value is None:
            anys[item.pool_id] = anys.get(item.pool_id, 0) + 1
            continue
        value = pool.space.to_int(item.value)
        if value is None:
            reasons.append(Reason(Code.IDENTIFIER_NOT_IN_POOL, item.pool_id, detail=item.value))
        elif not pool.free.take(value):
            reasons.append(Reason(Code.IDENTIFIER_TAKEN, item.pool_id, detail=item.value))
        else:
            taken.append((pool, value))
    for pool_id, count in anys.items():
        pool = pools[pool_id]
        free = pool.free.count
        if count > free:
            reasons.append(Reason(Code.POOL_EXHAUSTED, pool_id, requested=count, available=free))
            continue
        for _ in range(count):
            value = pool.free.take_lowest()
            assert value is not None
            taken.append((pool, value))
    picks = tuple(taken)
    if reasons:
        for pool, value in picks:
            pool.free.give_back(value)
        return ()
    return picks


def _fits(provider: ProviderState, amounts: Amounts) -> bool:
    """Whether every amount passes every check of :func:`_misfits`; the fast
    answer for the claim that fits, without building reasons."""
    layout = provider.layout
    index = layout.index
    limits = layout.limits
    held = provider.held
    consumed = provider.consumed
    for rc, amount in amounts:
        i = index.get(rc)
        if i is None:
            return False
        lim = limits[i]
        if amount > lim.capacity - held[i] - consumed[i]:
            return False
        if not lim.any_amount and (
            amount < lim.min_unit or amount > lim.max_unit or amount % lim.step_size
        ):
            return False
    return True


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


def _check_tags(provider: ProviderState, spec: ClaimSpec, reasons: list[Reason]) -> None:
    group = spec.anti_affinity_group
    if group is not None and provider.group_counts and provider.group_counts.get(group):
        reasons.append(
            Reason(
                Code.ANTI_AFFINITY_CONFLICT,
                provider.provider_id,
                detail=f"group {group} already has a member here",
            )
        )
    counts = provider.tag_counts or {}
    for tag in sorted(spec.require_with_tags):
        if not counts.get(tag):
            reasons.append(Reason(Code.REQUIRED_TAG_ABSENT, provider.provider_id, detail=tag))
    for tag in sorted(spec.require_without_tags):
        if counts.get(tag):
            reasons.append(Reason(Code.FORBIDDEN_TAG_PRESENT, provider.provider_id, detail=tag))
