"""Builds the placement engine's snapshot from the SQL view.

Usage, traits, aggregates and state come from the providers and inventories
tables; what is placed where (instances, server-group members, tags) from the
active reservations. This is the scheduler's picture; it may be stale, and
the partition's writer has the last word on every claim.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, Engine, Row, func, or_, select

from placement.model import RESOURCE_ARRAYS, Provider, Snapshot
from projections.view.tables import inventories, partition_offsets, providers, reservations

_ACTIVE = ("held", "consumed", "pending")
"""Statuses of reservations that occupy capacity (a pending hold does, until
its transaction is decided or its deadline passes)."""


def snapshot_from_view(engine: Engine, placements: bool = True) -> Snapshot:
    """The current view as a snapshot, providers in id order. ``placements``
    False skips what is placed where (instances, groups, tags): a scheduler
    whose requests use no such hints saves reading every active reservation."""
    with engine.connect() as conn:
        return _read(conn, placements)


def _provider(
    row: Any,
    instances: dict[str, set[str]],
    groups: dict[str, Counter[str]],
    tags: dict[str, Counter[str]],
) -> Provider:
    return Provider(
        provider_id=row.provider_id,
        host=row.name,
        state=row.state,
        traits=frozenset(row.traits),
        aggregates=frozenset(row.aggregates),
        instances=frozenset(instances.get(row.provider_id, ())),
        groups=dict(groups.get(row.provider_id, {})),
        tags=dict(tags.get(row.provider_id, {})),
    )


def _read(conn: Connection, placements: bool) -> Snapshot:
    active: Sequence[Row[Any, Any, Any, Any]] = ()
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
    records = [_provider(row, instances, groups, tags) for row in provider_rows]
    return Snapshot.build(records, by_provider)


class LiveSnapshot:
    """A snapshot of the view kept current by re-reading only the providers
    that changed since the last call (their ``updated_offset`` is past the
    partition offset seen then). Placement details (instances, groups, tags)
    are not kept: for schedulers whose requests use no such hints."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.snapshot: Snapshot | None = None
        self.seen: dict[int, int] = {}

    def __call__(self) -> Snapshot:
        with self.engine.connect() as conn:  # one read transaction: one consistent view
            query = select(partition_offsets.c.partition, partition_offsets.c.next_offset)
            offsets: dict[int, int] = {
                int(row.partition): int(row.next_offset) for row in conn.execute(query)
            }
            if self.snapshot is None:
                return self._full(conn, offsets)
            changed = (
                [
                    row
                    for row in conn.execute(
                        select(providers).where(
                            or_(
                                *(
                                    (providers.c.partition == p)
                                    & (providers.c.updated_offset > self.seen.get(p, -1))
                                    for p in offsets
                                )
                            )
                        )
                    )
                ]
                if offsets
                else []
            )
            if not changed:
                self.seen = offsets
                return self.snapshot
            snapshot = self.snapshot
            if any(row.provider_id not in snapshot.row_of for row in changed) or len(
                snapshot.providers
            ) != int(conn.execute(select(func.count()).select_from(providers)).scalar_one()):
                return self._full(conn, offsets)  # providers came or went
            ids = [row.provider_id for row in changed]
            usage = conn.execute(
                select(inventories).where(inventories.c.provider_id.in_(ids))
            ).all()
        records = list(snapshot.providers)
        arrays = {name: getattr(snapshot, name).copy() for name in RESOURCE_ARRAYS}
        for row in changed:
            i = snapshot.row_of[row.provider_id]
            records[i] = _provider(row, {}, {}, {})
            for name in arrays:  # as Snapshot.build leaves a class the provider lacks
                arrays[name][i] = 1 if name in ("allocation_ratio", "step_size") else 0
        for inv in usage:
            j = snapshot.column(inv.resource_class)
            if j is None:
                self.snapshot = None
                return self()  # a new resource class: rebuild
            i = snapshot.row_of[inv.provider_id]
            arrays["total"][i, j] = inv.total
            arrays["reserved"][i, j] = inv.reserved
            arrays["used"][i, j] = inv.held + inv.consumed
            arrays["allocation_ratio"][i, j] = inv.allocation_ratio
            arrays["min_unit"][i, j] = inv.min_unit
            arrays["max_unit"][i, j] = inv.max_unit
            arrays["step_size"][i, j] = max(inv.step_size, 1)
        self.snapshot = replace(snapshot, providers=tuple(records), **arrays)
        self.seen = offsets
        return self.snapshot

    def _full(self, conn: Connection, offsets: dict[int, int]) -> Snapshot:
        self.snapshot = _read(conn, placements=False)
        self.seen = offsets
        return self.snapshot
