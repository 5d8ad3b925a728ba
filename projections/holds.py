"""Taking a reservation's capacity and identifiers, and giving them back."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from projections.fitting import NO_FITS, fits_of, give_fit, take_fit
from projections.state import (
    HELD,
    Amounts,
    PartitionState,
    ProviderState,
    Reservation,
    Taken,
)
from schemas.events import ClaimSpec

NO_TAGS: frozenset[str] = frozenset()


def hold(
    state: PartitionState,
    spec: ClaimSpec,
    items: Sequence[tuple[ProviderState, Amounts]],
    picks: Taken,
    expires_at_ms: int,
    print_: int | None,
    transaction: str | None = None,
) -> Reservation:
    """Hold what ``spec`` asked for until ``expires_at_ms``: its amounts were
    decided to fit and its identifiers (``picks``) already taken from their pools."""
    f = spec.__dict__
    group = f["anti_affinity_group"]
    tags = f["tags"] or NO_TAGS
    touched = state.touched
    for provider, amounts in items:
        touched.add(provider.provider_id)
        provider.take(amounts, provider.held, tags, group)
    for pool, _ in picks:
        state.pools_touched.add(pool.pool_id)
    rid = f["reservation_id"]
    asked = f["items"]
    fits = NO_FITS
    if len(asked) > 1 or (asked and asked[0].__dict__["fit"] is not None):
        fits = fits_of(items, asked)
        for provider, fit in fits:
            take_fit(provider, fit, rid)
    group_id = f["server_group"]
    membership = None if group_id is None else (group_id, f["group_host"])
    reservation = Reservation(
        rid,
        tuple(items),
        HELD,
        expires_at_ms,
        print_,
        group,
        tags,
        f["consumer_id"],
        picks,
        transaction,
        f["lease_ms"],
        f["project_id"],
        membership,
        fits,
    )
    if membership is not None:
        join(state, membership, f["consumer_id"], rid)
    state.reservations[rid] = reservation
    heapq.heappush(state.expiry, (expires_at_ms, rid))
    return reservation


def give_back(state: PartitionState, reservation: Reservation) -> None:
    """Return a reservation's capacity, tags, group and identifiers; forget it
    as active (the caller decides whether it is remembered as finished)."""
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
    for provider, fit in reservation.fits:
        give_fit(provider, fit)
    if reservation.membership is not None:
        leave(state, reservation.membership)
    for pool, identifier in reservation.identifiers:
        pool.free.give_back(identifier)
        state.pools_touched.add(pool.pool_id)
    rid = reservation.reservation_id
    del state.reservations[rid]
    if reservation.transaction is not None:
        pending = state.transactions.get(reservation.transaction)
        if pending is not None:
            pending.reservation_ids.remove(rid)
            if not pending.reservation_ids:
                del state.transactions[reservation.transaction]


def finish(state: PartitionState, reservation: Reservation) -> None:
    """Give a reservation back and remember it as finished, so a late duplicate
    of its claim is recognised rather than held again."""
    give_back(state, reservation)
    state.finished[reservation.reservation_id] = reservation.fingerprint


def named(reservation: Reservation) -> tuple[tuple[str, str], ...]:
    """The reservation's identifiers as (pool id, identifier) strings."""
    return tuple(
        (pool.pool_id, pool.space.to_str(value)) for pool, value in reservation.identifiers
    )


def _decrement(counts: dict[str, int], keys: frozenset[str] | tuple[str, ...]) -> None:
    for key in keys:
        left = counts[key] - 1
        if left:
            counts[key] = left
        else:
            del counts[key]


def join(state: PartitionState, membership: tuple[str, str], consumer_id: str, rid: str) -> None:
    """Count a server-group membership just held on its group's host, and
    note it for the view's members table."""
    group = state.groups[membership[0]]
    host = membership[1]
    group.hosts[host] = group.hosts.get(host, 0) + 1
    state.joined[rid] = (membership[0], host, consumer_id)


def leave(state: PartitionState, membership: tuple[str, str]) -> None:
    """Count a membership given back (the group may be gone: deleted)."""
    group = state.groups.get(membership[0])
    if group is None:
        return
    host = membership[1]
    left = group.hosts[host] - 1
    if left:
        group.hosts[host] = left
    else:
        del group.hosts[host]
