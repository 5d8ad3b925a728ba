"""Placement's model of a partition as the view holds it: what a restarted
writer decides on from (``projections.view.loader``)."""

from __future__ import annotations

from sqlalchemy import Connection, select

from projections.placement.model import PlacementConsumer, PlacementProvider, PlacementState
from projections.state import PartitionState
from projections.view.tables import placement_consumers, placement_names, placement_providers
from schemas.events import Inventory


def load_placement(conn: Connection, state: PartitionState) -> None:
    """Load providers, consumers and names; count the consumers' allocations
    into their providers' consumed (Berth's reservations are already in)."""
    partition = state.partition
    placement = PlacementState()
    for row in conn.execute(
        select(placement_providers).where(placement_providers.c.partition == partition)
    ):
        placement.providers[row.uuid] = PlacementProvider(
            uuid=row.uuid,
            name=row.name,
            root=row.root_uuid,
            parent=row.parent_uuid,
            generation=int(row.generation),
            traits=frozenset(row.traits),
            aggregates=tuple(row.aggregates),
            inventories={rc: Inventory(**inv) for rc, inv in row.inventories.items()},
            created_ms=int(row.created_ms),
            updated_ms=int(row.updated_ms),
        )
        placement.names[row.name] = row.uuid
        if row.parent_uuid is not None:
            placement.children.setdefault(row.parent_uuid, set()).add(row.uuid)
    for row in conn.execute(
        select(placement_consumers).where(placement_consumers.c.partition == partition)
    ):
        consumer = PlacementConsumer(
            uuid=row.uuid,
            project_id=row.project_id,
            user_id=row.user_id,
            consumer_type=row.consumer_type,
            generation=int(row.generation),
            allocations={p: dict(a) for p, a in row.allocations.items()},
            created_ms=int(row.created_ms),
            updated_ms=int(row.updated_ms),
        )
        placement.consumers[row.uuid] = consumer
        for uuid, amounts in consumer.allocations.items():
            berth = state.providers[uuid]
            for rc, amount in amounts.items():
                berth.consumed[berth.layout.index[rc]] += amount
    for row in conn.execute(
        select(placement_names).where(placement_names.c.partition == partition)
    ):
        customs = placement.resource_classes if row.kind == "resource_class" else placement.traits
        customs[row.name] = int(row.created_ms)
    if placement.providers or placement.consumers or placement.resource_classes or placement.traits:
        state.placement = placement
