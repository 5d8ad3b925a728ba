"""Builders for pools, identifier claims, claim sets and transaction decisions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from schemas.events import (
    Claim,
    ClaimItem,
    ClaimSet,
    ClaimSpec,
    IdentifierItem,
    PoolDefined,
    PoolKind,
    ReleaseConsumer,
    TransactionDecision,
    TransactionRef,
)
from tests.builders import LEASE_MS, next_id


def pool(
    pool_id: str,
    kind: PoolKind,
    *,
    cidr: str | None = None,
    first: int | None = None,
    last: int | None = None,
    members: Sequence[str] = (),
    excluded: Iterable[str] = (),
    ts: int = 0,
) -> PoolDefined:
    return PoolDefined(
        event_id=next_id(),
        ts_ms=ts,
        partition_key=pool_id,
        pool_id=pool_id,
        kind=kind,
        cidr=cidr,
        first=first,
        last=last,
        members=tuple(members),
        excluded=frozenset(excluded),
    )


def ids(*wanted: str | tuple[str, str]) -> tuple[IdentifierItem, ...]:
    """``ids("vni", ("ip", "10.0.0.7"))``: the lowest free VNI and a named address."""
    return tuple(
        IdentifierItem(pool_id=w)
        if isinstance(w, str)
        else IdentifierItem(pool_id=w[0], value=w[1])
        for w in wanted
    )


def spec(
    rid: str,
    items: Mapping[str, Mapping[str, int]] | None = None,
    identifiers: tuple[IdentifierItem, ...] = (),
    *,
    consumer: str | None = None,
    lease_ms: int = LEASE_MS,
    group: str | None = None,
) -> ClaimSpec:
    return ClaimSpec(
        reservation_id=rid,
        consumer_id=consumer if consumer is not None else f"c-{rid}",
        project_id="proj",
        items=tuple(
            ClaimItem(provider_id=pid, resources=dict(res)) for pid, res in (items or {}).items()
        ),
        identifiers=identifiers,
        lease_ms=lease_ms,
        anti_affinity_group=group,
    )


def take(
    rid: str,
    key: str,
    identifiers: tuple[IdentifierItem, ...],
    *,
    ts: int = 0,
    lease_ms: int = LEASE_MS,
    consumer: str | None = None,
) -> Claim:
    """A claim of identifiers only, keyed by the pool ``key``."""
    return Claim(
        event_id=next_id(),
        ts_ms=ts,
        partition_key=key,
        reservation_id=rid,
        consumer_id=consumer if consumer is not None else f"c-{rid}",
        project_id="proj",
        identifiers=identifiers,
        lease_ms=lease_ms,
    )


def claim_set(
    key: str,
    *specs: ClaimSpec,
    atomic: bool = True,
    txn: str | None = None,
    priority: int = 0,
    deadline: int = 10_000,
    ts: int = 0,
) -> ClaimSet:
    return ClaimSet(
        event_id=next_id(),
        ts_ms=ts,
        partition_key=key,
        claims=specs,
        atomic=atomic,
        transaction=None
        if txn is None
        else TransactionRef(transaction_id=txn, priority=priority, deadline_ms=deadline),
    )


def decide(txn: str, commit: bool, *, key: str = "k", ts: int = 0) -> TransactionDecision:
    return TransactionDecision(
        event_id=next_id(), ts_ms=ts, partition_key=key, transaction_id=txn, commit=commit
    )


def release_consumer(consumer: str, *, key: str = "k", ts: int = 0) -> ReleaseConsumer:
    return ReleaseConsumer(event_id=next_id(), ts_ms=ts, partition_key=key, consumer_id=consumer)
