"""Placement's inventory check, with Nova's per-aggregate allocation ratios.

One filter for every resource class, replacing Nova's Core/Ram/Disk filters
and their Aggregate variants: the request's amount of each class must fit the
provider's inventory constraints and its free capacity.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from projections.aggregates import ratio_keys, ratio_override
from scheduling.filters.base import Context, HostFilter
from scheduling.model import BoolArray, FloatArray, IntArray, Request, Snapshot, by_class

__all__ = ["ResourceFilter", "effective_ratios", "ratio_keys"]


def effective_ratios(snapshot: Snapshot) -> FloatArray:
    """``snapshot.allocation_ratio`` with the per-aggregate overrides applied
    (that very array when they change no ratio, so that the capacity table
    is the one the weighers read). Worked out once per set of aggregates
    the providers are in: a few sets, many providers."""
    keyed = {j: ratio_keys(rc) for j, rc in enumerate(snapshot.classes)}
    overriding = {
        name
        for name, aggregate in snapshot.aggregates.items()
        if any(k in aggregate.metadata for keys in keyed.values() for k in keys)
    }
    if not overriding:
        return snapshot.allocation_ratio
    members: dict[frozenset[str], list[int]] = {}
    for row, provider in enumerate(snapshot.providers):
        names = provider.aggregates
        if names and not overriding.isdisjoint(names):
            members.setdefault(names, []).append(row)
    ratios = snapshot.allocation_ratio.copy()
    for names, rows in members.items():
        aggregates = [snapshot.aggregates[n] for n in sorted(names) if n in snapshot.aggregates]
        at = np.asarray(rows, dtype=np.int64)
        for j, keys in keyed.items():
            values = {a.metadata[k] for a in aggregates for k in keys if k in a.metadata}
            ratio = ratio_override(values)
            if ratio is not None:
                ratios[at, j] = ratio
    if np.array_equal(ratios, snapshot.allocation_ratio):
        return snapshot.allocation_ratio
    return ratios


@dataclass(frozen=True, slots=True)
class _Demand:
    """A request's resources against one inventory table: the (column,
    amount) of each class it asks a positive amount of, and the providers
    whose unit rules allow them all. No rules when it asks for nothing (it
    fits everywhere) or for a class the snapshot lacks (``fits_nowhere``)."""

    wanted: tuple[tuple[int, int], ...] = ()
    rules: BoolArray | None = None
    fits_nowhere: bool = False
    amounts: tuple[tuple[int, np.int64], ...] = field(init=False)
    """``wanted`` with NumPy amounts, which compare with an array without
    converting a Python int each time."""
    rules_pass_all: bool = False
    """Whether every provider's unit rules allow the request (the usual
    min_unit 1, step_size 1), so that only the free amounts need checking
    (``rules`` is then not read)."""

    def __post_init__(self) -> None:
        amounts = tuple((j, np.int64(amount)) for j, amount in self.wanted)
        object.__setattr__(self, "amounts", amounts)
        if self.rules is not None and not self.rules_pass_all and bool(self.rules.all()):
            object.__setattr__(self, "rules_pass_all", True)


class ResourceFilter(HostFilter):
    """For every class the request asks a positive amount of, the provider must
    have inventory of it (total > 0), the amount must lie within
    [min_unit, max_unit] and be a multiple of step_size, and it must fit in
    (total - reserved) x allocation_ratio less what is used, counting the
    earlier picks of this request (``ctx.used``).

    An aggregate's ``<class>_allocation_ratio`` metadata (or Nova's
    ``cpu_``/``ram_``/``disk_allocation_ratio``) replaces the inventory's
    ratio; with several, the smallest wins, and if any of them is not a
    positive finite number the inventory's ratio stands."""

    name = "ResourceFilter"
    cost = 2
    per_pick = True

    def __init__(self) -> None:
        # Capacity and the unit rules depend only on the inventories, which
        # every request on a snapshot (and its usage-only twins) shares, so
        # they are computed once per inventory, not per decision.
        self._inventory: tuple[object, ...] = ()
        self._by_class: IntArray = np.zeros((0, 0), dtype=np.int64)
        """Capacity, classes x providers, as ``Context.free`` reads it."""
        self._demands: dict[tuple[tuple[str, int], ...], _Demand] = {}
        self._limits: dict[int, tuple[bool, int, int, int]] = {}
        """Per column, over every provider: (all have some, the largest
        min_unit, the smallest max_unit, the largest step_size), worked out
        once per inventory table when a shape first asks for the class."""

    def _tables(self, snapshot: Snapshot) -> IntArray:
        """Capacity by class for ``snapshot``; a snapshot refreshed from the
        view shares the arrays that did not change, so the tables are kept
        while every one they derive from is the same object."""
        inventory = snapshot.inventory()
        if len(inventory) != len(self._inventory) or not all(
            map(operator.is_, inventory, self._inventory)
        ):
            ratios = effective_ratios(snapshot)
            if ratios is snapshot.allocation_ratio:
                # shared with the weighers, so that they reuse the filter's free
                self._by_class = snapshot.capacity_by_class()
            else:
                self._by_class = by_class(snapshot.capacity(ratios))
            self._demands = {}
            self._limits = {}
            self._inventory = inventory
        return self._by_class

    @staticmethod
    def _unit_rules(snapshot: Snapshot, wanted: tuple[tuple[int, int], ...]) -> BoolArray:
        """Providers that have every (column, amount) wanted and allow each
        amount by their unit rules."""
        rules = np.ones(snapshot.size, dtype=np.bool_)
        for column, amount in wanted:
            step = np.maximum(snapshot.step_size[:, column], 1)
            rules &= (
                (snapshot.total[:, column] > 0)
                & (snapshot.min_unit[:, column] <= amount)
                & (amount <= snapshot.max_unit[:, column])
                & (amount % step == 0)
            )
        return rules

    def capacity(self, snapshot: Snapshot) -> IntArray:
        """Capacity, classes x providers, with the aggregates' ratios: what
        this filter measures a request against (read-only)."""
        return self._tables(snapshot)

    def only_free(self, snapshot: Snapshot, request: Request) -> bool:
        """Whether this filter's answer to ``request`` on ``snapshot`` is
        only that the free amount of each class asked (against ``capacity``)
        holds it: every class is in the snapshot and every provider's unit
        rules allow the amounts. Bounded placement's index checks exactly
        that as it walks, so it need not be asked again."""
        demand = self._demand(snapshot, request.resources)
        return demand.rules_pass_all and not demand.fits_nowhere

    def _free(self, ctx: Context, rows: IntArray, column: int) -> IntArray:
        capacity = self._tables(ctx.snapshot)[column, rows]
        free: IntArray = capacity - ctx.used_of(rows, column)
        return free

    def _demand(self, snapshot: Snapshot, resources: Mapping[str, int]) -> _Demand:
        """What ``resources`` asks of this snapshot's inventories, worked out
        once per inventory table and request shape."""
        self._tables(snapshot)
        key = tuple(resources.items())
        demand = self._demands.get(key)
        if demand is None:
            demand = self._work_out(snapshot, resources)
            if len(self._demands) > 1024:
                self._demands.clear()
            self._demands[key] = demand
        return demand

    def _work_out(self, snapshot: Snapshot, resources: Mapping[str, int]) -> _Demand:
        wanted: list[tuple[int, int]] = []
        for rc, amount in resources.items():
            if amount <= 0:
                continue
            j = snapshot.column(rc)
            if j is None:
                return _Demand(fits_nowhere=True)
            wanted.append((j, amount))
        if not wanted:
            return _Demand()
        if all(self._allow_all(snapshot, j, amount) for j, amount in wanted):
            # a new shape costs O(classes), not a pass over every provider
            return _Demand(tuple(wanted), np.ones(0, dtype=np.bool_), rules_pass_all=True)
        return _Demand(tuple(wanted), self._unit_rules(snapshot, tuple(wanted)))

    def _allow_all(self, snapshot: Snapshot, column: int, amount: int) -> bool:
        """Whether every provider's unit rules for ``column`` allow ``amount``."""
        limits = self._limits.get(column)
        if limits is None:
            if not snapshot.size:
                return True
            limits = self._limits[column] = (
                bool((snapshot.total[:, column] > 0).all()),
                int(snapshot.min_unit[:, column].max()),
                int(snapshot.max_unit[:, column].min()),
                int(snapshot.step_size[:, column].max()),
            )
        provided, low, high, step = limits
        return provided and low <= amount <= high and step <= 1

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        snap = ctx.snapshot
        demand = self._demand(snap, ctx.request.resources)
        if demand.rules is None:
            return np.full(len(rows), not demand.fits_nowhere, dtype=np.bool_)
        free = ctx.free(rows, self._by_class)  # _demand brought the tables up to date
        # class by class: a 2-D comparison reduced with all(axis=0) costs
        # more on a few classes
        (first, amount), *others = demand.amounts
        ok: BoolArray = free[first] >= amount
        for j, amount in others:
            ok &= free[j] >= amount
        if not demand.rules_pass_all:
            ok &= demand.rules.take(rows)
        return ok

    def reject(self, ctx: Context, row: int) -> str | None:
        snap = ctx.snapshot
        one = np.array([row], dtype=np.int64)
        for rc, amount in ctx.request.resources.items():
            if amount <= 0:
                continue
            j = snap.column(rc)
            if j is None or snap.total[row, j] <= 0:
                return f"{rc} not provided"
            if amount < snap.min_unit[row, j]:
                return f"{rc} {amount} is below min_unit {snap.min_unit[row, j]}"
            if amount > snap.max_unit[row, j]:
                return f"{rc} {amount} is above max_unit {snap.max_unit[row, j]}"
            step = max(int(snap.step_size[row, j]), 1)
            if amount % step:
                return f"{rc} {amount} is not a multiple of step_size {step}"
            free = int(self._free(ctx, one, j)[0])
            if amount > free:
                return f"{rc} wanted {amount}, free {free}"
        return None

    def reasons(self, ctx: Context, rows: IntArray) -> list[str]:
        # the same ladder as ``reject``, class by class, on whole arrays: the
        # diagnostics of a failed request ask about every provider
        snap = ctx.snapshot
        out: list[str | None] = [None] * len(rows)
        for rc, amount in ctx.request.resources.items():
            if amount <= 0:
                continue
            j = snap.column(rc)
            if j is None:
                missing = [f"{rc} not provided"] * len(rows)
                out = [o if o is not None else m for o, m in zip(out, missing, strict=True)]
                continue
            total = snap.total[rows, j].tolist()
            low = snap.min_unit[rows, j].tolist()
            high = snap.max_unit[rows, j].tolist()
            step = np.maximum(snap.step_size[rows, j], 1).tolist()
            free = self._free(ctx, rows, j).tolist()
            for k in range(len(rows)):
                if out[k] is not None:
                    continue
                if total[k] <= 0:
                    out[k] = f"{rc} not provided"
                elif amount < low[k]:
                    out[k] = f"{rc} {amount} is below min_unit {low[k]}"
                elif amount > high[k]:
                    out[k] = f"{rc} {amount} is above max_unit {high[k]}"
                elif amount % step[k]:
                    out[k] = f"{rc} {amount} is not a multiple of step_size {step[k]}"
                elif amount > free[k]:
                    out[k] = f"{rc} wanted {amount}, free {free[k]}"
        return [reason or "rejected" for reason in out]
