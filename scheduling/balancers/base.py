"""The balance port: oVirt's balance policy unit, on Berth's snapshot.

A unit reads the cluster's load (:class:`Load`: the snapshot plus the
instances on each provider) and names, most urgent first, the providers it
wants an instance moved off (:class:`Source`), which of their instances to
try in what order, and which providers may take each. It proposes; the
placement engine's filters and weighers choose among the providers it
allows, and the partition's writer disposes of the claim that follows. A
unit reads no clock and draws no random number (oVirt picks a VM at
random; Berth orders them), so the same view gives the same plan.

Every unit's destinations leave the cluster strictly better by the unit's
own measure, and a plan moves an instance at most once, so a plan of many
moves cannot swing load back and forth.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import ClassVar, Literal

import numpy as np

from scheduling.engine import demand_row
from scheduling.fit import taken
from scheduling.model import BoolArray, FloatArray, IntArray, Provider, Snapshot
from schemas.events import GuestAsks
from schemas.topology import TopologyFit

SourceKind = Literal["over", "under", "crowded", "evacuating"]


@dataclass(frozen=True, slots=True)
class Instance:
    """A running instance the balancer may move: a consumed reservation of
    one item, with the rules its claim carried (so its new claim carries them
    again) and what its request asked of NUMA cells and PCI devices, when
    its claim carried a fit (so its destination is fitted again)."""

    reservation_id: str
    consumer_id: str
    project_id: str
    provider_id: str
    resources: Mapping[str, int]
    anti_affinity_group: str | None = None
    tags: frozenset[str] = frozenset()
    require_with_tags: frozenset[str] = frozenset()
    require_without_tags: frozenset[str] = frozenset()
    guest: GuestAsks | None = None
    fitted: bool = False
    """Its claim carried a fit: without ``guest`` (a claim made before
    claims kept their asks) it cannot be fitted again, and does not move."""


@dataclass(frozen=True, slots=True)
class Source:
    """A provider a unit wants an instance moved off, and why."""

    row: int
    kind: SourceKind
    why: str


class Load:
    """The cluster as balance units see it, in two views.

    ``snapshot`` is what the engine fits a move against, as the writer will
    decide its claim: every instance counts where it is until its move is
    done, and a planned move's destination already holds it. ``used`` and
    :meth:`counts` are what units measure relief by: there, moves planned
    (and ``leaving``: moves in flight) have left their sources. A plan
    therefore never counts on room that a move still to be carried out would
    free. ``by_row`` lists, per row, the instances that may still move (not
    those a planned move took there), in reservation id order."""

    def __init__(
        self,
        snapshot: Snapshot,
        by_row: Sequence[tuple[Instance, ...]],
        used: IntArray,
        counts: IntArray,
    ) -> None:
        self.snapshot = snapshot
        self.by_row = list(by_row)
        self.used = used
        self._counts = counts
        self.capacity = snapshot.capacity_table()

    @classmethod
    def of(
        cls, snapshot: Snapshot, instances: Sequence[Instance], leaving: Sequence[Instance] = ()
    ) -> Load:
        """Instances on providers the snapshot lacks are left out."""
        found: dict[int, list[Instance]] = {}
        row_of = snapshot.row_of
        for instance in sorted(instances, key=_reservation_id):
            row = row_of.get(instance.provider_id)
            if row is not None:
                found.setdefault(row, []).append(instance)
        ordered: list[tuple[Instance, ...]] = [()] * snapshot.size
        for row, placed in found.items():
            ordered[row] = tuple(placed)
        providers = snapshot.providers
        used = snapshot.used.copy()
        counts = np.fromiter((len(p.instances) for p in providers), np.int64, len(providers))
        for instance in leaving:
            row = snapshot.row_of.get(instance.provider_id)
            if row is not None:
                used[row] -= demand_row(snapshot, instance.resources)
                counts[row] -= 1
        return cls(snapshot, ordered, used, counts)

    def provider_id(self, row: int) -> str:
        return self.snapshot.providers[row].provider_id

    def utilisation(self, resource_class: str, extra: int = 0) -> FloatArray:
        """Percent of each provider's capacity in ``resource_class`` that is
        used (held or consumed, with moves gone), with ``extra`` more; NaN
        where it has none, which compares false with every threshold."""
        out = np.full(self.snapshot.size, np.nan, dtype=np.float64)
        column = self.snapshot.column(resource_class)
        if column is None:
            return out
        capacity = self.capacity[:, column].astype(np.float64)
        used = self.used[:, column].astype(np.float64) + float(extra)
        np.divide(used * 100.0, capacity, out=out, where=capacity > 0)
        return out

    def counts(self) -> IntArray:
        """Instances (movable or not) on each provider, with moves gone."""
        return self._counts

    def ranked(self, among: BoolArray, key: FloatArray | IntArray) -> Iterator[int]:
        """The rows ``among`` marks that hold an instance that may move, by
        ``key`` ascending, ties in row order."""
        rows = np.flatnonzero(among)
        for row in rows[np.argsort(key[rows], kind="stable")].tolist():
            if self.by_row[row]:
                yield row

    def open_to(self, source: int) -> BoolArray:
        """Providers that may take an instance at all: enabled, and not ``source``."""
        mask: BoolArray = self.snapshot.enabled.copy()
        mask[source] = False
        return mask

    def moved(
        self, instance: Instance, source: int, destination: int, fit: TopologyFit | None = None
    ) -> Load:
        """This load with ``instance`` planned to move from ``source`` to
        ``destination``: gone from the source in the units' view only; what
        its ``fit`` takes of the destination's cells and devices is taken
        (its source's stay held until the move is done)."""
        snapshot = self.snapshot
        demand = demand_row(snapshot, instance.resources)
        occupied = snapshot.used.copy()
        occupied[destination] += demand
        used = self.used.copy()
        used[source] -= demand
        used[destination] += demand
        counts = self._counts.copy()
        counts[source] -= 1
        counts[destination] += 1
        records = {destination: _with(snapshot.providers[destination], instance, fit)}
        # a plan moves an instance once: it leaves the movable ones for good
        by_row = list(self.by_row)
        by_row[source] = tuple(i for i in by_row[source] if i is not instance)
        return Load(snapshot.with_placements(records, occupied), by_row, used, counts)


_reservation_id = attrgetter("reservation_id")


def _with(provider: Provider, instance: Instance, fit: TopologyFit | None) -> Provider:
    cells, devices = taken(provider.numa_cells, provider.pci_devices, () if fit is None else (fit,))
    groups = Counter(provider.groups)
    tags = Counter(provider.tags)
    if instance.anti_affinity_group:
        groups[instance.anti_affinity_group] += 1
    tags.update(instance.tags)
    return dataclasses.replace(
        provider,
        numa_cells=cells,
        pci_devices=devices,
        instances=provider.instances | {instance.consumer_id},
        groups=dict(groups),
        tags=dict(tags),
    )


class BalanceUnit(ABC):
    """Base of every balance unit; options through the constructor.

    ``weighers`` is the unit's cluster policy's ranking (oVirt couples a
    balance unit with the cost functions that agree with it): the scheduler's
    weighers when its configuration names none."""

    name: ClassVar[str]
    weighers: ClassVar[Mapping[str, float] | None] = None

    @abstractmethod
    def sources(self, load: Load) -> Iterator[Source]:
        """Providers to move an instance off, most urgent first (lazily: a
        plan step usually needs only the first)."""

    @abstractmethod
    def candidates(self, load: Load, source: Source) -> list[Instance]:
        """The source's instances to try moving, in order."""

    @abstractmethod
    def destinations(self, load: Load, source: Source, instance: Instance) -> BoolArray:
        """Per row: may it take ``instance`` from ``source``?"""

    def balanced(self) -> str:
        """Why there is nothing to move, when :meth:`sources` finds nothing."""
        return f"{self.name}: nothing to move"


def check_count(name: str, value: int, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number of {least} or more, not {value!r}")
    return value


def amount_of(instance: Instance, resource_class: str) -> int:
    return int(instance.resources.get(resource_class, 0))


def check_percent(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, not {value!r}")
    if not 0.0 <= value <= 100.0:
        raise ValueError(f"{name} must be a percentage from 0 to 100, not {value}")
    return float(value)
