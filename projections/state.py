"""The projector's decision state for one partition, kept in memory.

Providers share interned inventory layouts and request shapes (a cluster has a
handful of node types and flavours), which keeps the state near 0.5 KiB per
provider and per active reservation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Any

from projections.placement.model import PlacementState
from projections.pools import PoolState
from schemas.events import MAX_AMOUNT, Inventory
from schemas.topology import NumaCell, PciDevice, TopologyFit, view_json

HELD = 0
CONSUMED = 1

Amounts = tuple[tuple[str, int], ...]
"""A request shape on one provider: (resource class, amount) pairs, sorted."""

Shapes = tuple[tuple[str, Amounts], ...]
"""A claim's items: each provider id with its interned amounts."""


def content_digest(
    consumer_id: str, project_id: str, lease_ms: int, shapes: Shapes, rare: str
) -> int:
    """BLAKE2b-64 of a claim's canonical text (``projections.claims.fingerprint``
    says why it is so and what ``rare`` holds): here, below the reservations,
    so that a reservation can derive it from its own fields when first asked."""
    parts = [
        f"{len(consumer_id)}:{consumer_id}{len(project_id)}:{project_id}{lease_ms};{len(shapes)}"
    ]
    for provider_id, amounts in shapes:
        parts.append(f"{len(provider_id)}:{provider_id}{len(amounts)}")
        for resource_class, amount in amounts:
            parts.append(f"{resource_class}={amount},")
    if rare:
        parts.append(rare)
    digest = blake2b("".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


@dataclass(frozen=True, slots=True)
class Limits:
    """One resource class's inventory on a provider, with its capacity derived."""

    total: int
    reserved: int
    min_unit: int
    max_unit: int
    step_size: int
    allocation_ratio: float
    capacity: int
    any_amount: bool
    """No unit rules: every amount a claim may carry (1 .. MAX_AMOUNT) is a
    valid unit, so deciding needs only the capacity check."""

    @classmethod
    def of(cls, inventory: Inventory) -> Limits:
        return cls(
            total=inventory.total,
            reserved=inventory.reserved,
            min_unit=inventory.min_unit,
            max_unit=inventory.max_unit,
            step_size=inventory.step_size,
            allocation_ratio=inventory.allocation_ratio,
            capacity=inventory.capacity,
            any_amount=inventory.min_unit == 1
            and inventory.max_unit == MAX_AMOUNT
            and inventory.step_size == 1,
        )


@dataclass(frozen=True, slots=True)
class Layout:
    """The resource classes of a provider (sorted) and their limits; shared by
    every provider with the same inventory."""

    index: dict[str, int]
    classes: tuple[str, ...]
    limits: tuple[Limits, ...]


EMPTY_LAYOUT = Layout(index={}, classes=(), limits=())


class Description:
    """What a provider is described as, beyond its inventory (the scheduler's
    business: the writer keeps it only to write it to the view). Shared,
    never changed: a new description is a new object."""

    __slots__ = (
        "availability_zone",
        "capabilities",
        "host",
        "host_ip",
        "metadata",
        "numa_cells",
        "numa_cells_json",
        "pci_devices",
        "pci_devices_json",
    )

    def __init__(
        self,
        availability_zone: str | None = None,
        host: str | None = None,
        host_ip: str | None = None,
        capabilities: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
        numa_cells: tuple[NumaCell, ...] | None = None,
        pci_devices: tuple[PciDevice, ...] | None = None,
        texts: tuple[str, str] | None = None,
    ) -> None:
        self.availability_zone = availability_zone
        self.host = host
        self.host_ip = host_ip
        self.capabilities: dict[str, Any] = capabilities or {}
        self.metadata: dict[str, str] = metadata or {}
        # sorted by cell id and by address (the event's validation sorts them)
        self.numa_cells: tuple[NumaCell, ...] = numa_cells or ()
        self.pci_devices: tuple[PciDevice, ...] = pci_devices or ()
        # their text in the view, made once: every rewrite of the provider's
        # row writes it, and the loader hands back the text it read
        if texts is None:
            texts = (view_json(self.numa_cells), view_json(self.pci_devices))
        self.numa_cells_json, self.pci_devices_json = texts


class TopologyUse:
    """What reservations hold of a provider's NUMA cells and PCI devices:
    device address -> reservation id, pinned CPU id -> reservation id,
    (cell id, page size in KiB) -> huge pages held, and per cell id the
    small-page memory (MB) and the floating vCPUs its guest cells hold. A
    description may not take away what is held (``projections/topology.py``).

    Claims that carry their fit count it in here as ``ProviderState.take``
    counts amounts (``projections/fitting.py``), and the loader rebuilds it
    from the reservations' rows."""

    __slots__ = ("cpus", "devices", "memory", "pages", "vcpus")

    def __init__(self) -> None:
        self.devices: dict[str, str] = {}
        self.cpus: dict[int, str] = {}
        self.pages: dict[tuple[int, int], int] = {}
        self.memory: dict[int, int] = {}
        self.vcpus: dict[int, int] = {}


class Metrics:
    """A provider's latest metrics report: its values, the report's
    timestamp, and the I/O operations in flight and recent build failures."""

    __slots__ = ("at_ms", "build_failures", "num_io_ops", "values")

    def __init__(
        self,
        values: dict[str, float] | None = None,
        at_ms: int | None = None,
        num_io_ops: int = 0,
        build_failures: int = 0,
    ) -> None:
        self.values: dict[str, float] = values or {}
        self.at_ms = at_ms
        self.num_io_ops = num_io_ops
        self.build_failures = build_failures


NO_DESCRIPTION = Description()
NO_METRICS = Metrics()


@dataclass(slots=True, eq=False)
class ProviderState:
    provider_id: str
    name: str
    state: str = "enabled"
    layout: Layout = EMPTY_LAYOUT
    held: list[int] = field(default_factory=list)
    consumed: list[int] = field(default_factory=list)
    traits: frozenset[str] = frozenset()
    aggregates: frozenset[str] = frozenset()
    active: int = 0
    tag_counts: dict[str, int] | None = None
    group_counts: dict[str, int] | None = None
    description: Description = NO_DESCRIPTION
    topology_use: TopologyUse | None = None
    """What its reservations hold of its cells and devices; None: nothing."""
    metrics: Metrics = NO_METRICS
    own: Layout = EMPTY_LAYOUT
    """The layout of its inventory as set; ``layout`` is that with the
    allocation ratios of its aggregates (the same object when they set none)."""

    def take(
        self, amounts: Amounts, used: list[int], tags: frozenset[str], group: str | None
    ) -> None:
        """Count one reservation's amounts into ``used`` (``held`` or
        ``consumed``) and its tags and group into this provider's counts."""
        index = self.layout.index
        for rc, amount in amounts:
            used[index[rc]] += amount
        self.active += 1
        if tags:
            counts = self.tag_counts
            if counts is None:
                counts = self.tag_counts = {}
            for tag in tags:
                counts[tag] = counts.get(tag, 0) + 1
        if group is not None:
            groups = self.group_counts
            if groups is None:
                groups = self.group_counts = {}
            groups[group] = groups.get(group, 0) + 1

    def free(self, resource_class: str) -> int:
        """Capacity left for new claims of one class (0 if not provided)."""
        i = self.layout.index.get(resource_class)
        if i is None:
            return 0
        return self.layout.limits[i].capacity - self.held[i] - self.consumed[i]


class ServerGroup:
    """A server group in its partition: its policy, its rule, its owner (a
    project and user, or None: the system's, any project may join), and how
    many of its members (held, consumed or pending) are on each provider."""

    __slots__ = ("group_id", "hosts", "max_server_per_host", "policy", "project_id", "user_id")

    def __init__(
        self,
        group_id: str,
        policy: str,
        max_server_per_host: int = 1,
        project_id: str | None = None,
        user_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.policy = policy
        self.max_server_per_host = max_server_per_host
        self.project_id = project_id
        self.user_id = user_id
        self.hosts: dict[str, int] = {}


Taken = tuple[tuple[PoolState, int], ...]
"""Identifiers a reservation holds: (pool, identifier as an integer) pairs."""

Fits = tuple[tuple[ProviderState, TopologyFit], ...]
"""What a reservation holds of its providers' NUMA cells and PCI devices:
(provider, the fit its claim carried) pairs."""

_InventoryKey = tuple[str, int, int, int, int, int, float]
"""A resource class and its inventory's numbers: what makes a layout."""


class Reservation:
    """An active (held or consumed) reservation.

    A plain class with its own __init__, which mypyc compiles: one is made
    for every hold, and a dataclass's generated __init__ stays interpreted."""

    __slots__ = (
        "_fingerprint",
        "consumer_id",
        "expires_at_ms",
        "fits",
        "group",
        "identifiers",
        "items",
        "lease_ms",
        "membership",
        "project_id",
        "reservation_id",
        "status",
        "tags",
        "transaction",
    )

    def __init__(
        self,
        reservation_id: str,
        items: tuple[tuple[ProviderState, Amounts], ...],
        status: int,
        expires_at_ms: int,
        fingerprint: int | None,
        group: str | None = None,
        tags: frozenset[str] = frozenset(),
        consumer_id: str = "",
        identifiers: Taken = (),
        transaction: str | None = None,
        lease_ms: int = 0,
        project_id: str = "",
        membership: tuple[str, str] | None = None,
        fits: Fits = (),
    ) -> None:
        self.reservation_id = reservation_id
        self.items = items
        self.status = status
        self.expires_at_ms = expires_at_ms
        self._fingerprint = fingerprint
        """None for a claim with none of the rare fields: most claims, whose
        digest is asked for only when their id comes again (or they finish,
        or a checkpoint saves them), so it is made then, from the fields
        here, which are the claim's and never change."""
        self.group = group
        self.tags = tags
        self.consumer_id = consumer_id
        self.identifiers = identifiers
        self.transaction: str | None = transaction
        """Set while the hold is pending its transaction's decision."""
        self.lease_ms = lease_ms
        """The lease a pending hold gets once its transaction commits."""
        self.project_id = project_id
        """Whose it is: only that project's events may consume, renew or release it."""
        self.membership = membership
        """(server group, provider) when the reservation is a group's membership."""
        self.fits = fits
        """The NUMA cells, CPUs, pages and devices it holds (``projections/fitting.py``)."""

    @property
    def fingerprint(self) -> int:
        """The digest of the claim's content that tells a duplicate from a
        reused id (``projections.claims.fingerprint``)."""
        found = self._fingerprint
        if found is None:
            shapes = tuple((provider.provider_id, amounts) for provider, amounts in self.items)
            found = content_digest(self.consumer_id, self.project_id, self.lease_ms, shapes, "")
            self._fingerprint = found
        return found

    def __repr__(self) -> str:
        return (
            f"Reservation({self.reservation_id!r}, status={self.status}, "
            f"expires_at_ms={self.expires_at_ms}, consumer_id={self.consumer_id!r})"
        )


@dataclass(slots=True, eq=False)
class PendingTransaction:
    """A transaction's pending holds in this partition."""

    priority: tuple[int, str]
    """(priority, transaction id): the smaller is the older, which wins conflicts."""
    reservation_ids: list[str]


@dataclass(slots=True, eq=False)
class PartitionState:
    """Everything one partition's writer needs to decide, and nothing else."""

    partition: int
    partitions: int
    clock_ms: int = 0
    providers: dict[str, ProviderState] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    finished: dict[str, int] = field(default_factory=dict)
    """Reservation id -> fingerprint of reservations that are released or
    expired, so a late duplicate of their claim is recognised, not re-held."""
    expiry: list[tuple[int, str]] = field(default_factory=list)
    """Heap of (expires_at_ms, reservation_id); stale entries are skipped."""
    touched: set[str] = field(default_factory=set)
    """Providers whose usage changed since the view last drained this set."""
    reshaped: set[str] = field(default_factory=set)
    """Providers registered, retired or otherwise changed beyond usage."""
    pools: dict[str, PoolState] = field(default_factory=dict)
    aggregates: dict[str, dict[str, str]] = field(default_factory=dict)
    """Aggregate id -> its metadata, as this partition's copy says."""
    aggregates_touched: set[str] = field(default_factory=set)
    """Aggregates defined since the view last drained this set."""
    metered: set[str] = field(default_factory=set)
    """Providers whose metrics changed (and nothing else about them) since
    the view last drained this set."""
    pools_touched: set[str] = field(default_factory=set)
    """Pools defined or whose free count changed since the view last drained it."""
    transactions: dict[str, PendingTransaction] = field(default_factory=dict)
    """Transactions with pending holds here, awaiting their decision."""
    placement: PlacementState | None = None
    """OpenStack Placement's model, in the partition that holds it (issue 32)."""
    groups: dict[str, ServerGroup] = field(default_factory=dict)
    """The server groups that live in this partition (their id's)."""
    groups_touched: set[str] = field(default_factory=set)
    """Server groups created or deleted since the view last drained this set."""
    joined: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """Memberships held since the view last drained this: reservation id ->
    (group, provider, consumer)."""
    _layouts: dict[tuple[_InventoryKey, ...], Layout] = field(default_factory=dict)
    _shapes: dict[Amounts, Amounts] = field(default_factory=dict)

    def layout_for(self, inventories: dict[str, Inventory]) -> Layout:
        # keyed by plain values: a frozen dataclass's __init__ and __hash__
        # run interpreted, and Limits are made only for a layout not seen yet
        key = tuple(
            sorted(
                (
                    rc,
                    inv.total,
                    inv.reserved,
                    inv.min_unit,
                    inv.max_unit,
                    inv.step_size,
                    inv.allocation_ratio,
                )
                for rc, inv in inventories.items()
            )
        )
        layout = self._layouts.get(key)
        if layout is None:
            classes = tuple(k[0] for k in key)
            layout = Layout(
                index={rc: i for i, rc in enumerate(classes)},
                classes=classes,
                limits=tuple(Limits.of(inventories[rc]) for rc in classes),
            )
            self._layouts[key] = layout
        return layout

    def shape(self, resources: dict[str, int]) -> Amounts:
        """The interned, sorted form of a request's amounts on one provider."""
        given = tuple(resources.items())
        amounts = self._shapes.get(given)
        if amounts is None:
            # sorted so that the same amounts in another key order share one tuple
            amounts = tuple(sorted(given))
            amounts = self._shapes.setdefault(amounts, amounts)
            self._shapes[given] = amounts
        return amounts


ReservationColumns = list[list[Any] | None]
"""A partition's active reservations a field at a time (see
:func:`reservation_columns`)."""

_OPTIONAL: tuple[str, ...] = (
    "group",
    "tags",
    "consumer_id",
    "identifiers",
    "transaction",
    "lease_ms",
    "project_id",
    "membership",
    "fits",
)
"""The fields of a reservation after the five every one has, in
:class:`Reservation`'s order."""


def reservation_columns(reservations: dict[str, Reservation]) -> ReservationColumns | None:
    """``reservations`` as one list per field, in :class:`Reservation`'s
    order; a field no reservation sets (left as its default) is None, not a
    list. A checkpoint saves them so: loading columns of plain values and
    making the reservations from them here, compiled, takes a third of the
    time of unpickling one object at a time. None if a reservation is kept
    under another id than its own (never: the columns could not say so)."""
    held = list(reservations.values())
    for rid, reservation in reservations.items():
        if rid != reservation.reservation_id:
            return None
    columns: ReservationColumns = [
        [r.reservation_id for r in held],
        [r.items for r in held],
        [r.status for r in held],
        [r.expires_at_ms for r in held],
        [r.fingerprint for r in held],
    ]
    defaults = Reservation("", (), 0, 0, 0)
    for name in _OPTIONAL:
        default = getattr(defaults, name)
        column = [getattr(r, name) for r in held]
        columns.append(column if any(value != default for value in column) else None)
    return columns


_NO_TAGS: frozenset[str] = frozenset()


def reservations_of(columns: ReservationColumns) -> dict[str, Reservation]:
    """The reservations :func:`reservation_columns` made ``columns`` of."""
    ids, items, status = columns[0] or [], columns[1] or [], columns[2] or []
    expires, fingerprints = columns[3] or [], columns[4] or []
    group, tags, consumer, identifiers, transaction = columns[5:10]
    lease, project, membership, fits = columns[10:14]
    found: dict[str, Reservation] = {}
    for i in range(len(ids)):
        rid: str = ids[i]
        found[rid] = Reservation(
            rid,
            items[i],
            status[i],
            expires[i],
            fingerprints[i],
            None if group is None else group[i],
            _NO_TAGS if tags is None else tags[i],
            "" if consumer is None else consumer[i],
            () if identifiers is None else identifiers[i],
            None if transaction is None else transaction[i],
            0 if lease is None else lease[i],
            "" if project is None else project[i],
            None if membership is None else membership[i],
            () if fits is None else fits[i],
        )
    return found


Placements = tuple[dict[str, set[str]], dict[str, dict[str, int]], dict[str, dict[str, int]]]
"""Provider -> the consumers of its reservations, its server-group members
per group and its tags' counts."""


def placements(states: list[PartitionState]) -> Placements:
    """What the active reservations (all a state holds) place where, as the
    view's reservation rows say it (a scheduler's snapshot counts them so);
    compiled: it visits every active reservation of the log."""
    instances: dict[str, set[str]] = {}
    groups: dict[str, dict[str, int]] = {}
    tags: dict[str, dict[str, int]] = {}
    for state in states:
        for reservation in state.reservations.values():
            group, consumer = reservation.group, reservation.consumer_id
            member = reservation.membership
            if member is not None:
                _count(groups, member[1], member[0])
            for provider, _ in reservation.items:
                pid = provider.provider_id
                consumers = instances.get(pid)
                if consumers is None:
                    consumers = instances[pid] = set()
                consumers.add(consumer)
                if group:
                    _count(groups, pid, group)
                for tag in reservation.tags:
                    _count(tags, pid, tag)
    return instances, groups, tags


def _count(counts: dict[str, dict[str, int]], pid: str, name: str) -> None:
    mine = counts.get(pid)
    if mine is None:
        mine = counts[pid] = {}
    mine[name] = mine.get(name, 0) + 1
