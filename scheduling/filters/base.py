"""The filter port: one small unit with one job, configured by its constructor.

A filter answers for one provider with ``reject(ctx, row)``: ``None`` if the
provider passes, else a short reason a person can act on (``"MEMORY_MB
wanted 8192, free 4096"``). The engine calls ``mask`` for the fast path;
the default loops over ``reject``, and the resource filters override it with
whole-array NumPy operations.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from scheduling.model import Aggregate, BoolArray, FloatArray, IntArray, Provider, Request, Snapshot


def frozen(value: Any) -> Hashable:
    """``value`` (mappings, lists and sets within) as something hashable."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    if isinstance(value, set | frozenset):
        return frozenset(frozen(v) for v in value)
    return value  # type: ignore[no-any-return]


def static_key(provider: Provider) -> Hashable:
    """Everything a static filter may read of a provider (see
    ``HostFilter.static``)."""
    return (
        provider.state,
        provider.availability_zone,
        provider.traits,
        provider.aggregates,
        frozen(provider.capabilities) if provider.capabilities else (),
        frozen(provider.metadata) if provider.metadata else (),
    )


@dataclass(slots=True)
class Context:
    """One request being placed: the snapshot, the request, and what earlier
    picks of the same request have virtually consumed."""

    snapshot: Snapshot
    request: Request
    used: IntArray
    """``snapshot.used`` plus the virtual consumption of earlier picks."""
    picked: list[int] = field(default_factory=list)
    """Rows already picked for this request (one per earlier instance)."""
    extra: dict[int, IntArray] = field(default_factory=dict)
    """Row -> virtual consumption of earlier picks not in ``used``: bounded
    placement keeps it aside, since copying a million providers' usage for
    it would cost more than the decision. Read ``used`` through ``free``,
    ``used_of`` and ``used_at``, which add it."""
    reference: FloatArray | None = None
    """Per class, what to normalise free capacity by at least (bounded
    placement: the largest among every provider the request can take, not
    only among the candidates weighed), or None: the candidates' largest."""
    io_reference: float = 0.0
    """The same for I/O operations in flight."""
    _free: tuple[IntArray, IntArray, int, IntArray] | None = None
    """(rows, capacity, picks so far, what is free) of the last ``free``
    call, or carried over to the rows a filter kept: the resource filter
    and the three resource weighers of one pick ask about the same rows."""
    _scaled: tuple[IntArray, IntArray, int, FloatArray] | None = None
    """The same for ``free_scaled``."""
    _run: tuple[IntArray, int, int, BoolArray | None] | None = None
    """(rows, start, stop, keep): ``rows`` are the rows start..stop-1, or
    those of them ``keep`` marks."""

    def free(self, rows: IntArray, capacity: IntArray) -> IntArray:
        """What is free of every class on ``rows``, by class: row j is
        ``capacity[j, rows] - used[rows, j]``, where ``capacity`` is by
        class (``Snapshot.capacity_by_class``)."""
        memo = self._free
        if (
            memo is not None
            and memo[0] is rows
            and memo[1] is capacity
            and memo[2] == len(self.picked)
        ):
            return memo[3]
        free: IntArray
        run = self._run
        if run is not None and run[0] is rows:
            # slices are views, so only the subtraction touches the data;
            # gathering rows of a few classes costs several times more
            _, start, stop, keep = run
            free = capacity[:, start:stop] - self.used[start:stop].T
            if keep is not None:
                free = free.compress(keep, axis=1)
        else:
            free = capacity.take(rows, axis=1) - self.used.take(rows, axis=0).T
        for row, amount in self.extra.items():
            hits = np.flatnonzero(rows == row)
            if len(hits):
                free[:, hits] -= amount[:, None]
        self._free = (rows, capacity, len(self.picked), free)
        return free

    def gather(self, column: NDArray[Any], rows: IntArray) -> NDArray[Any]:
        """``column[rows]`` as an array of its own (a per-provider column of
        the snapshot): read as a slice of the run ``rows`` are, if they are
        one (a copy, or what a filter's cut kept of it), which costs a
        fraction of gathering them one by one."""
        run = self._run
        if run is not None and run[0] is rows:
            _, start, stop, keep = run
            part = column[start:stop]
            gathered: NDArray[Any] = part.copy() if keep is None else part.compress(keep)
            return gathered
        taken: NDArray[Any] = column.take(rows)
        return taken

    def used_of(self, rows: IntArray, column: int) -> IntArray:
        """What is used of class ``column`` on ``rows``, earlier picks included."""
        used: IntArray = self.used[rows, column]  # a gather: a copy of its own
        for row, amount in self.extra.items():
            used[rows == row] += amount[column]
        return used

    def used_at(self, row: int, column: int) -> int:
        """``used_of`` for one row."""
        extra = self.extra.get(row)
        return int(self.used[row, column]) + (0 if extra is None else int(extra[column]))

    def consecutive(self, rows: IntArray, start: int) -> None:
        """``rows`` are ``start``, ``start + 1``, ... (a sample that does not
        wrap around, or every row), which ``free`` can read as slices."""
        self._run = (rows, start, start + len(rows), None)

    def narrow(self, rows: IntArray, keep: BoolArray, kept: IntArray) -> None:
        """``kept`` is ``rows[keep]``: what ``free`` knows of ``rows`` carries
        over, so the weighers after a filter do not gather it again."""
        memo = self._free
        if memo is not None and memo[0] is rows and memo[2] == len(self.picked):
            # compress: several times quicker than boolean indexing on 2-D
            self._free = (kept, memo[1], memo[2], memo[3].compress(keep, axis=1))
        run = self._run
        if run is not None and run[0] is rows and run[3] is None:
            # one filter's cut of a run (usually ComputeFilter's) is still
            # cheaper to read as the run's slices, compressed
            self._run = (kept, run[1], run[2], keep)

    def free_scaled(self, rows: IntArray, capacity: IntArray) -> FloatArray:
        """``free(rows, capacity)`` as floats clamped at 0 and divided by each
        class's largest value (a class whose largest is 0 stays all 0):
        Nova's normalisation with ``minval = 0``, done for every class at
        once since the RAM, CPU and disk weighers of one pick all want it."""
        memo = self._scaled
        picks = len(self.picked)
        if memo is not None and memo[0] is rows and memo[1] is capacity and memo[2] == picks:
            return memo[3]
        # clamped as ints, then cast: the same numbers as casting first, quicker
        scaled: FloatArray = np.maximum(self.free(rows, capacity), 0).astype(np.float64)
        highest = scaled.max(axis=1, keepdims=True)
        if self.reference is not None:
            highest = np.maximum(highest, self.reference[:, None])
        # (x - 0.0) / (high - 0.0) is exactly x / high: normalize's arithmetic
        if 0.0 not in highest.ravel().tolist():
            scaled /= highest
        else:
            np.divide(scaled, highest, out=scaled, where=highest > 0.0)
        self._scaled = (rows, capacity, picks, scaled)
        return scaled

    @classmethod
    def start(cls, snapshot: Snapshot, request: Request) -> Context:
        return cls(snapshot, request, snapshot.used.copy())


class HostFilter(ABC):
    """Base of every filter. ``cost`` orders them (cheapest first);
    ``per_pick`` marks filters whose answer changes as a multi-instance
    request picks providers (resources, affinity), so they run for every pick
    instead of once per request."""

    name: ClassVar[str]
    cost: ClassVar[int] = 10
    per_pick: ClassVar[bool] = False
    static: ClassVar[bool] = False
    """True when a provider's answer depends only on the request's
    placement-wide fields (:func:`scheduling.index.signature`: zone, traits,
    extra specs, image, project, user, flavor) and on what
    :func:`scheduling.index.static_key` reads of the provider (state, zone,
    traits, aggregates and their metadata, capabilities, metadata): bounded
    placement then asks it once per group of providers alike in those,
    instead of once per provider."""

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        """For a static filter, what it reads of ``provider`` (with the
        snapshot's ``aggregates``): providers with equal keys get the same
        answer to every request, so bounded placement groups them by the
        keys of the static filters enabled. By default everything a static
        filter may read; a filter that reads less says so, and the groups
        are fewer and larger."""
        return static_key(provider)

    def request_key(self, request: Request) -> Hashable:
        """For a static filter, what it reads of ``request``: requests with
        equal keys get the same answer from each provider, so bounded
        placement shares a filter's verdict on a group of providers between
        kinds of request that differ in what it does not read. None (the
        default): anything a static filter may read
        (:func:`scheduling.index.signature`); a filter that reads less says so."""
        return None

    reads_others: ClassVar[bool] = False
    """True when a provider's answer depends on other providers (where a
    server group's members are): bounded placement cannot judge a draw of
    candidates on their own, so a request this filter applies to is placed
    by a full scan. A filter that reads only its own provider's record and
    numbers, and the request, leaves both False (the default, which suits
    most plug-ins)."""

    def applies(self, request: Request) -> bool:
        """False when ``request`` asks nothing of this filter, so the engine
        can skip it: most requests use few hints and constraints."""
        return True

    def scans(self, request: Request) -> bool:
        """True when this (static) filter's answer to ``request`` depends on
        more than its group key says, usage say: bounded placement then
        leaves the request to a full scan, as for ``reads_others``."""
        return False

    def refuses(self, request: Request) -> str | None:
        """Why this filter's configuration can give ``request`` no meaning at
        all (a PCI alias it does not define), or None: the scheduler then
        fails the request with this reason before looking at any provider."""
        return None

    @abstractmethod
    def reject(self, ctx: Context, row: int) -> str | None:
        """Why ``row`` cannot take the request, or None if it can."""

    def reasons(self, ctx: Context, rows: IntArray) -> list[str]:
        """Why each of ``rows`` (all rejected by ``mask``) was rejected; for the
        diagnostics, which may ask about thousands of providers at once."""
        return [self.reject(ctx, int(row)) or "rejected" for row in rows]

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        """Which of ``rows`` pass (vectorised filters override this)."""
        return np.fromiter(
            (self.reject(ctx, int(row)) is None for row in rows), dtype=np.bool_, count=len(rows)
        )
