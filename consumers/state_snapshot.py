"""The engine's snapshot and the server groups' rules made straight from
the partition writers' states: what :func:`consumers.snapshot_source.snapshot_from_view`
and :func:`consumers.server_groups.read_rules` read from the view those
states wrote, without writing or reading the view.

A view's rows are a function of its writers' states (``projections/view/``
makes each row from the state as a batch leaves it), so the rows are made
here from the states as those modules make them, their JSON columns as the
view's reader decodes them, and the snapshot built from them as
:mod:`snapshot_source` builds it (the simulator checks the two are the
same, every so many steps). ``berth explain --request`` decides the records since a
checkpoint on the checkpoint's states in memory and ranks on this: the
view's rows written and read back cost most of a replay.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from consumers.server_groups import GroupRule
from consumers.snapshot_source import provider_from_row
from ledger.partitioner import partition_for
from projections.fitting import use_json
from projections.state import PartitionState, ProviderState, placements
from scheduling.model import Aggregate, FloatArray, IntArray, Provider, Snapshot


class _Row(NamedTuple):
    """A provider's row as the view's reader returns it (the columns
    :func:`provider_from_row` reads)."""

    provider_id: str
    name: str
    state: str
    traits: Any
    aggregates: Any
    availability_zone: str | None
    host: str | None
    host_ip: str | None
    capabilities: Any
    metadata: Any
    numa_cells: str
    pci_devices: str
    metrics: Any
    metrics_at_ms: int | None
    num_io_ops: int
    build_failures: int
    topology_use: str


class _Plain:
    """A value of a JSON column as the view's reader returns it: what
    ``json.loads`` makes of the ``json.dumps`` the writer wrote, made once
    per object (descriptions are shared by the providers of one model)."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[object, Any]] = {}

    def __call__(self, value: object) -> Any:
        found = self.seen.get(id(value))
        if found is None or found[0] is not value:
            found = self.seen[id(value)] = (value, json.loads(json.dumps(value)))
        return found[1]


def _row(provider: ProviderState, plain: _Plain) -> _Row:
    """Its row, as :mod:`projections.view.usage_rows` writes it and the
    view's reader returns it (a list of names is its JSON read back)."""
    described, metrics = provider.description, provider.metrics
    return _Row(
        provider.provider_id,
        provider.name,
        provider.state,
        sorted(provider.traits),
        sorted(provider.aggregates),
        described.availability_zone,
        described.host,
        described.host_ip,
        plain(described.capabilities),
        plain(described.metadata),
        described.numa_cells_json,
        described.pci_devices_json,
        plain(metrics.values),
        metrics.at_ms,
        metrics.num_io_ops,
        metrics.build_failures,
        use_json(provider.topology_use),
    )


_Columns = tuple[list[int], IntArray, FloatArray]
"""A layout in a snapshot's columns: the snapshot's column of each of its
classes, and its (classes x total, reserved, min, max, step) numbers and
allocation ratios at every column of the snapshot (a class it lacks: zeros,
ratio 1, as :meth:`Snapshot.build` has it)."""


def _columns(provider: ProviderState, column: dict[str, int]) -> _Columns:
    layout, own = provider.layout, provider.own.limits
    numbers = np.zeros((len(column), 5), dtype=np.int64)
    ratios = np.ones(len(column), dtype=np.float64)
    at = []
    for i, (rc, limits) in enumerate(zip(layout.classes, layout.limits, strict=True)):
        c = column[rc]
        at.append(c)
        numbers[c] = (
            limits.total,
            limits.reserved,
            limits.min_unit,
            limits.max_unit,
            limits.step_size,
        )
        ratios[c] = float(own[i].allocation_ratio)
    return at, numbers, ratios


def _used(provider: ProviderState) -> list[int]:
    """What its reservations hold and consume of each class of its layout."""
    return [h + c for h, c in zip(provider.held, provider.consumed, strict=True)]


def _built(
    records: list[Provider], providers: list[ProviderState], aggregates: dict[str, Aggregate]
) -> Snapshot:
    """What :meth:`Snapshot.build` makes of the providers' inventories and
    usage as ``snapshot_source`` reads their rows, made from their layouts
    (a handful, shared) without those rows: only what is used is counted
    provider by provider."""
    classes = tuple(sorted({rc for p in providers for rc in p.layout.classes}))
    column = {rc: c for c, rc in enumerate(classes)}
    n, r = len(providers), len(classes)
    kinds: dict[tuple[int, int], int] = {}
    made: list[_Columns] = []
    kind_of = np.empty(n, dtype=np.intp)
    used = [0] * (n * r)
    for row, provider in enumerate(providers):
        key = (id(provider.layout), id(provider.own))
        kind = kinds.get(key)
        if kind is None:
            kind = kinds[key] = len(made)
            made.append(_columns(provider, column))
        kind_of[row] = kind
        base = row * r
        for c, amount in zip(made[kind][0], _used(provider), strict=True):
            used[base + c] = amount
    numbers = np.stack([m[1] for m in made])[kind_of] if made else np.zeros((n, r, 5), np.int64)
    ratios = np.stack([m[2] for m in made])[kind_of] if made else np.ones((n, r))
    used_table = np.array(used, dtype=np.int64).reshape(n, r)
    return Snapshot.from_table(records, classes, numbers, used_table, ratios, aggregates)


def _aggregates(states: Sequence[PartitionState], plain: _Plain) -> dict[str, Aggregate]:
    """Every aggregate's metadata as its home partition's copy says, else
    the lowest partition's (as ``snapshot_source`` picks among the rows)."""
    found: dict[str, tuple[bool, int, Aggregate]] = {}
    for state in states:
        for aid, metadata in state.aggregates.items():
            home = partition_for(aid.encode(), state.partitions) == state.partition
            key = (not home, state.partition)
            held = found.get(aid)
            if held is None or key < held[:2]:
                found[aid] = (*key, Aggregate(aid, plain(metadata)))
    return {aid: found[aid][2] for aid in sorted(found)}


def snapshot_of(states: Sequence[PartitionState]) -> Snapshot:
    """The snapshot a scheduler reads (placements included) from the view
    that ``states`` wrote."""
    plain = _Plain()
    instances, groups, tags = placements(list(states))
    rows = sorted(
        (
            (_row(provider, plain), provider)
            for state in states
            for provider in state.providers.values()
        ),
        key=lambda pair: pair[0].provider_id,
    )
    records = [provider_from_row(row, instances, groups, tags) for row, _ in rows]
    return _built(records, [provider for _, provider in rows], _aggregates(states, plain))


def rules_of(states: Sequence[PartitionState]) -> dict[str, GroupRule]:
    """Every server group's rule, by id, as :func:`read_rules` reads it."""
    rules = {
        gid: GroupRule(
            gid,
            group.policy,  # type: ignore[arg-type]  # as the view's column holds it
            group.max_server_per_host,
            state.partition,
            group.project_id,
            group.user_id,
        )
        for state in states
        for gid, group in state.groups.items()
    }
    return dict(sorted(rules.items()))
