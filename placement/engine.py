"""The placement engine: filter, then weigh, then pick, once per instance.

Pure: a snapshot and a request in, a placement out. Filters run cheapest
first; those that do not depend on earlier picks run once per request, the
others (resources, affinity) for every instance, so each pick sees what the
earlier picks of the same request virtually consumed. Ties go to the
provider that comes first in the snapshot, so the same inputs always give the
same answer. The elimination trace (which filter rejected each provider, and
why) is data, built when asked for with ``explain`` and whenever a request
cannot be placed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from placement.filters.base import Context, HostFilter
from placement.model import BoolArray, FloatArray, IntArray, Request, Snapshot
from placement.weighers.base import Weigher
from placement.weighers.combine import weigh_all


@dataclass(frozen=True, slots=True)
class Elimination:
    provider_id: str
    filter: str
    reason: str

    def __str__(self) -> str:
        return f"{self.provider_id}: {self.reason} ({self.filter})"


@dataclass(frozen=True, slots=True)
class Trace:
    """Why providers were not chosen: the first filter that rejected each."""

    considered: int
    eliminations: tuple[Elimination, ...]
    counts: Mapping[str, int]
    """Filter name -> how many providers it removed, in the order filters ran."""

    def lines(self) -> list[str]:
        counts = ", ".join(f"{name}: -{n}" for name, n in self.counts.items())
        return [f"{self.considered} providers considered; {counts}"] + [
            str(e) for e in self.eliminations
        ]


@dataclass(frozen=True, slots=True)
class Placement:
    request_id: str
    providers: tuple[str, ...]
    """One provider id per instance placed (empty when nothing could be)."""
    weights: tuple[float, ...]
    wanted: int
    trace: Trace | None = None

    @property
    def placed(self) -> bool:
        return len(self.providers) == self.wanted

    @property
    def reason(self) -> str:
        """One line for a failure: how far it got and what removed the providers."""
        if self.placed:
            return ""
        got = f"{len(self.providers)} of {self.wanted} instances placed"
        if self.trace is None:
            return f"no valid host: {got}"
        counts = ", ".join(f"{name} removed {n}" for name, n in self.trace.counts.items() if n)
        return f"no valid host: {got}; {counts}"


@dataclass(frozen=True, slots=True)
class Sampling:
    """Weigh only a rotating sample of the feasible providers on large clusters
    (like Kubernetes' percentageOfNodesToScore): at least ``minimum``, else
    ``percentage`` of them."""

    percentage: float = 100.0
    minimum: int = 100

    def size(self, feasible: int) -> int:
        if self.percentage >= 100.0:
            return feasible
        return min(feasible, max(self.minimum, int(feasible * self.percentage / 100.0)))


@dataclass(slots=True)
class _Run:
    ctx: Context
    explain: bool
    gone: BoolArray
    """Rows some filter has already rejected (their first story stands)."""
    eliminations: dict[int, Elimination] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    """Filter -> providers it was the first to reject."""

    def apply(self, f: HostFilter, rows: IntArray) -> IntArray:
        keep = f.mask(self.ctx, rows)
        if keep.all():
            return rows
        dropped = rows[~keep]
        first = dropped[~self.gone[dropped]]
        if len(first):
            self.gone[first] = True
            self.counts[f.name] += len(first)
            if self.explain:
                providers = self.ctx.snapshot.providers
                for row, reason in zip(first.tolist(), f.reasons(self.ctx, first), strict=True):
                    self.eliminations[row] = Elimination(providers[row].provider_id, f.name, reason)
        return rows[keep]


class Engine:
    """Filters and weighers, configured once; ``place`` per request."""

    def __init__(
        self,
        filters: Sequence[HostFilter],
        weighers: Sequence[Weigher] = (),
        sampling: Sampling | None = None,
    ) -> None:
        ordered = sorted(filters, key=lambda f: f.cost)
        self.once = [f for f in ordered if not f.per_pick]
        self.each_pick = [f for f in ordered if f.per_pick]
        self.weighers = list(weighers)
        self.sampling = sampling or Sampling()
        self._next_start = 0  # where the next sample starts, so samples rotate

    def place(self, snapshot: Snapshot, request: Request, explain: bool = False) -> Placement:
        placement = self._place(snapshot, request, explain)
        if not placement.placed and not explain:
            # the full story costs nothing on the success path
            placement = self._place(snapshot, request, explain=True)
        return placement

    def _place(self, snapshot: Snapshot, request: Request, explain: bool) -> Placement:
        ctx = Context.start(snapshot, request)
        run = _Run(ctx, explain, np.zeros(snapshot.size, dtype=np.bool_))
        demand = _demand(snapshot, request.resources)
        rows: IntArray = np.arange(snapshot.size, dtype=np.int64)
        for f in self.once:
            if f.applies(request):
                rows = run.apply(f, rows)
        each_pick = [f for f in self.each_pick if f.applies(request)]
        picks: list[str] = []
        weights: list[float] = []
        for _ in range(request.num_instances):
            candidates = rows
            for f in each_pick:
                candidates = run.apply(f, candidates)
            if len(candidates) == 0:
                break
            window = self._sample(candidates)
            scores = self._weigh(ctx, window)
            best = int(np.argmax(scores))  # first maximum: snapshot order breaks ties
            row = int(window[best])
            picks.append(snapshot.providers[row].provider_id)
            weights.append(float(scores[best]))
            ctx.used[row] += demand
            ctx.picked.append(row)
        trace = None
        if explain:
            trace = Trace(
                considered=snapshot.size,
                eliminations=tuple(run.eliminations[r] for r in sorted(run.eliminations)),
                counts=dict(run.counts),
            )
        return Placement(
            request.request_id, tuple(picks), tuple(weights), request.num_instances, trace
        )

    def _sample(self, candidates: IntArray) -> IntArray:
        size = self.sampling.size(len(candidates))
        if size >= len(candidates):
            return candidates
        start = self._next_start % len(candidates)
        self._next_start = start + size
        return np.roll(candidates, -start)[:size]

    def _weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        return weigh_all(self.weighers, ctx, rows)


def _demand(snapshot: Snapshot, resources: Mapping[str, int]) -> IntArray:
    """The request's amounts as a row over the snapshot's classes (classes the
    snapshot lacks are the resource filter's business)."""
    demand = np.zeros(len(snapshot.classes), dtype=np.int64)
    for rc, amount in resources.items():
        column = snapshot.column(rc)
        if column is not None:
            demand[column] = amount
    return demand
