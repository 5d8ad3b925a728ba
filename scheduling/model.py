"""What the engine decides on: a snapshot of providers and a request.

The snapshot holds per-provider attributes as small frozen records and the
resource numbers as NumPy arrays (providers x resource classes), so that the
resource filters and weighers work on whole columns at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from scheduling.topology import HostCell, HostDevice
from schemas.guest_topology import SriovPort

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

GroupPolicy = Literal["affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"]
PlacementReason = Literal["new", "evacuation", "relocation"]

_EMPTY: Mapping[str, Any] = {}


@dataclass(frozen=True, slots=True)
class Aggregate:
    """A named group of providers with metadata (Nova's host aggregate)."""

    name: str
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Provider:
    """Everything but the resource numbers that filters and weighers read."""

    provider_id: str
    host: str = ""
    state: str = "enabled"  # enabled | disabled | offline | evacuating
    availability_zone: str | None = None
    traits: frozenset[str] = frozenset()
    aggregates: frozenset[str] = frozenset()
    capabilities: Mapping[str, Any] = field(default_factory=dict)
    """Hypervisor facts: hypervisor_type, hypervisor_version (int),
    cpu_info (dict), supported_instances ((arch, hv_type, vm_mode), ...), and
    any other reported capability, looked up by ComputeCapabilities."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    metrics_at_ms: int | None = None
    """When the report the metrics come from was made (its ``ts_ms``)."""
    num_io_ops: int = 0
    instances: frozenset[str] = frozenset()
    """Consumer ids of the instances placed here."""
    instance_flavors: frozenset[str] = frozenset()
    project_ids: frozenset[str] = frozenset()
    groups: Mapping[str, int] = field(default_factory=dict)
    """Server group id -> number of its members placed here."""
    tags: Mapping[str, int] = field(default_factory=dict)
    """Tag -> number of instances here that carry it."""
    host_ip: str | None = None
    build_failures: int = 0
    metadata: Mapping[str, str] = field(default_factory=dict)
    numa_cells: tuple[HostCell, ...] = ()
    """Its NUMA cells, by cell id (``scheduling/topology.py``)."""
    pci_devices: tuple[HostDevice, ...] = ()
    """The PCI devices it can pass through, by address."""


def _identity(provider: Provider) -> tuple[object, ...]:
    """What a provider's derived snapshot columns are computed from."""
    return (
        provider.provider_id,
        provider.state,
        provider.num_io_ops,
        provider.build_failures,
        provider.capabilities.get("hypervisor_version"),
    )


RESOURCE_ARRAYS = (
    "total",
    "reserved",
    "used",
    "allocation_ratio",
    "min_unit",
    "max_unit",
    "step_size",
)
"""The snapshot's per provider x class arrays."""


def _version(value: Any) -> float:
    # bool is an int subclass but never a version; anything non-numeric counts
    # as a missing version (the oldest) rather than failing the request
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0


def by_class(table: IntArray) -> IntArray:
    """A providers x classes table as classes x providers, each class's row
    contiguous: the layout in which per-class work on a few hundred
    providers is quickest (compares, gathers, column maxima)."""
    out: IntArray = np.ascontiguousarray(table.T)
    out.flags.writeable = False
    return out


_TOKENS = itertools.count(1)
"""Each snapshot's token: which snapshot an index was last brought up to."""


@dataclass(frozen=True, slots=True)
class Lineage:
    """Which rows of a snapshot may differ from the snapshots it was made
    from, so that an index kept for the parent is brought up to date by
    those rows alone (:mod:`scheduling.index`).

    ``rows`` may differ from the parent (token ``parent``); ``since`` from an
    older snapshot (token ``anchor``): that set is shared by every twin made
    since the anchor, each adding its rows in place, so it may also hold rows
    of sibling twins, a superset, which is still true. It starts again from
    the parent once it holds ``anchor_limit`` rows."""

    parent: int
    rows: IntArray
    anchor: int
    since: set[int]


_FEW_ROWS = 64
"""Up to this many changed rows are sorted as a set (a wave's picks, a
refresh's providers): np.unique costs tens of microseconds on any size."""


def _lineage(parent: Snapshot, changed: Iterable[int]) -> Lineage:
    if isinstance(changed, np.ndarray) and len(changed) > _FEW_ROWS:
        rows = np.unique(changed.astype(np.int64, copy=False))
    else:
        listed = changed.tolist() if isinstance(changed, np.ndarray) else list(changed)
        if len(listed) > _FEW_ROWS:
            rows = np.unique(np.asarray(listed, dtype=np.int64))
        else:
            rows = np.array(sorted(set(listed)), dtype=np.int64)
    rows.flags.writeable = False
    before = parent.lineage
    limit = max(1024, parent.size // 64)
    if before is None or len(before.since) + len(rows) > limit:
        return Lineage(parent.token, rows, parent.token, set(rows.tolist()))
    before.since.update(rows.tolist())
    return Lineage(parent.token, rows, before.anchor, before.since)


def picks_per_row(ctx_picked: list[int], rows: IntArray, size: int) -> IntArray:
    """How many earlier picks of the request landed on each of ``rows``."""
    if not ctx_picked:
        return np.zeros(len(rows), dtype=np.int64)
    counts: IntArray = np.bincount(np.asarray(ctx_picked, dtype=np.int64), minlength=size)
    return counts[rows]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Providers and their resource numbers, row i of every array being
    ``providers[i]``. ``used`` is held + consumed."""

    providers: tuple[Provider, ...]
    classes: tuple[str, ...]
    total: IntArray
    reserved: IntArray
    used: IntArray
    allocation_ratio: FloatArray
    min_unit: IntArray
    max_unit: IntArray
    step_size: IntArray
    aggregates: Mapping[str, Aggregate] = field(default_factory=dict)
    enabled: BoolArray = field(init=False, repr=False)
    """Per provider: state is "enabled" (derived once per snapshot, as are the
    numeric columns below, so that per-request work stays vectorised)."""
    num_io_ops: IntArray = field(init=False, repr=False)
    build_failures: IntArray = field(init=False, repr=False)
    hypervisor_version: FloatArray = field(init=False, repr=False)
    row_of: Mapping[str, int] = field(init=False, repr=False)
    """Provider id -> row."""
    any_io_ops: bool = field(init=False, repr=False)
    any_build_failures: bool = field(init=False, repr=False)
    hypervisor_versions_differ: bool = field(init=False, repr=False)
    """Whether the weighers that read these columns can tell providers apart
    at all, asked once per snapshot instead of once per decision."""
    _capacity: list[Any] = field(init=False, repr=False, compare=False)
    """[total, reserved, allocation_ratio, capacity, capacity by class]:
    ``capacity()`` as of those arrays, and its transpose, shared with
    usage-only twins, recomputed when they change."""
    token: int = field(init=False, repr=False, compare=False)
    """Unique to this snapshot object (a twin gets its own)."""
    lineage: Lineage | None = field(init=False, repr=False, compare=False)
    """The rows in which it may differ from the snapshot it was made from,
    when the twin's maker said (``changed``); None for a snapshot built
    anew, or made without saying."""
    membership: object = field(init=False, repr=False, compare=False)
    """Which aggregates each provider is in: an object shared by the twins
    whose records all kept their aggregates (a report's metrics, a new
    placement), so that what derives from membership (the aggregates'
    ratios and multipliers) is worked out again only when it changes."""

    def __post_init__(self) -> None:
        providers = self.providers
        n = len(providers)
        self._derive(
            np.fromiter((p.state == "enabled" for p in providers), np.bool_, n),
            np.fromiter((p.num_io_ops for p in providers), np.int64, n),
            np.fromiter((p.build_failures for p in providers), np.int64, n),
            np.fromiter(
                (_version(p.capabilities.get("hypervisor_version")) for p in providers),
                np.float64,
                n,
            ),
        )
        object.__setattr__(self, "_capacity", [None, None, None, None, None])
        object.__setattr__(self, "token", next(_TOKENS))
        object.__setattr__(self, "lineage", None)
        object.__setattr__(self, "membership", object())
        object.__setattr__(self, "row_of", {p.provider_id: i for i, p in enumerate(providers)})
        shape = (len(self.providers), len(self.classes))
        for name in RESOURCE_ARRAYS:
            if getattr(self, name).shape != shape:
                raise ValueError(f"{name} has shape {getattr(self, name).shape}, not {shape}")

    def _derive(
        self, enabled: BoolArray, io_ops: IntArray, failures: IntArray, versions: FloatArray
    ) -> None:
        """Set the derived columns, and what they say of the whole snapshot."""
        object.__setattr__(self, "enabled", enabled)
        object.__setattr__(self, "num_io_ops", io_ops)
        object.__setattr__(self, "build_failures", failures)
        object.__setattr__(self, "hypervisor_version", versions)
        object.__setattr__(self, "any_io_ops", bool(io_ops.any()))
        object.__setattr__(self, "any_build_failures", bool(failures.any()))
        differ = bool(len(versions) and versions.max() != versions.min())
        object.__setattr__(self, "hypervisor_versions_differ", differ)

    @property
    def size(self) -> int:
        return len(self.providers)

    def with_used(self, used: IntArray, changed: Iterable[int] | None = None) -> Snapshot:
        """The same snapshot with other usage. ``changed`` names the rows in
        which ``used`` may differ from this snapshot's (see
        :meth:`with_arrays`)."""
        return self.with_arrays(changed, used=used)

    def with_placements(
        self, records: Mapping[int, Provider], used: IntArray, changed: Iterable[int] | None = None
    ) -> Snapshot:
        """The same snapshot with other usage, and other records at some rows
        that differ only in what is placed there (instances, flavors,
        projects, groups, tags): the derived columns, which read the rest,
        are shared rather than computed again. ``changed``: as for
        :meth:`with_records`."""
        twin = self.with_used(used, None if changed is None else [*changed, *records])
        providers = list(self.providers)
        for row, record in records.items():
            if _identity(record) != _identity(providers[row]):
                raise ValueError(f"row {row}: {record.provider_id} changed more than placements")
            if record.aggregates != providers[row].aggregates:
                object.__setattr__(twin, "membership", object())
            providers[row] = record
        object.__setattr__(twin, "providers", tuple(providers))
        return twin

    def with_records(
        self,
        records: Mapping[int, Provider],
        changed: Iterable[int] | None = None,
        **arrays: IntArray | FloatArray,
    ) -> Snapshot:
        """Other records at some rows (the same providers), and other arrays:
        the derived columns are changed only at rows whose record changed
        what they read (state, I/O, build failures, hypervisor version),
        copied first; a change of placements, traits or aggregates alone
        shares them. ``changed`` names the rows in which the arrays may
        differ (the records' rows count too); without it, when arrays are
        given, the twin's lineage is unknown."""
        rows = (
            None
            if changed is None and arrays
            else [*(() if changed is None else changed), *records]
        )
        twin = self.with_arrays(rows, **arrays)
        providers = list(self.providers)
        derived: list[Any] | None = None  # copied at the first row that needs it
        for row, record in records.items():
            if record.provider_id != providers[row].provider_id:
                raise ValueError(
                    f"row {row}: {record.provider_id} is not {providers[row].provider_id}"
                )
            if record.aggregates != providers[row].aggregates:
                object.__setattr__(twin, "membership", object())
            if _identity(record) != _identity(providers[row]):
                if derived is None:
                    derived = [
                        self.enabled.copy(),
                        self.num_io_ops.copy(),
                        self.build_failures.copy(),
                        self.hypervisor_version.copy(),
                    ]
                derived[0][row] = record.state == "enabled"
                derived[1][row] = record.num_io_ops
                derived[2][row] = record.build_failures
                derived[3][row] = _version(record.capabilities.get("hypervisor_version"))
            providers[row] = record
        object.__setattr__(twin, "providers", tuple(providers))
        if derived is not None:
            twin._derive(*derived)
        return twin

    def with_arrays(
        self, changed: Iterable[int] | None = None, **arrays: IntArray | FloatArray
    ) -> Snapshot:
        """The same snapshot with other per provider x class arrays (named as in
        :data:`RESOURCE_ARRAYS`): ``replace`` would recompute every derived
        column, which only the providers determine. The others are shared.

        ``changed`` names the rows in which the new arrays may differ from
        this snapshot's, which lets an index kept for this snapshot follow
        the twin by re-reading those rows only. An array may be this
        snapshot's own, changed in place at those rows: this snapshot is then
        superseded by the twin, which is the one to place on."""
        twin = object.__new__(Snapshot)
        for name in _SLOTS:  # what copy.copy does, in a twentieth of the time
            object.__setattr__(twin, name, getattr(self, name))
        for name, array in arrays.items():
            if name not in RESOURCE_ARRAYS:
                raise ValueError(f"{name} is not one of the snapshot's arrays")
            current = getattr(self, name)
            if array.shape != current.shape:
                raise ValueError(f"{name} has shape {array.shape}, not {current.shape}")
            object.__setattr__(twin, name, array)
        object.__setattr__(twin, "token", next(_TOKENS))
        if changed is None and arrays:
            object.__setattr__(twin, "lineage", None)
        else:
            object.__setattr__(twin, "lineage", _lineage(self, () if changed is None else changed))
        return twin

    def column(self, resource_class: str) -> int | None:
        try:
            return self.classes.index(resource_class)
        except ValueError:
            return None

    def inventory(self) -> tuple[object, ...]:
        """The objects capacity and unit rules derive from: the inventory
        arrays, and the aggregates with the providers' membership of them
        (per-aggregate ratios). A snapshot refreshed from the view shares
        those that did not change, so a cache keyed on their identity holds
        while they do."""
        return (
            self.total,
            self.reserved,
            self.allocation_ratio,
            self.min_unit,
            self.max_unit,
            self.step_size,
            self.aggregates,
            self.membership,
        )

    def capacity(self, ratio: FloatArray | None = None) -> IntArray:
        """(total - reserved) x allocation_ratio, per provider and class."""
        ratios = self.allocation_ratio if ratio is None else ratio
        return ((self.total - self.reserved) * ratios).astype(np.int64)

    def capacity_table(self) -> IntArray:
        """``capacity()``, computed once per inventory arrays (read-only: the
        table is shared with every twin of this snapshot)."""
        memo = self._capacity
        total, reserved, ratio = self.total, self.reserved, self.allocation_ratio
        if memo[0] is not total or memo[1] is not reserved or memo[2] is not ratio:
            table = self.capacity()
            table.flags.writeable = False
            memo[:] = [total, reserved, ratio, table, by_class(table)]
        table_: IntArray = memo[3]
        return table_

    def capacity_by_class(self) -> IntArray:
        """``capacity_table()`` transposed, classes x providers, each class
        contiguous (read-only, shared like the table)."""
        self.capacity_table()
        table: IntArray = self._capacity[4]
        return table

    def aggregates_of(self, row: int) -> list[Aggregate]:
        names = self.providers[row].aggregates
        return [self.aggregates[n] for n in sorted(names) if n in self.aggregates]

    @classmethod
    def build(
        cls,
        providers: Sequence[Provider],
        inventories: Mapping[str, Mapping[str, Mapping[str, Any]]],
        aggregates: Mapping[str, Aggregate] | None = None,
    ) -> Snapshot:
        """A snapshot from plain mappings: ``inventories[provider_id][class]``
        with total, reserved, used, allocation_ratio, min_unit, max_unit, step_size."""
        classes = tuple(sorted({rc for inv in inventories.values() for rc in inv}))
        n, r = len(providers), len(classes)
        # a provider's numbers class by class, in plain lists made into arrays
        # at once (an array's item assignment costs more than the list's)
        numbers: list[tuple[int, int, int, int, int, int]] = []
        ratios: list[float] = []
        for provider in providers:
            held = inventories.get(provider.provider_id, _EMPTY)
            for rc in classes:
                inv = held.get(rc)
                if inv is None:  # a class it lacks: zeros, ratio 1 (step 1 below)
                    numbers.append(_LACKING)
                    ratios.append(1.0)
                    continue
                numbers.append(
                    (
                        inv.get("total", 0),
                        inv.get("reserved", 0),
                        inv.get("min_unit", 1),
                        inv.get("max_unit", 2**31 - 1),
                        inv.get("step_size", 1),
                        inv.get("used", 0),
                    )
                )
                ratios.append(inv.get("allocation_ratio", 1.0))
        table = np.array(numbers, dtype=np.int64).reshape(n, r, 6)
        return cls.from_table(
            providers, classes, table, table[:, :, 5], np.array(ratios).reshape(n, r), aggregates
        )

    @classmethod
    def from_table(
        cls,
        providers: Sequence[Provider],
        classes: tuple[str, ...],
        table: IntArray,
        used: IntArray,
        ratios: FloatArray,
        aggregates: Mapping[str, Aggregate] | None = None,
    ) -> Snapshot:
        """A snapshot from ``table[row, class]`` = (total, reserved, min_unit,
        max_unit, step_size, ...), the used amounts and the allocation ratios
        (a step of 0, a class a provider lacks, counts as 1)."""
        total, reserved, min_unit, max_unit, step_size = (
            np.ascontiguousarray(table[:, :, k]) for k in range(5)
        )
        step_size[step_size == 0] = 1
        return cls(
            providers=tuple(providers),
            classes=classes,
            total=total,
            reserved=reserved,
            used=np.ascontiguousarray(used, dtype=np.int64),
            allocation_ratio=np.ascontiguousarray(ratios, dtype=np.float64),
            min_unit=min_unit,
            max_unit=max_unit,
            step_size=step_size,
            aggregates=dict(aggregates or {}),
        )


_LACKING = (0, 0, 0, 0, 0, 0)
"""A class a provider lacks, in :meth:`Snapshot.build`."""
_SLOTS = tuple(f.name for f in fields(Snapshot))


@dataclass(frozen=True, slots=True)
class Hints:
    """Scheduler hints (Nova's names)."""

    same_host: frozenset[str] = frozenset()
    """Instance (consumer) ids: place on a provider that has one of them."""
    different_host: frozenset[str] = frozenset()
    query: str | list[Any] | None = None
    """A JsonFilter query over the provider's attributes."""
    build_near_host_ip: str | None = None
    cidr: str = "/24"


@dataclass(frozen=True, slots=True)
class TagRules:
    """Shaken Fist's binary affinity: hard requirements and ±1 preferences."""

    require_with: frozenset[str] = frozenset()
    require_without: frozenset[str] = frozenset()
    prefer_with: frozenset[str] = frozenset()
    prefer_without: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Request:
    """One placement request: ``num_instances`` instances of one shape."""

    request_id: str
    resources: Mapping[str, int]
    project_id: str = ""
    user_id: str = ""
    name: str = ""
    """The instance's name, for the placement scriptlet."""
    num_instances: int = 1
    flavor_name: str = ""
    extra_specs: Mapping[str, str] = field(default_factory=dict)
    image_properties: Mapping[str, str] = field(default_factory=dict)
    availability_zone: str | None = None
    required_traits: frozenset[str] = frozenset()
    forbidden_traits: frozenset[str] = frozenset()
    hints: Hints = Hints()
    group_id: str | None = None
    group_policy: GroupPolicy | None = None
    max_server_per_host: int = 1
    tags: TagRules = TagRules()
    tried_providers: frozenset[str] = frozenset()
    """Providers an earlier attempt of this request was rejected on (Retry)."""
    ts_ms: int | None = None
    """When the request was made: what the age of a provider's metrics is
    measured against (the engine reads no clock)."""
    reason: PlacementReason = "new"
    """LXD's placement reasons: a new instance, or one moved off an
    evacuating provider, or moved to balance load (the placement scriptlet
    sees it)."""
    source_provider: str | None = None
    """On a move, the provider the instance leaves (CrossCellWeigher
    prefers its cell)."""
    sriov_ports: tuple[SriovPort, ...] = ()
    """SR-IOV ports each instance has: a device on each one's physical
    network (PciPassthroughFilter)."""
