"""Rebuilds a partition's decision state from the view at its committed offset.

The view is the projector's checkpoint: every commit holds the state after the
offset it records, so a restarted writer loads it and resumes at that offset.
Usage, and which identifiers of each pool are free, are recomputed from the
live reservations rather than trusted.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select

from projections.aggregates import effective_layout
from projections.fitting import fits_of, take_fit
from projections.placement.load import load_placement
from projections.pools import PoolState
from projections.projector import claim_shapes, fingerprint
from projections.state import (
    CONSUMED,
    HELD,
    NO_DESCRIPTION,
    NO_METRICS,
    Description,
    Metrics,
    PartitionState,
    PendingTransaction,
    ProviderState,
    Reservation,
    ServerGroup,
    Taken,
)
from projections.view.tables import (
    aggregates,
    inventories,
    partition_offsets,
    pools,
    provider_columns,
    provider_rows,
    providers,
    reservation_identifiers,
    reservations,
    server_group_members,
    server_groups,
)
from schemas.events import ClaimItem, ClaimSpec, GuestAsks, IdentifierItem, Inventory
from schemas.pool_space import PoolSpace
from schemas.topology import NumaCell, PciDevice, TopologyFit

_ACTIVE = {"held": HELD, "consumed": CONSUMED, "pending": HELD}
"""Statuses of live reservations (a pending hold is held until its deadline)."""


_OFFSETS = select(partition_offsets.c.partition, partition_offsets.c.next_offset)
"""(built once: a live snapshot reads it at every call)"""


def committed_offsets(conn: Connection) -> dict[int, int]:
    """Partition -> the next offset its writer will apply: what the view reflects."""
    return {int(partition): int(offset) for partition, offset in conn.execute(_OFFSETS)}


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
    _load_aggregates(conn, state)
    _load_providers(conn, state)
    _load_pools(conn, state)
    _load_groups(conn, state)
    _load_reservations(conn, state)
    load_placement(conn, state)
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
    query = (
        select(*provider_columns())
        .select_from(provider_rows)
        .where(providers.c.partition == state.partition)
    )
    parsed: dict[str, Any] = {}  # one hardware model's topology, validated once
    for p in conn.execute(query):
        own = state.layout_for(by_provider.get(p.provider_id, {}))
        size = len(own.classes)
        provider = ProviderState(
            provider_id=p.provider_id,
            name=p.name,
            state=p.state,
            layout=own,
            held=[0] * size,
            consumed=[0] * size,
            traits=frozenset(p.traits),
            aggregates=frozenset(p.aggregates),
            description=_description(p, parsed),
            metrics=_metrics(p),
            own=own,
        )
        provider.layout = effective_layout(state, provider, own)
        state.providers[p.provider_id] = provider


def _load_aggregates(conn: Connection, state: PartitionState) -> None:
    query = select(aggregates).where(aggregates.c.partition == state.partition)
    for row in conn.execute(query):
        state.aggregates[row.aggregate_id] = dict(row.metadata)


def _description(row: Any, parsed: dict[str, Any]) -> Description:
    """A provider's description as its row holds it; ``parsed`` keeps the
    cells and devices of each topology text met, for the next provider."""
    cells_text, devices_text = row.numa_cells, row.pci_devices
    topology = cells_text != "[]" or devices_text != "[]"
    if not (
        row.availability_zone
        or row.host
        or row.host_ip
        or row.capabilities
        or row.metadata
        or topology
    ):
        return NO_DESCRIPTION
    cells = parsed.get(cells_text)
    if cells is None:
        cells = parsed[cells_text] = tuple(
            NumaCell.model_validate(cell, strict=False) for cell in json.loads(cells_text)
        )
    devices = parsed.get(devices_text)
    if devices is None:
        devices = parsed[devices_text] = tuple(
            PciDevice.model_validate(device, strict=False) for device in json.loads(devices_text)
        )
    return Description(
        row.availability_zone,
        row.host,
        row.host_ip,
        row.capabilities,
        row.metadata,
        cells,
        devices,
        (cells_text, devices_text),
    )


def _metrics(row: Any) -> Metrics:
    if row.metrics_at_ms is None and not (row.num_io_ops or row.build_failures or row.metrics):
        return NO_METRICS
    return Metrics(row.metrics, row.metrics_at_ms, row.num_io_ops, row.build_failures)


def _load_groups(conn: Connection, state: PartitionState) -> None:
    query = select(server_groups).where(server_groups.c.partition == state.partition)
    for row in conn.execute(query):
        state.groups[row.group_id] = ServerGroup(
            row.group_id, row.policy, row.max_server_per_host, row.project_id, row.user_id
        )


def _memberships(conn: Connection, state: PartitionState) -> dict[str, tuple[str, str]]:
    """Reservation id -> (group, provider) of every membership claim here."""
    m = server_group_members.c
    query = select(m.reservation_id, m.group_id, m.provider_id).where(
        m.partition == state.partition
    )
    return {row.reservation_id: (row.group_id, row.provider_id) for row in conn.execute(query)}


def _spec_of(row: Any, membership: tuple[str, str] | None = None) -> ClaimSpec:
    # model_construct: these rows were validated when the claim was first decoded
    requested = row.identifiers or ()
    return ClaimSpec.model_construct(
        reservation_id=row.reservation_id,
        consumer_id=row.consumer_id,
        project_id=row.project_id,
        items=tuple(
            ClaimItem.model_construct(
                provider_id=i["provider_id"],
                resources=i["resources"],
                fit=TopologyFit.model_validate(i["fit"], strict=False) if "fit" in i else None,
                guest=GuestAsks.model_validate(i["guest"], strict=False) if "guest" in i else None,
            )
            for i in row.items
        ),
        identifiers=tuple(
            IdentifierItem.model_construct(pool_id=i["pool_id"], value=i.get("value"))
            for i in requested
        ),
        lease_ms=row.lease_ms,
        anti_affinity_group=row.anti_affinity_group,
        tags=frozenset(row.tags),
        require_with_tags=frozenset(row.require_with_tags),
        require_without_tags=frozenset(row.require_without_tags),
        server_group=None if membership is None else membership[0],
        group_host=None if membership is None else membership[1],
    )


@dataclass(frozen=True, slots=True)
class _Definition:
    """A pool's definition as the view keeps it (see :class:`PoolDefinition`)."""

    kind: str
    cidr: str | None
    first: int | None
    last: int | None
    members: tuple[str, ...]
    excluded: frozenset[str]


def _load_pools(conn: Connection, state: PartitionState) -> None:
    for row in conn.execute(select(pools).where(pools.c.partition == state.partition)):
        d = row.definition
        definition = _Definition(
            d["kind"],
            d.get("cidr"),
            d.get("first"),
            d.get("last"),
            tuple(d.get("members", ())),
            frozenset(d.get("excluded", ())),
        )
        state.pools[row.pool_id] = PoolState.of(row.pool_id, PoolSpace.of(definition))


def _held_identifiers(conn: Connection, state: PartitionState) -> dict[str, Taken]:
    """The identifiers each live reservation holds, in the order it was given
    them, taken out of their (freshly rebuilt) pools."""
    rows = conn.execute(
        select(reservation_identifiers)
        .where(reservation_identifiers.c.partition == state.partition)
        .order_by(reservation_identifiers.c.reservation_id, reservation_identifiers.c.position)
    )
    held: dict[str, list[tuple[PoolState, int]]] = {}
    for row in rows:
        pool = state.pools[row.pool_id]
        value = pool.space.to_int(row.value)
        if value is None or not pool.free.take(value):
            raise ValueError(
                f"the view gives {row.pool_id} {row.value} to {row.reservation_id}, "
                "but it is not a free identifier of the pool"
            )
        held.setdefault(row.reservation_id, []).append((pool, value))
    return {rid: tuple(taken) for rid, taken in held.items()}


def _load_reservations(conn: Connection, state: PartitionState) -> None:
    held = _held_identifiers(conn, state)
    memberships = _memberships(conn, state)
    pending: list[tuple[int, int, str, str, int]] = []
    for row in conn.execute(
        select(reservations).where(reservations.c.partition == state.partition)
    ):
        membership = memberships.get(row.reservation_id)
        spec = _spec_of(row, membership)
        shapes = claim_shapes(state, spec)
        print_ = fingerprint(spec, shapes)
        status = _ACTIVE.get(row.status)
        if status is None:
            state.finished[row.reservation_id] = print_
            continue
        items = tuple((state.providers[pid], amounts) for pid, amounts in shapes)
        fits = fits_of(items, spec.items)
        for provider, fit in fits:
            take_fit(provider, fit, row.reservation_id)
        tags = spec.tags
        transaction = row.transaction_id if row.status == "pending" else None
        reservation = Reservation(
            row.reservation_id,
            items,
            status,
            row.expires_at_ms,
            print_,
            spec.anti_affinity_group,
            tags,
            spec.consumer_id,
            held.pop(row.reservation_id, ()),
            transaction,
            spec.lease_ms,
            spec.project_id,
            membership,
            fits,
        )
        state.reservations[row.reservation_id] = reservation
        if membership is not None:
            group = state.groups.get(membership[0])
            if group is not None:  # else deleted, and the membership with it
                group.hosts[membership[1]] = group.hosts.get(membership[1], 0) + 1
        for provider, amounts in items:
            used = provider.held if status == HELD else provider.consumed
            provider.take(amounts, used, tags, spec.anti_affinity_group)
        if status == HELD:
            state.expiry.append((row.expires_at_ms, row.reservation_id))
        if transaction is not None:
            pending.append(
                (
                    row.created_offset,
                    row.transaction_position,
                    row.reservation_id,
                    transaction,
                    row.transaction_priority,
                )
            )
    if held:
        raise ValueError(f"the view gives identifiers to finished reservations: {sorted(held)}")
    heapq.heapify(state.expiry)
    # each transaction's holds in the order the projector keeps them: by record,
    # then by place within the record
    for _, _, rid, tid, priority in sorted(pending):
        entry = state.transactions.get(tid)
        if entry is None:
            entry = state.transactions[tid] = PendingTransaction((priority, tid), [])
        entry.reservation_ids.append(rid)
