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

:class:`WriterFeed` makes the rows of the providers that changed the same
way, for ``berth serve``'s live snapshot: its writers run in the process,
so what they commit need not be read back from the view.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from consumers.partition_writer import PartitionWriter, locked
from consumers.server_groups import GroupRule
from consumers.snapshot_source import Fed, Placed, PutPlaced, provider_from_row
from ledger.partitioner import partition_for
from projections.batch import Batch
from projections.fitting import use_json
from projections.state import PartitionState, ProviderState, Reservation, placements
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


class _Inventory(NamedTuple):
    """An inventory's row as the view's reader returns it (the columns a
    live snapshot's update reads)."""

    provider_id: str
    resource_class: str
    total: int
    reserved: int
    min_unit: int
    max_unit: int
    step_size: int
    allocation_ratio: float
    held: int
    consumed: int


def _inventories(provider: ProviderState) -> list[_Inventory]:
    """Its inventories' rows, as :mod:`projections.view.usage_rows` writes them."""
    own, held, consumed = provider.own.limits, provider.held, provider.consumed
    return [
        _Inventory(
            provider.provider_id,
            rc,
            limits.total,
            limits.reserved,
            limits.min_unit,
            limits.max_unit,
            limits.step_size,
            float(own[i].allocation_ratio),
            held[i],
            consumed[i],
        )
        for i, (rc, limits) in enumerate(
            zip(provider.layout.classes, provider.layout.limits, strict=True)
        )
    ]


def _placed(reservation: Reservation) -> Placed:
    """What an active reservation places where, as its view row says it."""
    return Placed(
        reservation.consumer_id,
        tuple(provider.provider_id for provider, _ in reservation.items),
        reservation.group,
        tuple(sorted(reservation.tags)),
        reservation.membership,
    )


_READ_BACK = frozenset({"provider_registered", "provider_retired", "aggregate_defined"})
"""Events whose changes a feed leaves to a read of the view: providers come
or go, an aggregate's metadata reaches every member (as do OpenStack
Placement's events, ``placement_*``, which count on providers they do not name)."""
_MOST_RECORDS = 20_000
"""Records a feed keeps the batches of at most between two reads; past that
the next read is of the view, which then costs less than going through
them (and a process whose scheduler is idle while its writers work keeps
no more)."""


class WriterFeed:
    """What the writers of every partition, all in this process (``berth
    serve``), commit to the view, told from the batches they commit and
    their states (a :class:`~consumers.snapshot_source.ChangeFeed`): the
    subjects of a batch's outcomes, and the providers its events name,
    are what changed, as the view's reader finds them from the outcome
    rows and the providers' offsets."""

    def __init__(self, writers: Sequence[PartitionWriter], most: int = _MOST_RECORDS) -> None:
        self.writers = list(writers)
        self.most = most
        self._lock = threading.Lock()
        self._batches: list[Batch] = []
        self._records = 0
        self._overflowed = False
        for writer in self.writers:
            writer.on_commit = then(writer.on_commit, self._committed)

    def _committed(self, batch: Batch) -> None:
        with self._lock:
            if not self._overflowed:
                self._batches.append(batch)
                self._records += batch.end - batch.start
                if self._records > self.most:
                    self._batches.clear()
                    self._overflowed = True

    def since(self, seen: Mapping[int, int], put: PutPlaced) -> Fed | None:
        # the writers' locks: no round moves their states meanwhile (the
        # Placement API's writes drive one from their own threads)
        with locked(self.writers) as writers, self._lock:
            batches, self._batches, self._records = self._batches, [], 0
            overflowed, self._overflowed = self._overflowed, False
            if overflowed or any(w.pending is not None for w in writers):
                return None  # (a state ahead of the view's offset: decided, not committed)
            # (a partition the view has no offset for yet is not named, as the view's read does not)
            offsets = {
                w.partition: w.next_offset for w in writers if w.next_offset or w.partition in seen
            }
            if not seen.keys() <= offsets.keys():
                return None
            followed = _following(batches, seen, offsets)
            if followed is None:
                return None
            states = {w.partition: w.state for w in writers}
            touched = _touched(followed, states, put)
            if touched is None:
                return None
            return _rows(touched, list(states.values()), offsets)


def then(
    first: Callable[[Batch], object] | None, second: Callable[[Batch], object]
) -> Callable[[Batch], object]:
    """A writer's ``on_commit`` (or ``on_decided``) that tells ``first`` (if
    any), then ``second``."""
    if first is None:
        return second

    def both(batch: Batch) -> None:
        first(batch)
        second(batch)

    return both


def _following(
    batches: list[Batch], seen: Mapping[int, int], offsets: Mapping[int, int]
) -> list[Batch] | None:
    """The batches past ``seen``, if they are every one from there to
    ``offsets`` (else None)."""
    reach = dict(seen)
    followed = []
    for batch in batches:  # committed in each partition's order
        at = reach.get(batch.partition, 0)
        if batch.end <= at:
            continue  # the view was read past it
        if batch.start != at:
            return None
        reach[batch.partition] = batch.end
        followed.append(batch)
    if any(reach.get(p, 0) != end for p, end in offsets.items()):
        return None
    return followed


def _touched(
    batches: list[Batch], states: Mapping[int, PartitionState], put: PutPlaced
) -> set[str] | None:
    """The providers ``batches`` changed, the placements of the
    reservations they decided on given to ``put``; None if one holds an
    event left to a read of the view."""
    touched: set[str] = set()
    for batch in batches:
        state = states[batch.partition]
        for applied in batch.applied:
            event = applied.event
            if event.type in _READ_BACK or event.type.startswith("placement_"):
                return None
            named = getattr(event, "provider_id", None)
            if isinstance(named, str):
                touched.add(named)
            for outcome in applied.outcomes:
                subject = outcome.subject
                if subject in state.providers:
                    touched.add(subject)
                reservation = state.reservations.get(subject)
                touched |= put(subject, None if reservation is None else _placed(reservation))
    return touched


def _rows(touched: set[str], states: list[PartitionState], offsets: dict[int, int]) -> Fed | None:
    """The rows of the providers ``touched``; None if one is in no state."""
    plain = _Plain()
    changed: list[_Row] = []
    usage: list[_Inventory] = []
    for pid in sorted(touched):
        provider = next((s.providers[pid] for s in states if pid in s.providers), None)
        if provider is None:
            return None
        changed.append(_row(provider, plain))
        usage += _inventories(provider)
    return Fed(offsets, changed, usage)
