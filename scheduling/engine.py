"""The placement engine: filter, then weigh, then pick, once per instance.

No I/O, no clock, no randomness: the same snapshots and requests in the same
order give the same placements (where the sample starts is the engine's only
state). Filters run cheapest
first; those that do not depend on earlier picks run once per request, the
others (resources, affinity) for every instance, so each pick sees what the
earlier picks of the same request virtually consumed. Ties go to the
provider that comes first in the snapshot, so the same inputs always give the
same answer. With sampling, each request examines the next slice of
providers, so load spreads without scanning the whole cluster. The
elimination trace (which filter rejected each provider, and
why) is data, built when asked for with ``explain`` and whenever a request
cannot be placed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from scheduling.filters.base import Context, HostFilter
from scheduling.filters.resources import ResourceFilter
from scheduling.index import FeasibilityIndex
from scheduling.model import BoolArray, FloatArray, IntArray, Request, Snapshot
from scheduling.ranking import Described, Ranking
from scheduling.weighers.base import Weigher
from scheduling.weighers.combine import weigh_all, weigh_parts
from scheduling.weighers.ram import FreeResourceWeigher

if TYPE_CHECKING:
    from scheduling.scriptlet import Scriptlet


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
    refusal: str | None = None
    """Why the placement scriptlet refused the request, if it did."""
    examined: int = 0
    """Providers the decision looked at: every one (or the sample) in a
    full scan; in bounded mode those the index read to find the candidates."""
    scored: int = 0
    """Providers weighed for the first instance."""
    bounded: bool = False
    """Whether the index found the candidates (bounded mode)."""
    ranking: Ranking | None = None
    """The best candidates for the first instance, best first (the engine's
    ``ranked`` of them), as the weighers ranked them before the scriptlet
    had its say."""

    @property
    def placed(self) -> bool:
        return len(self.providers) == self.wanted

    @property
    def reason(self) -> str:
        """One line for a failure: how far it got and what removed the providers."""
        if self.placed:
            return ""
        got = f"{len(self.providers)} of {self.wanted} instances placed"
        if self.refusal is not None:
            return f"refused by the placement scriptlet: {self.refusal} ({got})"
        if self.trace is None:
            return f"no valid host: {got}"
        counts = ", ".join(f"{name} removed {n}" for name, n in self.trace.counts.items() if n)
        return f"no valid host: {got}; {counts}"


@dataclass(frozen=True, slots=True)
class Sampling:
    """Examine only a rotating sample of the providers on large clusters (like
    Kubernetes' percentageOfNodesToScore): ``percentage`` of them, at least
    ``minimum``. A request the sample cannot place is tried on all of them
    before it fails, so sampling never turns a fit into "no valid host"."""

    percentage: float = 100.0
    minimum: int = 100

    def size(self, feasible: int) -> int:
        if self.percentage >= 100.0:
            return feasible
        return min(feasible, max(self.minimum, int(feasible * self.percentage / 100.0)))


@dataclass(frozen=True, slots=True)
class Bounded:
    """When to place in bounded mode, and how: ``mode`` ``full`` always
    filters and weighs every provider (with ``Sampling``); ``bounded``
    weighs at most ``candidates`` providers drawn from the feasibility
    index (:mod:`scheduling.index`), in the order the resource weighers
    prefer; ``auto`` is bounded from ``from_providers`` providers on, below
    which a full scan costs less. ``levels``: how finely the index orders
    providers by free capacity (more: closer to the full scan's choice,
    more buckets to walk).

    Nova normalises each weigher over the candidates it weighs: every
    provider that passed the filters in a full scan, the ``candidates``
    drawn in bounded mode. A request with ``explain``, one restricted to
    given providers (``among``), one a filter judges by other providers
    (server-group affinity) or one whose candidates cannot take all its
    instances is placed by a full scan."""

    mode: Literal["full", "bounded", "auto"] = "auto"
    candidates: int = 64
    from_providers: int = 20_000
    levels: int = 64

    def __post_init__(self) -> None:
        if self.mode not in ("full", "bounded", "auto"):
            raise ValueError(f"mode must be full, bounded or auto, not {self.mode!r}")
        if self.candidates < 1 or self.levels < 1 or self.from_providers < 0:
            raise ValueError("candidates and levels must be at least 1, from_providers at least 0")

    def applies(self, size: int) -> bool:
        return self.mode == "bounded" or (self.mode == "auto" and size >= self.from_providers)


@dataclass(slots=True)
class _Run:
    ctx: Context
    explain: bool
    gone: BoolArray | None = None
    """Rows some filter has already rejected (their first story stands);
    allocated when a filter first rejects one. Kept only with ``explain``,
    as are the two below: nothing else reads them."""
    eliminations: dict[int, Elimination] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    """Filter -> providers it was the first to reject."""

    def apply(self, f: HostFilter, rows: IntArray) -> IntArray:
        keep = f.mask(self.ctx, rows)
        # count_nonzero is a plain C loop, cheaper than keep.all()'s reduction
        if np.count_nonzero(keep) == len(rows):
            return rows
        if self.explain:
            # only the trace reads the bookkeeping, so a decision without it skips it
            self._record(f, rows, keep)
        kept = rows[keep]
        self.ctx.narrow(rows, keep, kept)
        return kept

    def _record(self, f: HostFilter, rows: IntArray, keep: BoolArray) -> None:
        """Note which of the rows ``f`` dropped no earlier filter had."""
        dropped = rows[~keep]
        if self.gone is None:
            self.gone = np.zeros(self.ctx.snapshot.size, dtype=np.bool_)
            first = dropped
        else:
            first = dropped[~self.gone[dropped]]
        if len(first):
            self.gone[first] = True
            self.counts[f.name] = self.counts.get(f.name, 0) + len(first)
            providers = self.ctx.snapshot.providers
            for row, reason in zip(first.tolist(), f.reasons(self.ctx, first), strict=True):
                self.eliminations[row] = Elimination(providers[row].provider_id, f.name, reason)


class Engine:
    """Filters and weighers, configured once; ``place`` per request. A
    ``scriptlet`` has the last word on each pick among the providers left
    (see :mod:`scheduling.scriptlet`)."""

    def __init__(
        self,
        filters: Sequence[HostFilter],
        weighers: Sequence[Weigher] = (),
        sampling: Sampling | None = None,
        scriptlet: Scriptlet | None = None,
        bounded: Bounded | None = None,
        ranked: int = 10,
    ) -> None:
        """``ranked``: how many of the best candidates for a request's first
        instance its placement keeps, with each weigher's part (0: none)."""
        ordered = sorted(filters, key=lambda f: f.cost)
        self.once = [f for f in ordered if not f.per_pick]
        self.each_pick = [f for f in ordered if f.per_pick]
        self.weighers = list(weighers)
        self.sampling = sampling or Sampling()
        self.scriptlet = scriptlet
        self.bounded = bounded or Bounded()
        self.ranked = ranked
        self._resources = next((f for f in ordered if isinstance(f, ResourceFilter)), None)
        self.refusers = [f for f in ordered if type(f).refuses is not HostFilter.refuses]
        """The filters that may refuse a request outright (``refuses``)."""
        self._index: FeasibilityIndex | None = None
        self._described: Described | None = None
        """What the last ranking recorded of its weighers (``_describe``)."""
        self.index_builds = 0
        self._drew: FeasibilityIndex | None = None
        """The last draw's index, for what its candidates are normalised by
        (see ``Context.reference``)."""
        self._io: tuple[IntArray | None, float] = (None, 0.0)
        """How many times the index was built from scratch (not followed)."""
        self._next_start = 0  # where the next sample starts, so samples rotate
        self._rows: IntArray = np.arange(0, dtype=np.int64)
        """0 .. n-1 for the last snapshot size, read-only: windows are slices of it."""

    def place(
        self,
        snapshot: Snapshot,
        request: Request,
        explain: bool = False,
        among: IntArray | None = None,
    ) -> Placement:
        """Place ``request`` on ``snapshot``'s providers, or only on the rows
        ``among`` (ascending; a balance unit's allowed destinations): then
        without sampling, and with a trace only if ``explain`` asks."""
        if among is not None:
            return self._place(snapshot, request, explain, among, None)
        if not explain and self.bounded.applies(snapshot.size):
            bounded = self._place_bounded(snapshot, request)
            if bounded is not None:
                return bounded
        window = self._window(snapshot.size)
        if window is not None and not explain:
            placement = self._place(snapshot, request, False, *window)
            if placement.placed or placement.refusal is not None:
                return placement
            # the sample was not enough: look at every provider before saying no
        everyone = self._all_rows(snapshot.size)
        placement = self._place(snapshot, request, explain, everyone, 0)
        if not placement.placed and placement.refusal is None and not explain:
            # the full story costs nothing on the success path
            placement = self._place(snapshot, request, True, everyone, 0)
        return placement

    def refuses(self, request: Request) -> str | None:
        """Why a filter's configuration gives ``request`` no meaning, or None."""
        for f in self.refusers:
            reason = f.refuses(request)
            if reason is not None:
                return f"{reason} ({f.name})"
        return None

    def feasible(
        self, snapshot: Snapshot, request: Request, among: IntArray | None = None
    ) -> IntArray:
        """The rows every filter that applies to ``request`` lets through for
        its first instance, all providers considered (no sampling), or only
        the rows ``among`` (ascending), in ascending order; of all, in
        bounded mode, found through the index."""
        ctx = Context(snapshot, request, snapshot.used)
        if among is not None:
            rows = among
        else:
            if self.bounded.applies(snapshot.size):
                drawn = self._draw(snapshot, request, snapshot.size)
                if drawn is not None:
                    rows = drawn[0]
                    rows.sort()
                    return rows
            rows = self._all_rows(snapshot.size)
            ctx.consecutive(rows, 0)
        run = _Run(ctx, False)
        for f in (*self.once, *self.each_pick):
            if f.applies(request):
                rows = run.apply(f, rows)
        return rows

    def _window(self, size: int) -> tuple[IntArray, int | None] | None:
        """The rotating sample of rows to examine and, unless it wraps around
        the end, its first row; None for all of them."""
        wanted = self.sampling.size(size)
        if wanted >= size:
            return None
        start = self._next_start % size
        self._next_start = start + wanted
        every = self._all_rows(size)
        if start + wanted <= size:
            return every[start : start + wanted], start
        rows: IntArray = np.concatenate((every[start:], every[: start + wanted - size]))
        return rows, None

    def _all_rows(self, size: int) -> IntArray:
        if len(self._rows) != size:
            self._rows = np.arange(size, dtype=np.int64)
            self._rows.flags.writeable = False
        return self._rows

    def index(self, snapshot: Snapshot) -> FeasibilityIndex:
        """The feasibility index, brought up to ``snapshot`` (rebuilt when
        it cannot follow it there)."""
        capacity = None if self._resources is None else self._resources.capacity(snapshot)
        return self._index_at(snapshot, capacity)

    def _index_at(self, snapshot: Snapshot, capacity: IntArray | None) -> FeasibilityIndex:
        """``index`` with the resource filter's ``capacity`` of ``snapshot``."""
        index = self._index
        if index is None or not index.sync(snapshot, capacity):
            weights: dict[str, float] = {}
            for w in self.weighers:
                if isinstance(w, FreeResourceWeigher):
                    weights[w.resource_class] = weights.get(w.resource_class, 0.0) + w.multiplier
            statics = [f for f in (*self.once, *self.each_pick) if f.static]
            index = self._index = FeasibilityIndex(
                snapshot, weights, capacity, self.bounded.levels, statics
            )
            self.index_builds += 1
        return index

    def _most_io(self, snapshot: Snapshot) -> float:
        """The most I/O operations in flight on any provider (once per
        snapshot's counts, which usage-only twins share)."""
        counts, most = self._io
        if counts is not snapshot.num_io_ops:
            most = float(max(int(snapshot.num_io_ops.max(initial=0)), 0))
            self._io = (snapshot.num_io_ops, most)
        return most

    def _place_bounded(self, snapshot: Snapshot, request: Request) -> Placement | None:
        """Place ``request`` on candidates drawn from the index, or None when
        a full scan must decide (see :class:`Bounded`)."""
        drawn = self._draw(snapshot, request, max(self.bounded.candidates, request.num_instances))
        if drawn is None:
            return None  # the index cannot tell: the full scan decides
        candidates, examined, checks, everyone = drawn
        if not len(candidates):
            # the exact index found none: "no valid host" without a scan of
            # every provider to say why each one fails (``explain`` does)
            return Placement(
                request.request_id, (), (), request.num_instances, examined=examined, bounded=True
            )
        # in row order, so that ties go to the earliest row as in a full scan
        candidates.sort()
        each_pick = [f for f in self.each_pick if f in checks] if request.num_instances > 1 else []
        # all that fit drawn: their own largest values are the full scan's
        reference = None
        if not everyone:
            index = self._drew
            assert index is not None
            reference = (index.reference(), self._most_io(snapshot))
        placement = self._place(
            snapshot, request, False, candidates, None, (), each_pick, True, reference, examined
        )
        if not placement.placed and placement.refusal is None:
            return None  # the draw could not take every instance: decide on them all
        return placement

    def _draw(
        self, snapshot: Snapshot, request: Request, wanted: int
    ) -> tuple[IntArray, int, list[HostFilter], bool] | None:
        """The first ``wanted`` providers that every filter lets through for
        the request's first instance, in the index's order; how many the
        index read to find them; the filters checked one by one (those the
        index does not answer for); and whether those are all there are.
        None when the index cannot tell."""
        applying = [f for f in (*self.once, *self.each_pick) if f.applies(request)]
        if any(f.reads_others or f.scans(request) for f in applying):
            return None
        demand: list[tuple[int, int]] = []
        for rc, amount in request.resources.items():
            if amount > 0:
                column = snapshot.column(rc)
                if column is None:
                    return None  # fits nowhere: the full scan says so
                demand.append((column, amount))
        capacity = None if self._resources is None else self._resources.capacity(snapshot)
        index = self._index_at(snapshot, capacity)
        passing = index.passing(snapshot, request, [f for f in applying if f.static])
        self._drew = index
        checks = [f for f in applying if not f.static]
        asked = checks
        resources = self._resources
        if (
            resources is not None
            and resources in checks
            and index.prunes
            and resources.only_free(snapshot, request)
        ):
            # the walk checks the free amounts against the filter's capacity
            asked = [f for f in checks if f is not resources]
        ctx = Context(snapshot, request, snapshot.used) if asked else None
        found: list[IntArray] = []
        have = examined = 0
        everyone = False
        for rows in index.walk(snapshot, demand, passing, capacity, wanted - have):
            examined += len(rows)
            for f in asked:
                assert ctx is not None
                rows = rows[f.mask(ctx, rows)]
                if not len(rows):
                    break
            if len(rows):
                found.append(rows)
                have += len(rows)
                if have >= wanted:
                    break
        else:
            everyone = True  # the walk ended before finding as many as wanted
        if not found:
            return np.zeros(0, dtype=np.int64), examined, checks, True
        drawn = np.concatenate(found) if len(found) > 1 else found[0].copy()
        return drawn[:wanted], examined, checks, everyone

    def _place(
        self,
        snapshot: Snapshot,
        request: Request,
        explain: bool,
        rows: IntArray,
        start: int | None,
        once: Sequence[HostFilter] | None = None,
        each_pick: Sequence[HostFilter] | None = None,
        aside: bool = False,
        reference: tuple[FloatArray, float] | None = None,
        drawn: int | None = None,
    ) -> Placement:
        """Place ``request`` on ``rows``; ``start`` is given when they are
        consecutive, from ``start`` on. ``once`` and ``each_pick``: the
        filters to run (all that apply unless given); ``aside``: keep the
        picks' virtual consumption in ``Context.extra`` rather than a copy of
        the usage (for a few rows of a large snapshot). ``drawn``: bounded
        mode's, how many providers the index read to draw ``rows``."""
        # the snapshot's usage is only read until a pick that a later pick of
        # this request must see, so most requests never copy it
        ctx = Context(snapshot, request, snapshot.used)
        if reference is not None:
            ctx.reference, ctx.io_reference = reference
        considered = len(rows)
        if start is not None:
            ctx.consecutive(rows, start)
        run = _Run(ctx, explain)
        demand: IntArray | None = None  # only a pick that a later pick must see needs it
        for f in self.once if once is None else once:
            if f.applies(request):
                rows = run.apply(f, rows)
        if each_pick is None:
            each_pick = [f for f in self.each_pick if f.applies(request)]
        picks: list[str] = []
        scored = 0
        weights: list[float] = []
        refusal: str | None = None
        ranking: Ranking | None = None
        for _ in range(request.num_instances):
            candidates = rows
            for f in each_pick:
                candidates = run.apply(f, candidates)
            if len(candidates) == 0:
                break
            if scored or not self.ranked:
                scores = self._weigh(ctx, candidates)
            else:  # the first pick: what each weigher added, for the answer
                scores, active, parts = weigh_parts(self.weighers, ctx, candidates)
                described = self._describe(ctx, active)
                ranking = Ranking(ctx, candidates, scores, described, parts, self.ranked)
            scored = scored or len(candidates)
            best = int(scores.argmax())  # first maximum: the earliest row breaks ties
            if self.scriptlet is not None:
                verdict = self.scriptlet.decide(ctx, candidates, scores)
                if verdict.refusal is not None:
                    refusal = verdict.refusal
                    break
                if verdict.position is not None:
                    best = verdict.position
            row = int(candidates[best])
            picks.append(snapshot.providers[row].provider_id)
            weights.append(float(scores[best]))
            if len(picks) < request.num_instances:
                if demand is None:
                    demand = demand_row(snapshot, request.resources)
                if aside:
                    taken = ctx.extra.get(row)
                    ctx.extra[row] = demand.copy() if taken is None else taken + demand
                else:
                    if ctx.used is snapshot.used:
                        ctx.used = snapshot.used.copy()
                    ctx.used[row] += demand
            ctx.picked.append(row)
        trace = None
        if explain:
            trace = Trace(
                considered=considered,
                eliminations=tuple(run.eliminations[r] for r in sorted(run.eliminations)),
                counts=dict(run.counts),
            )
        return Placement(
            request.request_id,
            tuple(picks),
            tuple(weights),
            request.num_instances,
            trace,
            refusal,
            examined=considered if drawn is None else drawn,
            scored=scored,
            bounded=drawn is not None,
            ranking=ranking,
        )

    def _describe(self, ctx: Context, weighers: Sequence[Weigher]) -> Described:
        """The last ``Described`` when it is of these weighers on this
        snapshot's aggregates (nearly always), else a new one kept."""
        described = self._described
        if described is None or not described.fits(weighers, ctx.snapshot):
            described = self._described = Described.of(weighers, ctx)
        return described

    def _weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        return weigh_all(self.weighers, ctx, rows)


def demand_row(snapshot: Snapshot, resources: Mapping[str, int]) -> IntArray:
    """The request's amounts as a row over the snapshot's classes (classes the
    snapshot lacks are the resource filter's business)."""
    demand = np.zeros(len(snapshot.classes), dtype=np.int64)
    for rc, amount in resources.items():
        column = snapshot.column(rc)
        if column is not None:
            demand[column] = amount
    return demand
