"""Rebuilds a partition's decision state from the view at its committed offset.

The view is the projector's checkpoint: every commit holds the state after the
offset it records, so a restarted writer loads it and resumes at that offset.
Usage is recomputed from the active reservations rather than trusted.
"""

from __future__ import annotations

import heapq
from typing import Any

from sqlalchemy import Connection, select

from projections.projector import claim_shapes, fingerprint
from projections.state import CONSUMED, HELD, PartitionState, ProviderState, Reservation
from projections.view.tables import inventories, partition_offsets, providers, reservations
from schemas.events import Claim, ClaimItem, Inventory

_ACTIVE = {"held": HELD, "consumed": CONSUMED}


def load_state(conn: Connection, partition: int, partitions: int) -> tuple[PartitionState, int]:
    """The state of ``partition`` as of the view, and the next offset to apply."""
    state = PartitionState(partition=partition, partitions=partitions)
    row = conn.execute(
        select(partition_offsets).where(partition_offsets.c.partition == partition)
    ).first()
    if row is None:
        return state, 0
    if row.partitions != partitions:
        raise ValueError(f"the view was built with {row.partitions} partitions, not {partitions}")
    state.clock_ms = row.clock_ms
    _load_providers(conn, state)
    _load_reservations(conn, state)
    return state, int(row.next_offset)


def _load_providers(conn: Connection, state: PartitionState) -> None:
    by_provider: dict[str, dict[str, Inventory]] = {}
    for inv in conn.execute(select(inventories).where(inventories.c.partition == state.partition)):
        by_provider.setdefault(inv.provider_id, {})[inv.resource_class] = Inventory(
            total=inv.total,
            reserved=inv.reserved,
            min_unit=inv.min_unit,
            max_unit=inv.max_unit,
            step_size=inv.step_size,
            allocation_ratio=inv.allocation_ratio,
        )
    for p in conn.execute(select(providers).where(providers.c.partition == state.partition)):
        layout = state.layout_for(by_provider.get(p.provider_id, {}))
        size = len(layout.classes)
        state.providers[p.provider_id] = ProviderState(
            provider_id=p.provider_id,
            name=p.name,
            state=p.state,
            layout=layout,
            held=[0] * size,
            consumed=[0] * size,
            traits=frozenset(p.traits),
            aggregates=frozenset(p.aggregates),
        )


def _claim_of(row: Any) -> Claim:
    # model_construct: these rows were validated when the claim was first decoded;
    # the envelope does not take part in the fingerprint
    return Claim.model_construct(
        event_id="view",
        ts_ms=0,
        partition_key=row.items[0]["provider_id"],
        reservation_id=row.reservation_id,
        consumer_id=row.consumer_id,
        project_id=row.project_id,
        items=tuple(
            ClaimItem.model_construct(provider_id=i["provider_id"], resources=i["resources"])
            for i in row.items
        ),
        lease_ms=row.lease_ms,
        anti_affinity_group=row.anti_affinity_group,
        tags=frozenset(row.tags),
        require_with_tags=frozenset(row.require_with_tags),
        require_without_tags=frozenset(row.require_without_tags),
    )


def _load_reservations(conn: Connection, state: PartitionState) -> None:
    for row in conn.execute(
        select(reservations).where(reservations.c.partition == state.partition)
    ):
        claim = _claim_of(row)
        shapes = claim_shapes(state, claim)
        print_ = fingerprint(claim, shapes)
        status = _ACTIVE.get(row.status)
        if status is None:
            state.finished[row.reservation_id] = print_
            continue
        items = tuple((state.providers[pid], amounts) for pid, amounts in shapes)
        tags = claim.tags
        reservation = Reservation(
            row.reservation_id,
            items,
            status,
            row.expires_at_ms,
            print_,
            claim.anti_affinity_group,
            tags,
        )
        state.reservations[row.reservation_id] = reservation
        for provider, amounts in items:
            used = provider.held if status == HELD else provider.consumed
            provider.take(amounts, used, tags, claim.anti_affinity_group)
        if status == HELD:
            state.expiry.append((row.expires_at_ms, row.reservation_id))
    heapq.heapify(state.expiry)
