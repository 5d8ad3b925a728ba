"""Reading Placement's model from the view: providers, their inventories
and usage (the inventories rows Berth's reservations count in too),
consumers and the custom names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, bindparam, select

from projections.view.engine import one_snapshot
from projections.view.tables import (
    inventories,
    placement_consumers,
    placement_names,
    placement_providers,
)


@dataclass
class Provider:
    uuid: str
    name: str
    generation: int
    parent: str | None
    root: str
    traits: list[str]
    aggregates: list[str]
    inventories: dict[str, dict[str, Any]]
    created_ms: int
    updated_ms: int
    usage: dict[str, int] = field(default_factory=dict)


@dataclass
class Consumer:
    uuid: str
    project_id: str
    user_id: str
    consumer_type: str | None
    generation: int
    allocations: dict[str, dict[str, int]]
    created_ms: int
    updated_ms: int


def _provider(row: Any) -> Provider:
    return Provider(
        uuid=row.uuid,
        name=row.name,
        generation=int(row.generation),
        parent=row.parent_uuid,
        root=row.root_uuid,
        traits=list(row.traits),
        aggregates=list(row.aggregates),
        inventories=dict(row.inventories),
        created_ms=int(row.created_ms),
        updated_ms=int(row.updated_ms),
    )


def providers(engine: Engine) -> list[Provider]:
    """Every provider, with its usage, in creation order."""
    with one_snapshot(engine) as conn:  # a generation with the usage it counts
        return provider_rows(conn)


def provider_rows(conn: Connection, where: ColumnElement[bool] | None = None) -> list[Provider]:
    """The providers (those ``where`` picks, or all), in creation order;
    with their usage when all are read (the caller reads it for a few)."""
    query = select(placement_providers).order_by(
        placement_providers.c.created_ms, placement_providers.c.uuid
    )
    if where is not None:
        return [_provider(r) for r in conn.execute(query.where(where))]
    found = [_provider(r) for r in conn.execute(query)]
    by_uuid = {p.uuid: p for p in found}
    if by_uuid:
        used = conn.execute(
            select(
                inventories.c.provider_id,
                inventories.c.resource_class,
                inventories.c.held,
                inventories.c.consumed,
            )
        )
        for pid, rc, held, consumed in used:
            p = by_uuid.get(pid)
            if p is not None:
                p.usage[rc] = int(held) + int(consumed)
    return found


def provider(engine: Engine, uuid: str) -> Provider | None:
    with one_snapshot(engine) as conn:  # a generation with the usage it counts
        row = conn.execute(
            select(placement_providers).where(placement_providers.c.uuid == uuid)
        ).first()
        if row is None:
            return None
        found = _provider(row)
        for rc, held, consumed in conn.execute(
            select(inventories.c.resource_class, inventories.c.held, inventories.c.consumed).where(
                inventories.c.provider_id == uuid
            )
        ):
            found.usage[rc] = int(held) + int(consumed)
    return found


_EXISTING = select(placement_providers.c.uuid).where(
    placement_providers.c.uuid.in_(bindparam("uuids", expanding=True))
)
"""Built once: building the statement cost more than running it (every write
of allocations asks)."""


def existing_uuids(engine: Engine, uuids: list[str]) -> set[str]:
    """Which of ``uuids`` are providers."""
    if not uuids:
        return set()
    with engine.connect() as conn:
        return {uuid for (uuid,) in conn.execute(_EXISTING, {"uuids": uuids})}


def _consumer(row: Any) -> Consumer:
    return Consumer(
        uuid=row.uuid,
        project_id=row.project_id,
        user_id=row.user_id,
        consumer_type=row.consumer_type,
        generation=int(row.generation),
        allocations={p: dict(a) for p, a in row.allocations.items()},
        created_ms=int(row.created_ms),
        updated_ms=int(row.updated_ms),
    )


def consumer(engine: Engine, uuid: str) -> Consumer | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(placement_consumers).where(placement_consumers.c.uuid == uuid)
        ).first()
    return None if row is None else _consumer(row)


def consumers(engine: Engine) -> list[Consumer]:
    with engine.connect() as conn:
        rows = conn.execute(select(placement_consumers).order_by(placement_consumers.c.uuid))
        return [_consumer(r) for r in rows]


def custom_names(engine: Engine, kind: str) -> dict[str, int]:
    """Custom resource classes or traits, with when each was made."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(placement_names.c.name, placement_names.c.created_ms).where(
                placement_names.c.kind == kind
            )
        )
        return {name: int(ms) for name, ms in rows}
