"""The view's rows of Placement's model (issue 32): each provider, consumer
and custom name a batch changed, deleted and written again as it is at the
end of the batch (a provider gone is only deleted). Deleting them all
first lets a batch hand a provider's name to another.

Providers and consumers go through the driver's cursor (:meth:`Plan.bulk`),
as the other hot rows do: every write of allocations rewrites a consumer
and its providers, and building, compiling and binding SQLAlchemy
statements for them cost the writer more than the database did."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, tuple_

from projections.placement.model import PlacementState
from projections.state import PartitionState
from projections.view.plan import Plan, compact_json
from projections.view.tables import placement_names

_DELETE_PROVIDER = "DELETE FROM placement_providers WHERE uuid = ?"
_INSERT_PROVIDER = (
    'INSERT INTO placement_providers (uuid, "partition", name, generation, parent_uuid, '
    "root_uuid, traits, aggregates, inventories, created_ms, updated_ms, updated_offset) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_DELETE_CONSUMER = "DELETE FROM placement_consumers WHERE uuid = ?"
_INSERT_CONSUMER = (
    'INSERT INTO placement_consumers (uuid, "partition", project_id, user_id, consumer_type, '
    "generation, allocations, created_ms, updated_ms, updated_offset) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


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
    plan.bulk(_DELETE_PROVIDER, [(uuid,) for uuid in uuids])
    rows: list[tuple[Any, ...]] = []
    for uuid in uuids:
        p = placement.providers.get(uuid)
        if p is None:
            continue
        inventories = {rc: inv.model_dump(mode="json") for rc, inv in sorted(p.inventories.items())}
        rows.append(
            (
                uuid,
                partition,
                p.name,
                p.generation,
                p.parent,
                p.root,
                compact_json(sorted(p.traits)),
                compact_json(list(p.aggregates)),
                compact_json(inventories),
                p.created_ms,
                p.updated_ms,
                offset,
            )
        )
    plan.bulk(_INSERT_PROVIDER, rows)


def _consumers(
    plan: Plan, partition: int, placement: PlacementState, uuids: list[str], offset: int
) -> None:
    plan.bulk(_DELETE_CONSUMER, [(uuid,) for uuid in uuids])
    rows: list[tuple[Any, ...]] = []
    for uuid in uuids:
        c = placement.consumers.get(uuid)
        if c is None:
            continue
        rows.append(
            (
                uuid,
                partition,
                c.project_id,
                c.user_id,
                c.consumer_type,
                c.generation,
                compact_json(c.allocations),
                c.created_ms,
                c.updated_ms,
                offset,
            )
        )
    plan.bulk(_INSERT_CONSUMER, rows)


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
