"""Builds the placement engine's snapshot from the SQL view.

Usage, traits, aggregates and state come from the providers and inventories
tables; what is placed where (instances, server-group members, tags) from the
active reservations. This is the scheduler's picture; it may be stale, and
the partition's writer has the last word on every claim.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, Row, select

from placement.model import Provider, Snapshot
from projections.view.tables import inventories, providers, reservations

_ACTIVE = ("held", "consumed")


def snapshot_from_view(engine: Engine, placements: bool = True) -> Snapshot:
    """The current view as a snapshot, providers in id order. ``placements``
    False skips what is placed where (instances, groups, tags): a scheduler
    whose requests use no such hints saves reading every active reservation."""
    active: Sequence[Row[Any, Any, Any, Any]] = ()
    with engine.connect() as conn:
        provider_rows = conn.execute(select(providers).order_by(providers.c.provider_id)).all()
        inventory_rows = conn.execute(select(inventories)).all()
        if placements:
            active = conn.execute(
                select(
                    reservations.c.consumer_id,
                    reservations.c["items"],
                    reservations.c.anti_affinity_group,
                    reservations.c.tags,
                ).where(reservations.c.status.in_(_ACTIVE))
            ).all()
    instances: dict[str, set[str]] = defaultdict(set)
    groups: dict[str, Counter[str]] = defaultdict(Counter)
    tags: dict[str, Counter[str]] = defaultdict(Counter)
    for consumer_id, items, group, reservation_tags in active:
        for item in items:
            pid = item["provider_id"]
            instances[pid].add(consumer_id)
            if group:
                groups[pid][group] += 1
            for tag in reservation_tags:
                tags[pid][tag] += 1
    by_provider: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in inventory_rows:
        by_provider[row.provider_id][row.resource_class] = {
            "total": row.total,
            "reserved": row.reserved,
            "used": row.held + row.consumed,
            "allocation_ratio": row.allocation_ratio,
            "min_unit": row.min_unit,
            "max_unit": row.max_unit,
            "step_size": row.step_size,
        }
    records = [
        Provider(
            provider_id=row.provider_id,
            host=row.name,
            state=row.state,
            traits=frozenset(row.traits),
            aggregates=frozenset(row.aggregates),
            instances=frozenset(instances.get(row.provider_id, ())),
            groups=dict(groups.get(row.provider_id, {})),
            tags=dict(tags.get(row.provider_id, {})),
        )
        for row in provider_rows
    ]
    return Snapshot.build(records, by_provider)
