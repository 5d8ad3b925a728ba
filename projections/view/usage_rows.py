"""The view's rows of what claims draw from: providers and their
inventories (rewritten when reshaped, their usage or metrics updated
otherwise), and identifier pools (rewritten when defined, their counts
updated otherwise)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii
from typing import Any

from sqlalchemy import bindparam, delete, update

from projections.batch import Batch
from projections.fitting import use_json
from projections.state import PartitionState, ProviderState
from projections.view.plan import Plan, chunks
from projections.view.tables import aggregates, inventories, pools, provider_usage, providers
from schemas.events import PoolDefined
from schemas.outcomes import Kind

_UPDATE_USAGE = (
    "UPDATE inventories SET held = ?, consumed = ?, free = ? "
    "WHERE provider_id = ? AND resource_class = ?"
)
# a claim changes only its providers' short rows (provider_usage): their
# descriptions and metrics, in providers, stay where they are on disk
_UPDATE_ACTIVE = (
    "UPDATE provider_usage SET active_reservations = ?, updated_offset = ? WHERE provider_id = ?"
)
_UPDATE_ACTIVE_PINNED = (
    "UPDATE provider_usage SET active_reservations = ?, updated_offset = ?, topology_use = ? "
    "WHERE provider_id = ?"
)


def write_providers(
    plan: Plan, state: PartitionState, offset: int, held: dict[str, int] | None
) -> None:
    """Rewrite the providers that changed shape; update usage of the others,
    or note in ``held`` that it changed in the batch ending at ``offset``."""
    reshaped = sorted(state.reshaped)
    used = state.touched - state.reshaped
    if state.metered:
        _write_metrics(plan, state, sorted(state.metered - state.reshaped), offset)
        state.metered.clear()
    state.reshaped.clear()
    state.touched.clear()
    if reshaped:
        _rewrite_providers(plan, state, reshaped, offset)
    if held is None:
        write_usage(plan, state, [(pid, offset) for pid in sorted(used)])
        return
    for pid in reshaped:
        held.pop(pid, None)  # rewritten as it is now
    for pid in used:
        held[pid] = offset


def write_usage(plan: Plan, state: PartitionState, changed: list[tuple[str, int]]) -> None:
    """Update the usage of providers, each with the offset of the batch that
    changed it last."""
    usage: list[tuple[Any, ...]] = []
    active: list[tuple[Any, ...]] = []
    pinned: list[tuple[Any, ...]] = []
    for pid, offset in changed:
        provider = state.providers.get(pid)
        if provider is None:
            continue
        layout = provider.layout
        held, consumed = provider.held, provider.consumed
        for i, rc in enumerate(layout.classes):
            free = layout.limits[i].capacity - held[i] - consumed[i]
            usage.append((held[i], consumed[i], free, pid, rc))
        if provider.topology_use is None:
            active.append((provider.active, offset, pid))
        else:
            # once a claim held some of its topology, each change of its usage
            # writes what is held (an empty use too: given back), in the same
            # statement as the rest of the row
            pinned.append((provider.active, offset, use_json(provider.topology_use), pid))
    plan.bulk(_UPDATE_USAGE, usage)
    plan.bulk(_UPDATE_ACTIVE, active)
    plan.bulk(_UPDATE_ACTIVE_PINNED, pinned)


_UPDATE_METRICS = (
    "UPDATE providers SET metrics = ?, metrics_at_ms = ?, num_io_ops = ?, build_failures = ?, "
    "metrics_offset = ? WHERE provider_id = ?"
)


def _write_metrics(plan: Plan, state: PartitionState, metered: list[str], offset: int) -> None:
    """Update the metrics of providers whose latest report is all that
    changed; their metrics_offset tells the schedulers' live snapshots to
    read these columns again, and only these."""
    rows = []
    for pid in metered:
        provider = state.providers.get(pid)
        if provider is None:
            continue
        m = provider.metrics
        rows.append((_metrics_json(m.values), m.at_ms, m.num_io_ops, m.build_failures, offset, pid))
    plan.bulk(_UPDATE_METRICS, rows)


_INSERT_PROVIDER = (
    'INSERT INTO providers (provider_id, "partition", name, state, traits, aggregates, '
    "availability_zone, host, host_ip, capabilities, metadata, numa_cells, pci_devices, "
    "metrics, metrics_at_ms, num_io_ops, build_failures, shape_offset) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_USAGE = (
    'INSERT INTO provider_usage (provider_id, "partition", active_reservations, '
    "updated_offset, topology_use) VALUES (?, ?, ?, ?, ?)"
)
_INSERT_INVENTORY = (
    'INSERT INTO inventories (provider_id, resource_class, "partition", total, reserved, '
    "min_unit, max_unit, step_size, allocation_ratio, capacity, held, consumed, free) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# SQLAlchemy's JSON type writes json.dumps' default form: rows written here
# read back the same as rows it wrote
_json_column = json.dumps


def _metrics_json(values: Mapping[str, object]) -> str:
    """``_json_column(values)`` for a report's metrics, the same text at about
    half the cost: a report is the most frequent row a writer rewrites, and
    its metrics are a flat mapping of names to floats (finite: the event
    refuses others), which json.dumps writes as ``repr`` writes them (read
    as objects, so that compiled code formats the very objects json.dumps
    would)."""
    for value in values.values():
        if type(value) is not float:
            return _json_column(values)
    items = [f"{encode_basestring_ascii(k)}: {v!r}" for k, v in values.items()]
    return "{" + ", ".join(items) + "}"


def _rewrite_providers(plan: Plan, state: PartitionState, reshaped: list[str], offset: int) -> None:
    for chunk in chunks(reshaped, 500):
        plan.execute(delete(inventories).where(inventories.c.provider_id.in_(chunk)))
        plan.execute(delete(provider_usage).where(provider_usage.c.provider_id.in_(chunk)))
        plan.execute(delete(providers).where(providers.c.provider_id.in_(chunk)))
    present = [state.providers[pid] for pid in reshaped if pid in state.providers]
    partition = state.partition
    plan.bulk(_INSERT_PROVIDER, [_provider_row(p, partition, offset) for p in present])
    plan.bulk(
        _INSERT_USAGE,
        [(p.provider_id, partition, p.active, offset, use_json(p.topology_use)) for p in present],
    )
    plan.bulk(
        _INSERT_INVENTORY,
        [row for p in present for row in _inventory_rows(p, partition)],
    )


def _provider_row(provider: ProviderState, partition: int, offset: int) -> tuple[Any, ...]:
    described = provider.description
    metrics = provider.metrics
    return (
        provider.provider_id,
        partition,
        provider.name,
        provider.state,
        _json_column(sorted(provider.traits)),
        _json_column(sorted(provider.aggregates)),
        described.availability_zone,
        described.host,
        described.host_ip,
        _json_column(described.capabilities),
        _json_column(described.metadata),
        described.numa_cells_json,
        described.pci_devices_json,
        _metrics_json(metrics.values),
        metrics.at_ms,
        metrics.num_io_ops,
        metrics.build_failures,
        offset,
    )


def _inventory_rows(provider: ProviderState, partition: int) -> list[tuple[Any, ...]]:
    layout = provider.layout
    held, consumed = provider.held, provider.consumed
    pid = provider.provider_id
    own = provider.own.limits
    rows = []
    for i, rc in enumerate(layout.classes):
        limits = layout.limits[i]
        rows.append(
            (
                pid,
                rc,
                partition,
                limits.total,
                limits.reserved,
                limits.min_unit,
                limits.max_unit,
                limits.step_size,
                own[i].allocation_ratio,
                limits.capacity,
                held[i],
                consumed[i],
                limits.capacity - held[i] - consumed[i],
            )
        )
    return rows


def write_aggregates(plan: Plan, state: PartitionState, offset: int) -> None:
    """Rewrite this partition's copies of the aggregates defined since the last batch."""
    if not state.aggregates_touched:
        return
    touched = sorted(state.aggregates_touched)
    state.aggregates_touched.clear()
    partition = state.partition
    for chunk in chunks(touched, 500):
        plan.execute(
            delete(aggregates).where(
                aggregates.c.aggregate_id.in_(chunk), aggregates.c.partition == partition
            )
        )
    plan.bulk(
        _INSERT_AGGREGATE,
        [(aid, partition, _json_column(state.aggregates[aid]), offset) for aid in touched],
    )


_INSERT_AGGREGATE = (
    'INSERT INTO aggregates (aggregate_id, "partition", metadata, updated_offset) '
    "VALUES (?, ?, ?, ?)"
)


def _definition(event: PoolDefined) -> dict[str, Any]:
    """What :meth:`PoolSpace.of` needs to rebuild the pool."""
    return {
        "kind": event.kind,
        "cidr": event.cidr,
        "first": event.first,
        "last": event.last,
        "members": list(event.members),
        "excluded": sorted(event.excluded),
    }


def write_pools(plan: Plan, state: PartitionState, batch: Batch) -> None:
    """Rewrite the pools (re)defined in this batch; update the counts of the others."""
    if not state.pools_touched:
        return
    touched = sorted(state.pools_touched)
    state.pools_touched.clear()
    defined: dict[str, PoolDefined] = {}
    for applied in batch.applied:
        event = applied.event
        if type(event) is PoolDefined and applied.outcomes[-1].kind == Kind.APPLIED:
            defined[event.pool_id] = event  # the last definition of the batch stands
    if defined:
        ids = sorted(defined)
        for chunk in chunks(ids, 500):
            plan.execute(delete(pools).where(pools.c.pool_id.in_(chunk)))
        plan.execute(
            pools.insert(),
            [
                {
                    "pool_id": pid,
                    "partition": state.partition,
                    "kind": defined[pid].kind,
                    "definition": _definition(defined[pid]),
                    "size": state.pools[pid].space.size,
                    "taken": state.pools[pid].taken,
                    "free": state.pools[pid].free.count,
                    "updated_offset": batch.end,
                }
                for pid in ids
            ],
        )
    counts = [
        {
            "b_pool_id": pid,
            "taken": pool.taken,
            "free": pool.free.count,
            "updated_offset": batch.end,
        }
        for pid in touched
        if pid not in defined and (pool := state.pools.get(pid)) is not None
    ]
    if counts:
        plan.execute(
            update(pools)
            .where(pools.c.pool_id == bindparam("b_pool_id"))
            .values(
                taken=bindparam("taken"),
                free=bindparam("free"),
                updated_offset=bindparam("updated_offset"),
            ),
            counts,
        )
