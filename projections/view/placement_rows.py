"""The view's rows of Placement's model (issue 32): each provider, consumer
and custom name a batch changed, deleted and written again as it is at the
end of the batch (a provider gone is only deleted). Deleting them all
first lets a batch hand a provider's name to another."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, tuple_

from projections.placement.model import PlacementState
from projections.state import PartitionState
from projections.view.plan import Plan, chunks
from projections.view.tables import placement_consumers, placement_names, placement_providers


def write_placement(plan: Plan, state: PartitionState, offset: int) -> None:
    placement: PlacementState | None = state.placement
    if placement is None:
        return
    if placement.touched_providers:
        _providers(plan, state.partition, placement, sorted(placement.touched_providers), offset)
        placement.touched_providers.clear()
    if placement.touched_consumers:
        _consumers(plan, state.partition, placement, sorted(placement.touched_consumers), offset)
        placement.touched_consumers.clear()
    if placement.touched_names:
        _names(plan, state.partition, placement, sorted(placement.touched_names))
        placement.touched_names.clear()


def _providers(
    plan: Plan, partition: int, placement: PlacementState, uuids: list[str], offset: int
) -> None:
    for some in chunks(uuids, 500):
        plan.execute(delete(placement_providers).where(placement_providers.c.uuid.in_(some)))
    rows: list[dict[str, Any]] = []
    for uuid in uuids:
        p = placement.providers.get(uuid)
        if p is None:
            continue
        rows.append(
            {
                "uuid": uuid,
                "partition": partition,
                "name": p.name,
                "generation": p.generation,
                "parent_uuid": p.parent,
                "root_uuid": p.root,
                "traits": sorted(p.traits),
                "aggregates": list(p.aggregates),
                "inventories": {
                    rc: inv.model_dump(mode="json") for rc, inv in sorted(p.inventories.items())
                },
                "created_ms": p.created_ms,
                "updated_ms": p.updated_ms,
                "updated_offset": offset,
            }
        )
    if rows:
        plan.execute(insert(placement_providers), rows)


def _consumers(
    plan: Plan, partition: int, placement: PlacementState, uuids: list[str], offset: int
) -> None:
    for some in chunks(uuids, 500):
        plan.execute(delete(placement_consumers).where(placement_consumers.c.uuid.in_(some)))
    rows: list[dict[str, Any]] = []
    for uuid in uuids:
        c = placement.consumers.get(uuid)
        if c is None:
            continue
        rows.append(
            {
                "uuid": uuid,
                "partition": partition,
                "project_id": c.project_id,
                "user_id": c.user_id,
                "consumer_type": c.consumer_type,
                "generation": c.generation,
                "allocations": c.allocations,
                "created_ms": c.created_ms,
                "updated_ms": c.updated_ms,
                "updated_offset": offset,
            }
        )
    if rows:
        plan.execute(insert(placement_consumers), rows)


def _names(
    plan: Plan, partition: int, placement: PlacementState, names: list[tuple[str, str]]
) -> None:
    plan.execute(
        delete(placement_names).where(
            tuple_(placement_names.c.kind, placement_names.c.name).in_(names)
        )
    )
    rows = []
    for kind, name in names:
        customs = placement.resource_classes if kind == "resource_class" else placement.traits
        if name in customs:
            rows.append(
                {"kind": kind, "name": name, "partition": partition, "created_ms": customs[name]}
            )
    if rows:
        plan.execute(insert(placement_names), rows)
