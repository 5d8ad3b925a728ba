"""Builds the placement engine's snapshot from the SQL view.

Usage, traits, aggregates, state, descriptions (zone, host, address,
capabilities, metadata, NUMA cells and PCI devices) and the latest metrics
come from the providers and inventories tables; what is placed where
(instances, server-group members, tags) from the active reservations. This is
the scheduler's picture; it may be stale, and the partition's writer has the
last word on every claim.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from sqlalchemy import (
    Connection,
    Engine,
    Row,
    Select,
    Text,
    bindparam,
    cast,
    func,
    or_,
    select,
)

from ledger.partitioner import partition_for
from projections.view.engine import read_one_snapshot
from projections.view.tables import (
    aggregates,
    inventories,
    outcomes,
    partition_offsets,
    provider_columns,
    provider_row,
    provider_rows,
    provider_usage,
    providers,
    reservations,
    server_group_members,
)
from scheduling.balancers.base import Instance
from scheduling.model import RESOURCE_ARRAYS, Aggregate, FloatArray, IntArray, Provider, Snapshot
from scheduling.topology import free_in
from schemas.events import GuestAsks

_PROVIDER_COLUMNS = provider_columns()
"""A provider's row, its topology as text (parsed once per distinct text)."""
_INCREMENTAL_LIMIT = 20_000
"""Reservations decided on since the last call above which a live snapshot
reads everything again instead."""

ACTIVE_STATUSES = ("held", "consumed", "pending")
"""Statuses of reservations that occupy capacity (a pending hold does, until
its transaction is decided or its deadline passes)."""


_PROVIDER_COUNT = select(func.count()).select_from(providers)
_PARTITIONS = select(func.max(partition_offsets.c.partitions))
_AGGREGATES = select(aggregates)
# (the statements a live snapshot runs on every call are built once, here or
# once per set of partitions that moved: SQLAlchemy then finds each one's
# compiled form by the statement's memoized cache key instead of building
# the statement, and its key, again)


def snapshot_from_view(engine: Engine, placements: bool = True) -> Snapshot:
    """The current view as a snapshot, providers in id order. ``placements``
    False skips what is placed where (instances, groups, tags): a scheduler
    whose requests use no such hints saves reading every active reservation."""
    with engine.connect() as conn:
        read_one_snapshot(conn)  # providers, their usage and placements of one commit
        return _read(conn, placements)


def balance_inputs(engine: Engine) -> tuple[Snapshot, list[Instance], list[Instance]]:
    """The view as a snapshot with what is placed where, and the instances a
    balancer may move, read at one point of the view's history.

    Those are the consumed reservations of one item: a hold may still be
    given back, a pending one awaits its transaction, and a claim on several
    providers moves as a whole or not at all. A consumer that also holds a
    claim on another provider is being moved there (``berth balance
    --claim`` made the hold): its instance is not offered again but returned
    as leaving, for the plan to count its source as relieved of it, so the
    next plan does not move a second instance for the same excess."""
    c = reservations.c
    with engine.connect() as conn:
        read_one_snapshot(conn)
        rows = _active(
            conn,
            c.reservation_id,
            c.status,
            c.project_id,
            c.require_with_tags,
            c.require_without_tags,
        )
        snapshot = _read(conn, placements=True, active=rows)
    holds: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        if row.status == "held":
            holds[row.consumer_id].update(item["provider_id"] for item in row.items)
    instances: list[Instance] = []
    leaving: list[Instance] = []
    for row in rows:
        if row.status != "consumed" or len(row.items) != 1:
            continue
        (item,) = row.items
        moving = holds.get(row.consumer_id, set()) - {item["provider_id"]}
        (leaving if moving else instances).append(
            Instance(
                reservation_id=row.reservation_id,
                consumer_id=row.consumer_id,
                project_id=row.project_id,
                provider_id=item["provider_id"],
                resources=dict(item["resources"]),
                anti_affinity_group=row.anti_affinity_group,
                tags=frozenset(row.tags),
                require_with_tags=frozenset(row.require_with_tags),
                require_without_tags=frozenset(row.require_without_tags),
                guest=(
                    GuestAsks.model_validate(item["guest"], strict=False)
                    if "guest" in item
                    else None
                ),
                fitted="fit" in item,
            )
        )
    return snapshot, instances, leaving


def provider_from_row(
    row: Any,
    instances: Mapping[str, set[str]],
    groups: Mapping[str, Mapping[str, int]],
    tags: Mapping[str, Mapping[str, int]],
) -> Provider:
    """``row``'s record (what :func:`_records` makes of every provider's)."""
    cells, devices = free_in(row.numa_cells, row.pci_devices, row.topology_use)
    pid = row.provider_id
    placed, grouped, tagged = instances.get(pid), groups.get(pid), tags.get(pid)
    return Provider(
        provider_id=pid,
        host=row.host or row.name,
        state=row.state,
        availability_zone=row.availability_zone,
        traits=frozenset(row.traits) or _NONE,
        aggregates=frozenset(row.aggregates) or _NONE,
        capabilities=row.capabilities,
        metrics=row.metrics,
        metrics_at_ms=row.metrics_at_ms,
        num_io_ops=row.num_io_ops,
        build_failures=row.build_failures,
        host_ip=row.host_ip,
        metadata=row.metadata,
        numa_cells=cells,
        pci_devices=devices,
        instances=frozenset(placed) if placed else _NONE,
        groups=dict(grouped) if grouped else _NO_COUNTS,
        tags=dict(tagged) if tagged else _NO_COUNTS,
    )


_NONE: frozenset[str] = frozenset()
"""The one empty set most providers' records share (an empty frozenset is
216 bytes, and a record has three)."""
_NO_COUNTS: Mapping[str, int] = {}
"""The one empty count most records share (never written: records are frozen)."""


_MEMBER_COLUMNS = (
    server_group_members.c.group_id.label("member_group"),
    server_group_members.c.provider_id.label("member_host"),
)
"""A reservation's server-group membership, if it is one (outer-joined)."""
_WITH_MEMBERS = reservations.outerjoin(
    server_group_members,
    server_group_members.c.reservation_id == reservations.c.reservation_id,
)


def _active(conn: Connection, *columns: Any) -> Sequence[Row[Any]]:
    """The active reservations' placement columns, and ``columns`` more."""
    c = reservations.c
    query = select(
        c.consumer_id, c["items"], c.anti_affinity_group, c.tags, *_MEMBER_COLUMNS, *columns
    ).select_from(_WITH_MEMBERS)
    return conn.execute(query.where(c.status.in_(ACTIVE_STATUSES))).all()


_PLACED = select(
    reservations.c.reservation_id,
    reservations.c.status,
    reservations.c.consumer_id,
    reservations.c["items"],
    reservations.c.anti_affinity_group,
    reservations.c.tags,
    *_MEMBER_COLUMNS,
).select_from(_WITH_MEMBERS)
"""Reservations, with what a live snapshot keeps of them."""
_PROVIDERS_IN = (
    select(*_PROVIDER_COLUMNS)
    .select_from(provider_rows)
    .where(providers.c.provider_id.in_(bindparam("ids", expanding=True)))
)
_INVENTORIES_IN = select(inventories).where(
    inventories.c.provider_id.in_(bindparam("ids", expanding=True))
)
_OFFSETS = select(
    partition_offsets.c.partition, partition_offsets.c.next_offset, partition_offsets.c.partitions
)
"""What :func:`committed_offsets` reads, and the partition count :func:`_aggregates` needs."""


_REPORTED_COLUMNS = (
    providers.c.provider_id,
    providers.c.metrics,
    providers.c.metrics_at_ms,
    providers.c.num_io_ops,
    providers.c.build_failures,
)
"""What a live snapshot reads of a provider that reported: a report's
columns (one that changed otherwise too is read whole, by id)."""


@dataclass(frozen=True, slots=True)
class _Since:
    """A live snapshot's statements for the partitions that moved since its
    last call (their offsets bound at each call as ``seen_P``, ``from_P``
    and ``next_P``)."""

    changed: Select[Any]
    """The ids of the providers whose usage changed (updated_offset past
    ``seen_P``: a claim, or the provider written whole)."""
    whole: Select[Any]
    """The ids of those written whole (shape_offset past it): registered,
    reshaped or described."""
    reported: Select[Any]
    """The report's columns of those that reported (metrics_offset past it)."""
    decided: Select[Any]
    """The reservations that are subjects of the outcomes in [``from_P``,
    ``next_P``) of each partition P."""


@functools.lru_cache(maxsize=256)
def _since(moved: tuple[int, ...]) -> _Since:
    """The statements for the partitions ``moved``, built once per set of
    partitions. The first three each walk an index on (partition, offset):
    only the rows past the offsets are read."""
    p, u, o = providers.c, provider_usage.c, outcomes.c
    changed = select(u.provider_id).where(
        or_(*((u.partition == m) & (u.updated_offset > bindparam(f"seen_{m}")) for m in moved))
    )
    whole = select(p.provider_id).where(
        or_(*((p.partition == m) & (p.shape_offset > bindparam(f"seen_{m}")) for m in moved))
    )
    reported = select(*_REPORTED_COLUMNS).where(
        or_(*((p.partition == m) & (p.metrics_offset > bindparam(f"seen_{m}")) for m in moved))
    )
    subjects = select(o.subject).where(
        or_(
            *(
                (o.partition == m)
                & (o["offset"] >= bindparam(f"from_{m}"))
                & (o["offset"] < bindparam(f"next_{m}"))
                for m in moved
            )
        )
    )
    decided = _PLACED.where(reservations.c.reservation_id.in_(subjects))
    return _Since(changed, whole, reported, decided)


@dataclass(frozen=True, slots=True)
class Placed:
    """What an active reservation contributes to the providers it is on."""

    consumer_id: str
    providers: tuple[str, ...]
    group: str | None
    tags: tuple[str, ...]
    member: tuple[str, str] | None = None
    """(server group, provider) of a server group's membership."""

    @property
    def on(self) -> tuple[str, ...]:
        """The providers it counts on."""
        if self.member is None:
            return self.providers
        return (*self.providers, self.member[1])

    @classmethod
    def of(cls, row: Any) -> Placed:
        return cls(
            row.consumer_id,
            tuple(item["provider_id"] for item in row.items),
            row.anti_affinity_group,
            tuple(row.tags),
            None if row.member_group is None else (row.member_group, row.member_host),
        )


class _Placements:
    """What is placed where: the active reservations, by provider."""

    def __init__(self) -> None:
        self.active: dict[str, Placed] = {}
        self.on: dict[str, set[str]] = defaultdict(set)
        """Provider -> ids of the active reservations on it."""

    def put(self, reservation_id: str, placed: Placed | None) -> set[str]:
        """Record a reservation's current placement (None: no longer active);
        the providers whose placements that changed."""
        touched: set[str] = set()
        old = self.active.pop(reservation_id, None)
        if old is not None:
            for pid in old.on:
                self.on[pid].discard(reservation_id)
            touched.update(old.on)
        if placed is not None:
            self.active[reservation_id] = placed
            for pid in placed.on:
                self.on[pid].add(reservation_id)
            touched.update(placed.on)
        return touched

    def of(self, pid: str) -> tuple[set[str], Counter[str], Counter[str]]:
        """A provider's instances, server-group members and tags."""
        instances: set[str] = set()
        groups: Counter[str] = Counter()
        tags: Counter[str] = Counter()
        active = self.active
        for rid in self.on.get(pid, ()):
            placed = active[rid]
            member = placed.member
            if member is not None and member[1] == pid:
                groups[member[0]] += 1
                if not placed.providers:
                    continue  # a membership alone: no instance of its own here
            instances.add(placed.consumer_id)
            if placed.group:
                groups[placed.group] += 1
            for tag in placed.tags:  # most have none: no Counter.update call for them
                tags[tag] += 1
        return instances, groups, tags


def _placements(active: Sequence[Row[Any]]) -> _Placements:
    placements = _Placements()
    for row in active:
        placements.put(row.reservation_id, Placed.of(row))
    return placements


def _record(row: Any, placements: _Placements | None) -> Provider:
    if placements is None:
        return provider_from_row(row, {}, {}, {})
    instances, groups, tags = placements.of(row.provider_id)
    pid = row.provider_id
    return provider_from_row(row, {pid: instances}, {pid: groups}, {pid: tags})


def _read(conn: Connection, placements: bool, active: Sequence[Row[Any]] | None = None) -> Snapshot:
    """The snapshot; with ``placements``, what is placed where, from
    ``active`` (see :func:`_active`) if the caller read it already."""
    if active is None:
        active = _active(conn) if placements else ()
    instances: dict[str, set[str]] = defaultdict(set)
    groups: dict[str, Counter[str]] = defaultdict(Counter)
    tags: dict[str, Counter[str]] = defaultdict(Counter)
    for row in active:
        group = row.anti_affinity_group
        if row.member_group is not None:
            groups[row.member_host][row.member_group] += 1
        for item in row.items:
            pid = item["provider_id"]
            instances[pid].add(row.consumer_id)
            if group:
                groups[pid][group] += 1
            for tag in row.tags:
                tags[pid][tag] += 1
    return _whole(conn, _records(conn, instances, groups, tags))


_WHOLE_ORDER = (
    "provider_id",
    "name",
    "state",
    "availability_zone",
    "host",
    "host_ip",
    "metrics_at_ms",
    "num_io_ops",
    "build_failures",
    "traits",
    "aggregates",
    "capabilities",
    "metrics",
    "metadata",
    "numa_cells",
    "pci_devices",
    "topology_use",
)
_PROVIDERS_WHOLE = (
    select(
        *(
            # JSON as the text the writer wrote: decoded once per distinct text
            c if c.name in _WHOLE_ORDER[:9] else cast(c, Text).label(c.name)
            for c in sorted(
                (c for c in provider_row() if c.name in _WHOLE_ORDER),
                key=lambda c: _WHOLE_ORDER.index(c.name),
            )
        )
    )
    .select_from(provider_rows)
    .order_by(providers.c.provider_id)
)
"""Every provider's row, the columns its record needs in ``_WHOLE_ORDER``
(unpacked by position: a row's attribute costs about a microsecond)."""
_USAGE = select(
    inventories.c.provider_id,
    inventories.c.resource_class,
    inventories.c.total,
    inventories.c.reserved,
    inventories.c.min_unit,
    inventories.c.max_unit,
    inventories.c.step_size,
    inventories.c.allocation_ratio,
    inventories.c.held,
    inventories.c.consumed,
)
_CHUNK = 50_000
"""Rows fetched and turned into records or arrays at a time, so a million
providers' rows are never all held at once."""


class _Decoded:
    """JSON texts decoded once each: the providers that wrote the same text
    share the value (never written to: records are frozen)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.names: dict[str, frozenset[str]] = {}

    def value(self, text: str) -> Any:
        values = self.values
        if text not in values:
            values[text] = json.loads(text)
        return values[text]

    def name_set(self, text: str) -> frozenset[str]:
        names = self.names
        if text not in names:
            names[text] = frozenset(json.loads(text)) or _NONE
        return names[text]


def _records(
    conn: Connection,
    instances: Mapping[str, set[str]],
    groups: Mapping[str, Mapping[str, int]],
    tags: Mapping[str, Mapping[str, int]],
) -> list[Provider]:
    """Every provider's record in id order, as :func:`provider_from_row`
    makes it, from rows read a chunk at a time."""
    decoded = _Decoded()
    value, name_set = decoded.value, decoded.name_set
    records: list[Provider] = []
    for rows in conn.execute(_PROVIDERS_WHOLE).partitions(_CHUNK):
        for (pid, name, state, zone, host, host_ip, at_ms, io_ops, failures,
             traits, aggregates_, capabilities, metrics, metadata,
             cells_text, devices_text, use_text) in rows:  # fmt: skip
            cells, devices = free_in(cells_text, devices_text, use_text)
            placed, grouped, tagged = instances.get(pid), groups.get(pid), tags.get(pid)
            records.append(
                Provider(
                    provider_id=pid,
                    host=host or name,
                    state=state,
                    availability_zone=zone,
                    traits=name_set(traits),
                    aggregates=name_set(aggregates_),
                    capabilities=value(capabilities),
                    metrics=value(metrics),
                    metrics_at_ms=at_ms,
                    num_io_ops=io_ops,
                    build_failures=failures,
                    host_ip=host_ip,
                    metadata=value(metadata),
                    numa_cells=cells,
                    pci_devices=devices,
                    instances=frozenset(placed) if placed else _NONE,
                    groups=dict(grouped) if grouped else _NO_COUNTS,
                    tags=dict(tagged) if tagged else _NO_COUNTS,
                )
            )
    return records


def _whole(conn: Connection, records: list[Provider]) -> Snapshot:
    """The snapshot of ``records`` (every provider, in id order) with every
    inventory's numbers, class by class (total, reserved, min and max
    unit, step, used: held and consumed, ratio): what :meth:`Snapshot.build`
    makes of a mapping per inventory, made column by column instead."""
    n = len(records)
    row_of = {record.provider_id: k for k, record in enumerate(records)}
    at: list[IntArray] = []
    classes_of: list[list[str]] = []
    numbers: list[IntArray] = []
    used: list[IntArray] = []
    ratios: list[FloatArray] = []
    for rows in conn.execute(_USAGE).partitions(_CHUNK):
        pid, rc, total, reserved, low, high, step, ratio, held, consumed = zip(*rows, strict=True)
        found = list(map(row_of.get, pid))
        if None in found:  # a retired provider's inventories, if any are left: no row
            found = [-1 if k is None else k for k in found]
        at.append(np.array(found, dtype=np.int64))
        classes_of.append(list(rc))
        numbers.append(np.array((total, reserved, low, high, step), dtype=np.int64).T)
        used.append(np.add(held, consumed, dtype=np.int64))
        ratios.append(np.array(ratio, dtype=np.float64))
    classes = tuple(sorted({rc for chunk in classes_of for rc in chunk}))
    column = {rc: c for c, rc in enumerate(classes)}
    r = len(classes)
    # a class a provider lacks: zeros, ratio 1 (and step 1, by from_table)
    table = np.zeros((n, r, 5), dtype=np.int64)
    used_table = np.zeros((n, r), dtype=np.int64)
    ratio_table = np.ones((n, r), dtype=np.float64)
    for rows_at, rcs, numbers_, used_, ratios_ in zip(
        at, classes_of, numbers, used, ratios, strict=True
    ):
        cols = np.array(list(map(column.__getitem__, rcs)), dtype=np.int64)
        keep = rows_at >= 0
        where = (rows_at[keep], cols[keep])
        table[where] = numbers_[keep]
        used_table[where] = used_[keep]
        ratio_table[where] = ratios_[keep]
    return Snapshot.from_table(records, classes, table, used_table, ratio_table, _aggregates(conn))


def _aggregates(conn: Connection, partitions: int | None = None) -> dict[str, Aggregate]:
    """Every aggregate's metadata, as the copy of its home partition (the
    partition of its id) says; until that copy is in, the lowest one's.
    ``partitions``: the view's partition count, if the caller read it."""
    found: dict[str, tuple[bool, int, Aggregate]] = {}
    if partitions is None:
        partitions = conn.execute(_PARTITIONS).scalar()
    for row in conn.execute(_AGGREGATES):
        aid = row.aggregate_id
        home = partitions is not None and partition_for(aid.encode(), partitions) == row.partition
        key = (not home, row.partition)
        held = found.get(aid)
        if held is None or key < held[:2]:
            found[aid] = (*key, Aggregate(aid, row.metadata))
    return {aid: found[aid][2] for aid in sorted(found)}


@dataclass(frozen=True, slots=True)
class Fed:
    """What changed since a live snapshot's last read, told by the writers
    that made the view's rows rather than read back from them: the rows
    the view now holds of the providers changed, as its reader returns
    them."""

    offsets: dict[int, int]
    """Partition -> the view's next offset these changes take it to."""
    changed: Sequence[Any]
    """The changed providers' rows (the columns of ``_PROVIDERS_IN``)."""
    usage: Sequence[Any]
    """Their inventories' rows (the columns of ``_INVENTORIES_IN``)."""


PutPlaced = Callable[[str, Placed | None], set[str]]
"""Records a reservation's placement (None: no longer active); the
providers whose placements that changed (:meth:`_Placements.put`)."""


class ChangeFeed(Protocol):
    """The changes to the view since given offsets, from the writers that
    commit them in this process (``berth serve``)."""

    def since(self, seen: Mapping[int, int], put: PutPlaced) -> Fed | None:
        """The changes committed since ``seen``, the placements of the
        reservations decided on since given to ``put`` (the providers it
        says changed are among those changed); None when the feed cannot
        tell them (the view is then read)."""
        ...


class LiveSnapshot:
    """A snapshot of the view kept current by re-reading only what changed
    since the last call: the providers whose ``updated_offset`` is past the
    partition offset seen then, and, with ``placements``, the reservations
    the view decided on since (the subjects of its outcome rows from those
    offsets on, read by primary key), so what is placed where (instances,
    server groups, tags) stays current too. Without ``placements`` those
    are not kept: for schedulers whose requests use no such hints.

    ``offsets()`` says how far into each partition of the log the latest
    snapshot reflects, so a scheduler can add what it proposed since then."""

    def __init__(
        self,
        engine: Engine,
        placements: bool = False,
        limit: int = _INCREMENTAL_LIMIT,
        version: Callable[[], object] | None = None,
        feed: ChangeFeed | None = None,
    ) -> None:
        """``version``: where the view's writers are, when every one of
        them runs in this process (``berth serve``): while it is what it
        was at the last read, the view has not changed and is not read.
        ``feed``: those writers' changes, taken from their states instead
        of read back from the view when it can tell them."""
        self.engine = engine
        self.version = version
        self.feed = feed
        self._version: object = None
        self.snapshot: Snapshot | None = None
        self.seen: dict[int, int] = {}
        self.keeps_placements = placements
        self.placements: _Placements | None = None
        self.limit = limit
        """Reservations decided on since the last call above which it reads
        everything again."""

    def saved(self) -> tuple[Snapshot | None, dict[int, int], _Placements | None]:
        """What it knows, to be :meth:`resumed` on a copy of the view (a
        checkpoint's)."""
        return self.snapshot, self.seen, self.placements

    @classmethod
    def resumed(
        cls,
        engine: Engine,
        saved: tuple[Snapshot | None, dict[int, int], _Placements | None],
        limit: int = _INCREMENTAL_LIMIT,
    ) -> LiveSnapshot:
        """A live snapshot of ``engine``'s view that knows ``saved`` (see
        :meth:`saved`), taken of this view, or a copy of it, earlier."""
        live = cls(engine, placements=saved[2] is not None, limit=limit)
        live.snapshot, live.seen, live.placements = saved
        return live

    def offsets(self) -> Mapping[int, int]:
        """Partition -> the view's next offset when the latest snapshot was read."""
        return self.seen

    def __call__(self) -> Snapshot:
        version = None if self.version is None else self.version()
        if version is not None and self.snapshot is not None and version == self._version:
            return self.snapshot  # nothing committed to the view since it was read
        snapshot = self._fed()
        if snapshot is None:
            snapshot = self._read()
        self._version = version
        return snapshot

    def _fed(self) -> Snapshot | None:
        """The snapshot brought up to date from the feed's changes alone,
        or None when the view must be read instead (no feed, nothing read
        yet, a change the feed cannot tell, a provider new to the snapshot
        or a resource class new to it; and without placements, which tell
        the providers a reservation no longer active was on). The
        placements it recorded first are recorded again, the same, by the
        read."""
        snapshot, placements = self.snapshot, self.placements
        if self.feed is None or snapshot is None or placements is None:
            return None
        fed = self.feed.since(self.seen, placements.put)
        if fed is None or any(row.provider_id not in snapshot.row_of for row in fed.changed):
            return None
        if fed.changed:
            updated = self._update(snapshot, fed.changed, fed.usage, placements)
            if updated is None:
                return None
            self.snapshot = snapshot = updated
        self.seen = fed.offsets
        return snapshot

    def _read(self) -> Snapshot:
        with self.engine.connect() as conn:
            # the offsets must describe exactly the rows read with them, so a
            # scheduler adding its own later proposals never counts one twice
            read_one_snapshot(conn)
            rows = conn.execute(_OFFSETS).all()  # as committed_offsets reads them
            offsets = {int(row.partition): int(row.next_offset) for row in rows}
            if self.snapshot is None:
                return self._full(conn, offsets)
            partitions = max((row.partitions for row in rows), default=None)
            if offsets != self.seen and _aggregates(conn, partitions) != self.snapshot.aggregates:
                return self._full(conn, offsets)  # an aggregate was defined anew
            moved = tuple(p for p, o in offsets.items() if o != self.seen.get(p))
            if not moved:
                self.seen = offsets
                return self.snapshot
            since = _since(moved)
            bounds = {f"seen_{p}": self.seen.get(p, -1) for p in moved}
            touched = set(conn.execute(since.changed, bounds).scalars())
            whole = set(conn.execute(since.whole, bounds).scalars())  # read whole
            reports = conn.execute(since.reported, bounds).all()  # maybe changed in nothing else
            if self.placements is not None:
                placed = self._placed_since(conn, since.decided, moved, offsets)
                if placed is None:
                    return self._full(conn, offsets)
                for rid, where in placed.items():
                    touched |= self.placements.put(rid, where)
            snapshot = self.snapshot
            # a provider whose usage alone changed keeps its row's record but
            # for its placements and, with cells or devices, what they hold
            # (read whole: the record keeps only what is free of them)
            whole |= {pid for pid in touched if _topology(snapshot, pid)}
            usage_only = sorted(touched - whole)
            changed = _by_ids(conn, _PROVIDERS_IN, sorted(whole))
            # the providers that reported since the last call and changed in
            # nothing else (those changed were read whole)
            reported = [row for row in reports if row.provider_id not in whole]
            if not changed and not usage_only:
                if reported:
                    self.snapshot = _with_reports(snapshot, reported)
                self.seen = offsets
                return self.snapshot
            if any(row.provider_id not in snapshot.row_of for row in changed) or len(
                snapshot.providers
            ) != int(conn.execute(_PROVIDER_COUNT).scalar_one()):
                return self._full(conn, offsets)  # providers came or went
            ids = [row.provider_id for row in changed] + usage_only
            usage = _by_ids(conn, _INVENTORIES_IN, ids)
        updated = self._update(snapshot, changed, usage, self.placements, usage_only)
        if updated is None:
            self.snapshot = None
            return self._read()  # a new resource class: rebuild
        if reported:
            updated = _with_reports(updated, reported)
        self.snapshot = updated
        self.seen = offsets
        return updated

    def _placed_since(
        self,
        conn: Connection,
        decided_since: Select[Any],
        moved: tuple[int, ...],
        offsets: Mapping[int, int],
    ) -> dict[str, Placed | None] | None:
        """Reservation id -> where it is placed now (None: no longer active),
        for every reservation decided on since the last call; None when that
        is more than re-reading everything would cost."""
        bounds = {f"from_{p}": self.seen.get(p, 0) for p in moved}
        bounds.update({f"next_{p}": offsets[p] for p in moved})
        rows = conn.execute(decided_since, bounds).all()
        if len(rows) > self.limit:
            return None
        return {
            row.reservation_id: Placed.of(row) if row.status in ACTIVE_STATUSES else None
            for row in rows
        }

    @staticmethod
    def _update(
        snapshot: Snapshot,
        changed: Sequence[Row[Any]],
        usage: Sequence[Row[Any]],
        placements: _Placements | None,
        usage_only: Sequence[str] = (),
    ) -> Snapshot | None:
        """``snapshot`` with the changed providers' rows replaced and the
        inventories of those and of ``usage_only`` (whose records change in
        their placements at most), or None if a resource class it lacks
        appeared. Arrays and records that did not change are shared with
        ``snapshot``: the engine caches what it derives from the
        inventories by array identity, and most changes are usage only."""
        row_of = snapshot.row_of
        ids = [row.provider_id for row in changed] + list(usage_only)
        index = {pid: k for k, pid in enumerate(ids)}
        rows = np.fromiter((row_of[pid] for pid in ids), np.int64, len(ids))
        shape = (len(ids), len(snapshot.classes))
        # as Snapshot.build leaves a class the provider lacks
        blocks = {
            name: np.ones(shape, dtype=np.float64)
            if name == "allocation_ratio"
            else np.full(shape, 1 if name == "step_size" else 0, dtype=np.int64)
            for name in RESOURCE_ARRAYS
        }
        if usage:
            # each column of the rows at once, read by position: a Row's
            # attribute costs about a microsecond, a numpy item assignment more
            column = {c: j for j, c in enumerate(snapshot.classes)}
            of = dict(zip(usage[0]._fields, zip(*usage, strict=True), strict=True))
            if not column.keys() >= set(of["resource_class"]):
                return None
            at = (
                [index[pid] for pid in of["provider_id"]],
                [column[rc] for rc in of["resource_class"]],
            )
            blocks["total"][at] = of["total"]
            blocks["reserved"][at] = of["reserved"]
            blocks["used"][at] = np.add(of["held"], of["consumed"])
            blocks["allocation_ratio"][at] = of["allocation_ratio"]
            blocks["min_unit"][at] = of["min_unit"]
            blocks["max_unit"][at] = of["max_unit"]
            blocks["step_size"][at] = np.maximum(of["step_size"], 1)
        arrays: dict[str, Any] = {}
        for name, block in blocks.items():
            current = getattr(snapshot, name)
            if not np.array_equal(current[rows], block):
                arrays[name] = current.copy()
                arrays[name][rows] = block
        records: dict[int, Provider] = {}
        at = rows.tolist()
        for row, i in zip(changed, at[: len(changed)], strict=True):
            record = _record(row, placements)
            if record != snapshot.providers[i]:
                records[i] = record
        if placements is not None:
            for pid, i in zip(usage_only, at[len(changed) :], strict=True):
                placed = _placed(snapshot.providers[i], placements.of(pid))
                if placed is not None:
                    records[i] = placed
        # the rows changed, so that an index kept for the last snapshot (bounded
        # placement) follows by re-reading those rows alone
        if records:
            return snapshot.with_records(records, rows, **arrays)
        return snapshot.with_arrays(rows, **arrays)  # the derived columns read the records only

    def _full(self, conn: Connection, offsets: dict[int, int]) -> Snapshot:
        if self.keeps_placements:
            self.placements = _placements(_active(conn, reservations.c.reservation_id))
        instances: dict[str, set[str]] = {}
        groups: dict[str, Counter[str]] = {}
        tags: dict[str, Counter[str]] = {}
        if self.placements is not None:
            for pid in self.placements.on:
                instances[pid], groups[pid], tags[pid] = self.placements.of(pid)
        self.snapshot = _whole(conn, _records(conn, instances, groups, tags))
        self.seen = offsets
        return self.snapshot


_READ_IN = 5000
"""Ids bound in one ``IN`` at most (SQLite's limit on a statement's
parameters is 32,766)."""


def _by_ids(conn: Connection, statement: Select[Any], ids: Sequence[str]) -> list[Row[Any]]:
    """``statement``'s rows for ``ids`` (bound as ``ids``), a chunk at a time."""
    rows: list[Row[Any]] = []
    for start in range(0, len(ids), _READ_IN):
        rows += conn.execute(statement, {"ids": ids[start : start + _READ_IN]}).all()
    return rows


_REPORTED = ("metrics", "metrics_at_ms", "num_io_ops", "build_failures")
_KEPT = tuple(f.name for f in dataclasses.fields(Provider) if f.name not in _REPORTED)


def _reported(record: Provider, row: Any) -> Provider:
    """``record`` with the report in ``row``: ``dataclasses.replace`` without
    its checks, which cost more than the copy (a report is frequent)."""
    return _remade(record, _KEPT, [(name, getattr(row, name)) for name in _REPORTED])


def _remade(record: Provider, kept: Sequence[str], changes: Sequence[tuple[str, Any]]) -> Provider:
    """``record`` with the fields ``kept`` and ``changes``' values: what
    ``dataclasses.replace`` makes, without its checks (records are frozen)."""
    new = object.__new__(Provider)
    for name in kept:
        object.__setattr__(new, name, getattr(record, name))
    for name, value in changes:
        object.__setattr__(new, name, value)
    return new


_PLACED_FIELDS = ("instances", "groups", "tags")
_UNPLACED = tuple(f.name for f in dataclasses.fields(Provider) if f.name not in _PLACED_FIELDS)


def _placed(
    record: Provider, placed: tuple[set[str], Counter[str], Counter[str]]
) -> Provider | None:
    """``record`` with a provider's placements (:meth:`_Placements.of`), or
    None when they are the record's already."""
    instances, groups, tags = frozenset(placed[0]), dict(placed[1]), dict(placed[2])
    if (instances, groups, tags) == (record.instances, record.groups, record.tags):
        return None
    return _remade(
        record, _UNPLACED, (("instances", instances), ("groups", groups), ("tags", tags))
    )


def _topology(snapshot: Snapshot, pid: str) -> bool:
    """Whether the provider has cells or devices in ``snapshot`` (or is not
    in it: read whole, it is found new)."""
    i = snapshot.row_of.get(pid)
    if i is None:
        return True
    record = snapshot.providers[i]
    return bool(record.numa_cells or record.pci_devices)


def _with_reports(snapshot: Snapshot, reported: Sequence[Any]) -> Snapshot:
    """``snapshot`` with the providers' latest reports in their records."""
    records: dict[int, Provider] = {}
    row_of, providers_ = snapshot.row_of, snapshot.providers
    for row in reported:
        i = row_of.get(row.provider_id)
        if i is not None:
            records[i] = _reported(providers_[i], row)
    return snapshot.with_records(records) if records else snapshot
