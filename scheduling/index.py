"""An exact feasibility index over a snapshot's providers, for bounded placement.

A full scan filters and weighs every provider, about 19 ns each: 50 ms a
decision at a million. Bounded placement (``Engine`` with
``Bounded(mode="bounded")``) asks this index for the providers that can take
a request, in the order the weighers would rank them, and weighs only the
first ``candidates`` of them. Feasibility stays exact; only the scoring is
bounded.

**Groups.** Providers alike in everything the enabled static filters read
(each filter's ``group_key``: the compute filter reads the state, the zone
filter the zones, the traits filter the traits...) form a group. A static
filter answers for a whole group by asking one of its providers, once per
group and what the filter reads of a request (its ``request_key``: the
compute filter nothing, the zone filter the zone...; by default the whole
:func:`signature`: the request's zone, traits, extra specs, image,
project, user and flavor), remembered until the snapshot's aggregates
change. Requests of which every filter that applies reads the same are of
one kind: they share the answers and the walks (Borg's equivalence
classes). A new attribute joins the grouping through the ``group_key`` of
the filter that reads it.

**Levels.** Within a group, providers are bucketed by a level of their
free capacity as the resource weighers see it (capacity with the
inventories' allocation ratios, not the aggregates' overrides, which only
the resource filter applies): ``s = sum(m_c x free_c /
scale_c)`` over the classes the RAM, CPU and disk weighers weigh (``m_c``
their multipliers, ``scale_c`` the largest capacity of the class, as
Nova's normalisation divides by the largest free amount among the
candidates, ``free_c`` clamped to [0, scale_c]), cut into
``levels`` equal steps; level 0 holds what the weighers like best: the
emptiest when spreading, the fullest when packing. Each bucket keeps, per
class, an upper bound of its providers' free capacity, so a request skips
the buckets that cannot hold it; the rest are read provider by provider
and checked exactly.

**Order.** ``walk`` yields the providers a request can take, level by
level, within a level group by group in the canonical order of their keys,
and within a group in row order, whatever the index's history: the same
snapshot and request draw the same candidates, so decisions replay.

**Kept up to date.** A snapshot made from another by ``with_used``,
``with_arrays`` or ``with_records`` with ``changed`` rows says which rows
may differ (:class:`scheduling.model.Lineage`); ``sync`` re-reads only
those, O(changes). The index also remembers, for the last few snapshots it
reflected, which rows it has re-read since, so it can follow a twin of an
earlier snapshot too (a scheduler's working copies branch off the view's
snapshots and come back); a scheduler marks the view's snapshot a wave
starts from (``mark``), so the view's next snapshot, made from it, is
followed however many twins the wave stepped through. Anything else (a
snapshot built anew, other classes or aggregates, a new largest capacity
of a weighed class) is a rebuild, O(providers).
Each row re-read is noted once in a log, with its free capacity and its
place in the walk's order worked out then: a walk kept for a kind of
request is brought up to date from the slice of the log since it was
taken, in a few array steps however many rows that slice holds and
however many kinds read it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduling.filters.base import Context, HostFilter, frozen, static_key
from scheduling.model import FloatArray, IntArray, Provider, Request, Snapshot

_WHOLE = 64
"""Buckets of up to this many rows are read whole at once."""
_KEEP = 8
"""A walk reads and keeps this many times the rows a request asks for, so
the next requests of its kind take what it kept for a while."""
_STEPS = 4
"""Recent snapshots the index remembers how to return to (a scheduler's
working copies, one per request, each made from the one before)..."""
_MARKS = 8
"""...and the snapshots where it branched off or that twins are anchored
to (the view's snapshots a wave of requests started from), kept apart so
the steps of a long wave do not push them out."""


_FEW_SINCE = 8
"""Up to this many log entries since a walk kept was taken are gone
through one by one to bring it up to date, not as arrays."""


_Reads = tuple[tuple[int, Hashable], ...]
"""A kind of request: per static filter that applies, its id and what it
reads of the request (``Verdicts.key``)."""
_Kind = tuple[_Reads, tuple[tuple[int, int], ...]]
"""A walk kept: (the request's kind; its shape, the (column, amount) of
each class asked)."""


def _canonical(value: Any) -> str:
    """``value`` written out the same way in every process (a frozenset's
    own order follows string hashing, which differs between processes)."""
    if isinstance(value, frozenset | set):
        return "{" + ",".join(sorted(_canonical(v) for v in value)) + "}"
    if isinstance(value, tuple | list):
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    return repr(value)


def signature(request: Request) -> Hashable:
    """What static filters may read of a request."""
    return (
        request.availability_zone,
        request.required_traits,
        request.forbidden_traits,
        frozen(request.extra_specs),
        frozen(request.image_properties),
        request.project_id,
        request.user_id,
        request.flavor_name,
    )


class _Bucket:
    """The rows of one (group, level), ascending. Rows that left stay in
    ``rows`` until the next compaction (``bucket_of`` says where a row is);
    rows that arrived wait in ``added``."""

    __slots__ = ("added", "rows", "stale", "start")

    def __init__(self, rows: IntArray) -> None:
        self.rows = rows
        self.start = 0
        self.added: list[int] = []
        self.stale = 0
        """How many rows left since the last compaction (at most that many
        entries of ``rows`` are stale)."""

    def compact(self, bucket_of: IntArray, b: int) -> None:
        rows = self.rows[self.start :]
        rows = rows[bucket_of[rows] == b]
        if self.added:
            extra = np.asarray(self.added, dtype=np.int64)
            rows = np.union1d(rows, extra[bucket_of[extra] == b])
        self.rows, self.start, self.added, self.stale = rows, 0, [], 0

    def head(self, m: int, bucket_of: IntArray, b: int) -> tuple[IntArray, bool]:
        """The first ``m`` rows (or more) in the bucket, ascending, and
        whether they are all of them."""
        live = len(self.rows) - self.start
        if not self.added and not self.stale:  # every row in ``rows`` is in the bucket
            return self.rows[self.start : self.start + m], live <= m
        if (self.added and live <= 512) or len(self.added) > 64 or self.stale > max(64, live // 2):
            self.compact(bucket_of, b)  # small buckets at once: cheaper than merging each read
            return self.rows[:m], len(self.rows) <= m
        end = self.start + m + self.stale
        main = self.rows[self.start : end]
        valid = bucket_of[main] == b
        if len(main) and not valid[0]:
            # the rows taken first leave first: skip them for good
            first = int(valid.argmax()) if valid.any() else len(main)
            self.start += first
            self.stale = max(0, self.stale - first)
        main = main[valid]
        complete = end >= len(self.rows)
        if not complete and not len(main):  # more left than counted: start afresh
            self.compact(bucket_of, b)
            return self.head(m, bucket_of, b)
        if self.added:
            extra = np.asarray(self.added, dtype=np.int64)
            extra = extra[bucket_of[extra] == b]
            if len(extra):
                merged = np.union1d(main, extra)
                if not complete:
                    # beyond the last row read, rows not read yet may come first
                    merged = merged[merged <= main[-1]]
                return merged, complete
        return main, complete


@dataclass(frozen=True, slots=True)
class _Drawn:
    """What a walk found: ``rows`` that fit, in the walk's order (``keys``),
    every one there is up to ``boundary`` (None: to the end), as of refresh
    number ``epoch`` and group order ``layout``."""

    epoch: int
    layout: int
    rows: IntArray
    keys: IntArray
    boundary: int | None


class Verdicts:
    """Per group of an index: 1 when the static filters let a request's
    providers through, 0 when not, -1 when not asked yet."""

    def __init__(
        self,
        index: FeasibilityIndex,
        snapshot: Snapshot,
        request: Request,
        statics: Sequence[HostFilter],
        known: npt.NDArray[np.int8],
        key: _Reads = (),
        parts: Sequence[npt.NDArray[np.int8]] = (),
    ) -> None:
        """``key``: the kind, per filter of ``statics`` its id and what it
        reads of ``request`` (``HostFilter.request_key``); ``parts``: per
        filter, its own verdicts (shared by the kinds it reads alike)."""
        self.index, self.snapshot, self.request = index, snapshot, request
        self.statics, self.known, self.key = statics, known, key
        self.parts = parts

    def admit(self, gids: IntArray) -> IntArray:
        """Those of ``gids`` whose providers the static filters let through."""
        verdicts = self.known[gids]
        unknown = verdicts < 0
        if unknown.any():
            ctx = Context(self.snapshot, self.request, self.snapshot.used)
            asked = gids[unknown].tolist()
            answers = [self._ask(ctx, gid) for gid in asked]
            self.known[asked] = answers
            verdicts[unknown] = answers
        admitted: IntArray = gids[verdicts > 0]
        return admitted

    def _ask(self, ctx: Context, gid: int) -> int:
        """The static filters' verdict on group ``gid``, each filter asked
        only if no kind of request it reads alike has asked it yet."""
        rep = self.index._member(gid)
        if rep is None:
            return 0
        for f, part in zip(self.statics, self.parts, strict=True):
            verdict = int(part[gid])
            if verdict < 0:
                verdict = part[gid] = int(f.reject(ctx, rep) is None)
            if not verdict:
                return 0
        return 1


class FeasibilityIndex:
    """The index of one snapshot (and, through ``sync``, of its twins)."""

    def __init__(
        self,
        snapshot: Snapshot,
        weights: Mapping[str, float],
        capacity: IntArray | None,
        levels: int = 64,
        statics: Sequence[HostFilter] = (),
    ) -> None:
        """``weights``: resource class -> multiplier of the weighers that
        weigh its free capacity; ``capacity``: the snapshot's capacity by
        class as the resource filter measures it (None when no filter
        checks capacity: nothing is pruned by it then); ``statics``: the
        static filters enabled, whose ``group_key`` groups the providers."""
        self.levels = levels
        self.statics = tuple(statics)
        self._keys: dict[Hashable, int] = {}
        """What static filters may read of a provider -> its group, so the
        filters' keys are worked out once per kind of provider."""
        self.classes = snapshot.classes
        self.size = snapshot.size
        self.aggregates = snapshot.aggregates
        self.prunes = capacity is not None
        self.proxy = [
            (snapshot.classes.index(rc), m)
            for rc, m in sorted(weights.items())
            if m and rc in snapshot.classes
        ]
        self.high = sum(max(m, 0.0) for _, m in self.proxy)
        self.low = sum(min(m, 0.0) for _, m in self.proxy)
        self._groups: dict[Hashable, int] = {}
        self._reps: list[int] = []
        self._names: list[str] = []
        """Per group, its key written out canonically."""
        self._order = np.zeros(0, dtype=np.int64)
        self._order_stale = True
        self._layout = 0
        self._cell_order: tuple[tuple[int, int], IntArray, IntArray] | None = None
        """(layout, groups), every bucket in walk order and their marks."""
        self._drawn: dict[_Kind, _Drawn] = {}
        """(Request kind, shape) -> the rows its last walk found..."""
        self._shapes: dict[_Reads, dict[tuple[tuple[int, int], ...], None]] = {}
        """...and per kind, the shapes kept, in the order they were kept."""
        self._log = np.zeros(1024, dtype=np.int64)
        """The rows of each refresh, oldest first, one after another (so
        the rows since any refresh are one slice, however many refreshes)..."""
        self._log_free = np.zeros((len(snapshot.classes), 1024), dtype=np.int64)
        self._log_keys = np.zeros(1024, dtype=np.int64)
        """...with each row's free capacity and walk order key as it was
        re-read (worked out once, not once per walk kept)..."""
        self._log_latest = np.zeros(1024, dtype=np.bool_)
        """...whether it is the row's latest entry..."""
        self._log_ends: list[int] = []
        """...where each refresh's rows end in ``_log``..."""
        self._log_base = 0
        """...the first of them being refresh number ``_log_base``..."""
        self._log_offset = 0
        """...and ``_log[0]`` entry number ``_log_offset`` of all noted."""
        self._last = np.full(snapshot.size, -1, dtype=np.int64)
        """Per row, the number of its latest entry (-1: none yet)."""
        self._asked: dict[tuple[tuple[int, int], ...], tuple[npt.NDArray[np.intp], IntArray]] = {}
        """A shape's (column, amount) pairs -> its columns and amounts as
        columns of arrays (classes x 1), to check many rows in one step."""
        self._passing: dict[_Reads, tuple[npt.NDArray[np.int8], list[npt.NDArray[np.int8]]]] = {}
        """Request kind -> per group, the static filters' verdict
        (see :class:`Verdicts`), and each filter's own..."""
        self._parts: dict[tuple[int, Hashable], npt.NDArray[np.int8]] = {}
        """...kept per (filter, what it reads of a request)."""
        self.rebuilds = 0
        self.refreshed = 0
        """Rows re-read by ``sync`` since the index was built."""
        self._build(snapshot, capacity)

    # -- building and following the snapshot --------------------------------

    def _build(self, snapshot: Snapshot, capacity: IntArray | None) -> None:
        n, c = snapshot.size, len(snapshot.classes)
        weighed = snapshot.capacity_by_class()  # what the weighers measure free against
        cap = weighed if capacity is None else capacity
        self._providers = snapshot.providers
        self._weighed = weighed
        """The capacity table (``Snapshot.capacity_by_class``) of the
        snapshot the index was last brought to: ``capacities`` holds its
        values."""
        self.group_of = np.fromiter(
            (self._group(p, row) for row, p in enumerate(snapshot.providers)), np.int64, n
        )
        proxied = [j for j, _ in self.proxy]
        self.capacities = weighed[proxied] if proxied else np.zeros((0, n), np.int64)
        """The capacity of each proxied class, per row: what the scales
        are the largest of."""
        self.tally: list[Counter[int]] = []
        """Per proxied class, how many rows have each capacity, so the
        largest is known exactly as rows change."""
        for k in range(len(proxied)):
            values, counts = np.unique(self.capacities[k], return_counts=True)
            self.tally.append(Counter(dict(zip(values.tolist(), counts.tolist(), strict=True))))
        self.scale = self._scales()
        self._scale_list: list[float] = self.scale.tolist()
        self._reference: FloatArray | None = None
        used = snapshot.used.T
        free: IntArray = cap - used
        ranks = self._ranks(free if cap is weighed else weighed - used)
        slots = max(len(self._reps), 1)
        self.bucket_of = self.group_of * self.levels + ranks
        self.count = np.bincount(self.bucket_of, minlength=slots * self.levels)
        self.ub = np.full((slots * self.levels, c), np.iinfo(np.int64).min, dtype=np.int64)
        self.buckets: dict[int, _Bucket] = {}
        order = np.argsort(self.bucket_of, kind="stable")
        placed = self.bucket_of[order]
        if n:
            starts = np.concatenate(([0], np.flatnonzero(np.diff(placed)) + 1))
            ends = np.append(starts[1:], n)
            ids = placed[starts]
            if c:
                self.ub[ids] = np.maximum.reduceat(free[:, order], starts, axis=1).T
            for b, lo, hi in zip(ids.tolist(), starts.tolist(), ends.tolist(), strict=True):
                self.buckets[b] = _Bucket(order[lo:hi])
        self._levels_from_buckets()
        self.token = snapshot.token
        self.steps: dict[int, set[int]] = {}
        """Token -> rows in which the index may differ from that snapshot."""
        self.marks: dict[int, set[int]] = {}
        self._remember(snapshot, False)

    def _levels_from_buckets(self) -> None:
        slots = len(self.count) // self.levels
        self.level_count = self.count.reshape(slots, self.levels).sum(axis=0)
        by_level = self.ub.reshape(slots, self.levels, len(self.classes))
        self.level_ub = by_level.max(axis=0)

    def _scales(self) -> FloatArray:
        tops = [max((v for v, c in tally.items() if c > 0), default=1) for tally in self.tally]
        return np.asarray([float(max(top, 1)) for top in tops], dtype=np.float64)

    def _ranks(self, free: IntArray) -> IntArray:
        """The level of each column of ``free`` (classes x rows)."""
        m = free.shape[1]
        if self.high == self.low:
            return np.zeros(m, dtype=np.int64)
        s = np.zeros(m, dtype=np.float64)
        for k, (j, multiplier) in enumerate(self.proxy):
            scale = self.scale[k]
            # np.clip's own numbers, without its wrapper's dtype checks
            s += multiplier * (np.minimum(np.maximum(free[j], 0), scale) / scale)
        steps = np.floor((self.high - s) * (self.levels / (self.high - self.low)))
        ranks: IntArray = np.minimum(np.maximum(steps, 0), self.levels - 1).astype(np.int64)
        return ranks

    def _group(self, provider: Provider, row: int) -> int:
        everything = static_key(provider)
        gid = self._keys.get(everything)
        if gid is not None:
            return gid
        key = tuple(f.group_key(provider, self.aggregates) for f in self.statics)
        gid = self._groups.get(key)
        if gid is None:
            gid = self._groups[key] = len(self._reps)
            self._reps.append(row)
            self._names.append(_canonical(key))
            self._order_stale = True
            self._layout += 1  # the walks kept read groups in the order before
        self._keys[everything] = gid
        return gid

    def _group_order(self) -> IntArray:
        """Per group, its place in the canonical order of the groups (their
        keys written out, sorted), which orders the buckets of one level."""
        if self._order_stale:
            order = sorted(range(len(self._names)), key=self._names.__getitem__)
            self._order = np.empty(len(order), dtype=np.int64)
            self._order[order] = np.arange(len(order))
            self._order_stale = False
        return self._order

    @property
    def group_count(self) -> int:
        return len(self._reps)

    def sync(self, snapshot: Snapshot, capacity: IntArray | None) -> bool:
        """Bring the index to ``snapshot``; False when that takes a rebuild
        (the caller builds a new index)."""
        if snapshot.token == self.token:
            return True
        if (
            snapshot.size != self.size
            or snapshot.classes != self.classes
            or snapshot.aggregates is not self.aggregates
            or (capacity is not None) != self.prunes
        ):
            return False
        rows = self._rows_to(snapshot)
        if rows is None or len(rows) > max(1024, self.size // 4):
            return False
        if len(rows) == 1 and self._refresh_one(snapshot, next(iter(rows)), capacity):
            self.refreshed += 1  # a pick's row: no array of it made
        elif not self._refresh(
            snapshot, np.fromiter(rows, dtype=np.int64, count=len(rows)), capacity
        ):
            return False
        for history in (self.steps, self.marks):
            for seen in history.values():
                seen.update(rows)
        stepped = snapshot.lineage is not None and snapshot.lineage.parent == self.token
        self.token = snapshot.token
        self._weighed = snapshot.capacity_by_class()
        self._remember(snapshot, stepped)
        return True

    def mark(self, snapshot: Snapshot) -> None:
        """Remember ``snapshot``, where the index is now, among the marks
        (a view's snapshot a wave of twins starts from): the snapshots made
        from it later, or from its twins, are followed from it however many
        twins are stepped through in between."""
        if snapshot.token == self.token and snapshot.token not in self.marks:
            self.marks[snapshot.token] = set()
            while len(self.marks) > _MARKS:
                del self.marks[next(iter(self.marks))]

    def _rows_to(self, snapshot: Snapshot) -> set[int] | None:
        """Rows in which ``snapshot`` may differ from what the index holds:
        through the first of itself, its parent and its anchor that the
        index remembers."""
        options: list[tuple[int, Any]] = [(snapshot.token, ())]
        lineage = snapshot.lineage
        if lineage is not None:
            options += [(lineage.parent, lineage.rows.tolist()), (lineage.anchor, lineage.since)]
        for token, rows in options:
            seen = self.steps.get(token)
            if seen is None:
                seen = self.marks.get(token)
            if seen is not None:
                return seen.union(rows)
        return None

    def _remember(self, snapshot: Snapshot, stepped: bool) -> None:
        """Note how the index, now at ``snapshot``, differs from the
        snapshots ``snapshot`` was made from; forget the oldest."""
        self.steps[snapshot.token] = set()
        if snapshot.token in self.marks:
            self.marks[snapshot.token] = set()
        lineage = snapshot.lineage
        if lineage is not None:
            if lineage.parent not in self.steps and lineage.parent not in self.marks:
                # a branch point when the index was elsewhere, else a step
                (self.steps if stepped else self.marks)[lineage.parent] = set(lineage.rows.tolist())
            if lineage.anchor not in self.marks and lineage.anchor not in self.steps:
                self.marks[lineage.anchor] = set(lineage.since)
        limit = max(1024, self.size // 4)
        for history, most in ((self.steps, _STEPS), (self.marks, _MARKS)):
            for token in [t for t, seen in history.items() if len(seen) > limit]:
                del history[token]
            while len(history) > most:
                del history[next(iter(history))]

    def _refresh(self, snapshot: Snapshot, rows: IntArray, capacity: IntArray | None) -> bool:
        """Re-read ``rows`` of ``snapshot``; False if the scales moved (a rebuild)."""
        self.refreshed += len(rows)
        if not len(rows):
            return True
        if len(rows) == 1 and self._refresh_one(snapshot, int(rows[0]), capacity):
            return True
        weighed = snapshot.capacity_by_class()[:, rows]
        cap = weighed if capacity is None else capacity[:, rows]
        groups = self.group_of[rows]
        if snapshot.providers is not self._providers:
            providers = snapshot.providers
            groups = np.fromiter(
                (self._group(providers[r], r) for r in rows.tolist()), np.int64, len(rows)
            )
            self._providers = providers
            self._grow()
        if self.proxy:
            fresh = weighed[[j for j, _ in self.proxy]]
            old = self.capacities[:, rows]
            if not np.array_equal(fresh, old):
                for k, tally in enumerate(self.tally):
                    tally.subtract(old[k].tolist())
                    tally.update(fresh[k].tolist())
                self.capacities[:, rows] = fresh
                if not np.array_equal(self._scales(), self.scale):
                    return False
        used = snapshot.used[rows].T
        free: IntArray = cap - used
        new = groups * self.levels + self._ranks(weighed - used)
        old_b = self.bucket_of[rows]
        moved = np.flatnonzero(new != old_b)
        self.group_of[rows] = groups
        if len(moved):
            self._move(rows[moved].tolist(), old_b[moved].tolist(), new[moved].tolist())
        ranks = new % self.levels
        if len(rows) <= 8:  # a pick or two: row by row costs less than ufunc.at
            for k, (b, rank) in enumerate(zip(new.tolist(), ranks.tolist(), strict=True)):
                np.maximum(self.ub[b], free[:, k], out=self.ub[b])
                np.maximum(self.level_ub[rank], free[:, k], out=self.level_ub[rank])
        else:
            np.maximum.at(self.ub, new, free.T)
            np.maximum.at(self.level_ub, ranks, free.T)
        self._note(rows, free)
        return True

    def _refresh_one(self, snapshot: Snapshot, row: int, capacity: IntArray | None) -> bool:
        """``_refresh`` of one row whose record and capacity did not change
        (a pick's, a release's), in Python numbers: a row's few values cost
        less so than through NumPy's calls. False, having changed nothing,
        for any other row."""
        if snapshot.providers is not self._providers:
            return False
        table = snapshot.capacity_by_class()
        weighed = table[:, row].tolist()
        # the capacities held are the table's at every row when the index
        # was last brought to a snapshot whose table this is (a pick's twin)
        if table is not self._weighed and self.capacities[:, row].tolist() != [
            weighed[j] for j, _ in self.proxy
        ]:
            return False
        cap = weighed if capacity is None else capacity[:, row].tolist()
        used = snapshot.used[row].tolist()
        free = [c - u for c, u in zip(cap, used, strict=True)]
        rank = self._rank_of([w - u for w, u in zip(weighed, used, strict=True)])
        old = int(self.bucket_of[row])
        new = old - old % self.levels + rank
        if new != old:
            self._move([row], [old], [new])
        for bounds, k in ((self.ub, new), (self.level_ub, rank)):
            bound = bounds[k].tolist()
            if any(f > b for f, b in zip(free, bound, strict=True)):
                bounds[k] = [max(f, b) for f, b in zip(free, bound, strict=True)]
        self._note_one(row, free, new)
        return True

    def _rank_of(self, free: list[int]) -> int:
        """``_ranks`` of one row (its free amount of each class), in the
        same floating-point steps, so the same level."""
        if self.high == self.low:
            return 0
        s = 0.0
        for (j, multiplier), scale in zip(self.proxy, self._scale_list, strict=True):
            s += multiplier * (min(max(free[j], 0), scale) / scale)
        step = math.floor((self.high - s) * (self.levels / (self.high - self.low)))
        return min(max(step, 0), self.levels - 1)

    def _move(self, rows: Sequence[int], old: Sequence[int], new: Sequence[int]) -> None:
        self.bucket_of[rows] = new
        count, level_count, levels = self.count, self.level_count, self.levels
        for row, b_old, b_new in zip(rows, old, new, strict=True):
            count[b_old] -= 1
            count[b_new] += 1
            level_count[b_old % levels] -= 1
            level_count[b_new % levels] += 1
            self.buckets[b_old].stale += 1
            bucket = self.buckets.get(b_new)
            if bucket is None:
                self.buckets[b_new] = _Bucket(np.asarray([row], dtype=np.int64))
            else:
                bucket.added.append(row)
            gid = b_new // self.levels
            if self.group_of[self._reps[gid]] != gid:
                self._reps[gid] = row

    def _grow(self) -> None:
        """Room in the per-bucket arrays for groups created since."""
        wanted = len(self._reps) * self.levels
        have = len(self.count)
        if wanted <= have:
            return
        more = max(wanted, 2 * have) - have
        self.count = np.concatenate((self.count, np.zeros(more, dtype=np.int64)))
        low = np.full((more, len(self.classes)), np.iinfo(np.int64).min, dtype=np.int64)
        self.ub = np.concatenate((self.ub, low))

    # -- answering a request ---------------------------------------------------

    def passing(
        self, snapshot: Snapshot, request: Request, statics: Sequence[HostFilter]
    ) -> Verdicts:
        """Whether every static filter in ``statics`` (those that apply to
        ``request``) lets each group's providers through, decided for a group
        when a walk first reaches it and remembered for requests of the same
        kind: those of which each filter reads the same (its
        ``request_key``; the whole :func:`signature` if it does not say).
        Requests of one kind also share their walks."""
        groups = self.group_count
        whole: Hashable = None
        reads: list[tuple[int, Hashable]] = []
        for f in statics:
            read = f.request_key(request)
            if read is None:
                if whole is None:
                    whole = signature(request)
                read = whole
            reads.append((id(f), read))
        key = tuple(reads)
        found = self._passing.get(key)
        if found is None or len(found[0]) < groups:
            parts = [self._part(read, groups) for read in reads]
            known = np.full(max(groups, 1), 1, dtype=np.int8)
            if parts:
                # a kind first seen: what its filters already said of each group
                stacked = np.stack([p[: len(known)] for p in parts])
                known[(stacked < 0).any(axis=0)] = -1
                known[(stacked == 0).any(axis=0)] = 0
            if len(self._passing) > 4096:
                self._passing.clear()
                self._parts.clear()
            found = self._passing[key] = (known, parts)
        return Verdicts(self, snapshot, request, statics, found[0], key, found[1])

    def _part(self, read: tuple[int, Hashable], groups: int) -> npt.NDArray[np.int8]:
        """A filter's verdicts per group for what it reads of a request
        (``read``: the filter's id and its ``request_key``)."""
        part = self._parts.get(read)
        if part is None or len(part) < groups:
            grown = np.full(max(groups, 1), -1, dtype=np.int8)
            if part is not None:
                grown[: len(part)] = part
            part = self._parts[read] = grown
        return part

    def _member(self, gid: int) -> int | None:
        """A row in group ``gid`` now, or None when it has none."""
        rep = self._reps[gid]
        if self.group_of[rep] == gid:
            return rep
        counts = self.count[gid * self.levels : (gid + 1) * self.levels]
        for rank in np.flatnonzero(counts).tolist():
            b = gid * self.levels + rank
            rows, _ = self.buckets[b].head(1, self.bucket_of, b)
            if len(rows):
                self._reps[gid] = int(rows[0])
                return self._reps[gid]
        return None

    def walk(
        self,
        snapshot: Snapshot,
        demand: Sequence[tuple[int, int]],
        passing: Verdicts,
        capacity: IntArray | None,
        batch: int = 1,
    ) -> Iterator[IntArray]:
        """The rows of groups ``passing`` whose free capacity holds
        ``demand`` ((column, amount) of each class asked), best level first,
        within a level group by group, ascending within a group, in chunks
        of ``batch`` rows or more (the last may be smaller). ``snapshot`` is
        the one the index was last synced to.

        Requests of the same kind and shape share the walk: the rows the
        last one found, as far as it read, are kept with the rows re-read
        since then, which are all that can have changed among them; the
        next takes those, updated, and walks on only if it needs more. A
        request of a shape not kept (or whose rows ran short) starts from
        those of a smaller shape of the same kind, if kept: every row that
        holds the larger shape holds the smaller, so the smaller's rows that
        hold the larger are all of them up to the same end."""
        key = (passing.key, tuple(demand))
        drawn = self._take(key)
        if drawn is not None and drawn.layout == self._layout and drawn.epoch >= self._log_base:
            drawn = self._update(drawn, snapshot, demand, passing, capacity)
        else:
            drawn = None
        if drawn is None or (len(drawn.rows) < batch and drawn.boundary is not None):
            short = None if drawn is None else drawn.boundary
            drawn = self._seed(key, snapshot, demand, passing, capacity, batch, short) or drawn
        # kept for the next: enough that walks are rare, cheap to update
        keep = min(max(_KEEP * batch, 64), 4096)
        if drawn is not None:
            self._keep(key, drawn)
            if len(drawn.rows) > batch:
                # as many as asked first: the rest only if the filters after reject some
                yield drawn.rows[:batch]
                yield drawn.rows[batch:]
            elif len(drawn.rows):
                yield drawn.rows
            if drawn.boundary is None:
                return  # the whole walk: nothing further
            # more wanted: walk on past what was kept, refilling it
            wanted = max(keep - len(drawn.rows), batch)
        else:
            wanted = keep
        yield from self._walk_on(key, drawn, snapshot, demand, passing, capacity, wanted)

    def _walk_on(
        self,
        key: _Kind,
        drawn: _Drawn | None,
        snapshot: Snapshot,
        demand: Sequence[tuple[int, int]],
        passing: Verdicts,
        capacity: IntArray | None,
        wanted: int,
    ) -> Iterator[IntArray]:
        """``walk`` past what ``drawn`` holds (from the start without it),
        the first ``wanted`` rows read before the first chunk goes out, so
        that what is kept lasts; what was read is kept with ``drawn``'s."""
        after = None if drawn is None else drawn.boundary
        found: list[IntArray] = []
        held: list[IntArray] = []
        have, exhausted = 0, False
        try:
            for rows in self._walk(snapshot, demand, passing, capacity, wanted, after):
                found.append(rows)
                held.append(rows)
                have += len(rows)
                if have >= wanted:
                    yield np.concatenate(held) if len(held) > 1 else rows
                    held, wanted = [], 1
            if held:
                yield np.concatenate(held) if len(held) > 1 else held[0]
            exhausted = True
        finally:
            if found:
                rows = np.concatenate(found) if len(found) > 1 else found[0]
                keys = self._order_keys(rows)
                if drawn is not None:
                    rows = np.concatenate((drawn.rows, rows))
                    keys = np.concatenate((drawn.keys, keys))
                self._keep(key, self._drawn_of(rows, keys, exhausted))

    def _seed(
        self,
        key: _Kind,
        snapshot: Snapshot,
        demand: Sequence[tuple[int, int]],
        passing: Verdicts,
        capacity: IntArray | None,
        batch: int,
        short: int | None = None,
    ) -> _Drawn | None:
        """The rows kept for a smaller shape of the same kind (``key``'s),
        or of a kind whose filters are some of this kind's, reading the same
        of it (the compute filter's alone, for a request that also names a
        zone), that hold ``demand`` and pass this kind's filters: every row
        that does, up to that walk's end; None when no such walk is kept
        with ``batch`` rows for this shape (or to its end). ``short``: where
        this kind's own walk ends, having found fewer than ``batch``."""
        if not self.prunes:
            return None  # the walk does not read the demand: nothing to narrow
        cap = snapshot.capacity_by_class() if capacity is None else capacity
        epoch = self._epoch()
        for other, verdicts in self._seeds(key, passing):
            kept = self._drawn.get(other)
            if (
                short is not None
                and kept is not None
                and kept.boundary is not None
                and kept.boundary <= short
                and kept.layout == self._layout
                and kept.epoch >= self._log_base
            ):
                # its rows that this shape takes are some of those this kind's
                # own walk found up to ``short``, too few: not worth updating
                continue
            drawn = self._take(other)
            if drawn is None or drawn.layout != self._layout or drawn.epoch < self._log_base:
                continue  # stale: forgotten, as ``walk`` forgets it
            drawn = self._update(drawn, snapshot, other[1], verdicts or passing, capacity)
            self._keep(other, drawn)
            rows = drawn.rows
            columns, amounts = self._arrays(demand)
            free = cap[columns, rows] - snapshot.used[rows, columns]  # classes x rows
            fits = np.logical_and.reduce(free >= amounts)
            if verdicts is not None and len(rows):  # a wider kind's: this kind's filters too
                gids = self.bucket_of[rows] // self.levels
                known = passing.known[gids]
                if (known < 0).any():
                    passing.admit(np.unique(gids))
                    known = passing.known[gids]
                fits &= known > 0
            if np.count_nonzero(fits) >= batch or drawn.boundary is None:
                return _Drawn(epoch, drawn.layout, rows[fits], drawn.keys[fits], drawn.boundary)
        return None

    def _seeds(self, key: _Kind, passing: Verdicts) -> Iterator[tuple[_Kind, Verdicts | None]]:
        """The walks kept that ``_seed`` may start ``key``'s from, in the
        order it tries them: this kind's smaller shapes, the latest kept
        first (the least to update), then those of the wider kinds, the
        narrowest first, each with its verdicts (worked out only for a
        kind that has a smaller shape kept)."""
        kind, shape = key
        wanted = dict(shape)

        def smaller(other: tuple[tuple[int, int], ...]) -> bool:
            return all(wanted.get(j, 0) >= a for j, a in other)

        # each kind's shapes listed before any is tried: trying one keeps it again
        own = reversed(self._shapes.get(kind, {}))
        yield from [((kind, o), None) for o in own if o != shape and smaller(o)]
        reads = set(passing.key)
        wider = [k for k in self._shapes if k != kind and reads.issuperset(k)]
        for parent in sorted(wider, key=len, reverse=True):
            shapes = [o for o in reversed(self._shapes.get(parent, {})) if smaller(o)]
            verdicts = self._verdicts_of(parent, passing) if shapes else None
            if verdicts is not None:
                yield from [((parent, o), verdicts) for o in shapes]

    def _verdicts_of(self, kind: _Reads, passing: Verdicts) -> Verdicts | None:
        """The verdicts of ``kind``, whose filters are some of ``passing``'s
        reading the same of its request (so that request stands for it);
        None if they were forgotten or groups were added since."""
        found = self._passing.get(kind)
        if found is None or len(found[0]) < self.group_count:
            return None
        by_read = dict(zip(passing.key, passing.statics, strict=True))
        statics = [by_read[read] for read in kind]
        return Verdicts(self, passing.snapshot, passing.request, statics, found[0], kind, found[1])

    def _drawn_of(self, rows: IntArray, keys: IntArray, exhausted: bool) -> _Drawn:
        """``rows`` (a walk's, from its start, with their ``keys``) as kept:
        at most the first 4,096, every row there is up to the last of those."""
        if len(rows) > 4096:
            rows, keys, exhausted = rows[:4096], keys[:4096], False
        boundary = None if exhausted else int(keys[-1])
        return _Drawn(self._epoch(), self._layout, rows, keys, boundary)

    def _keep(self, key: _Kind, drawn: _Drawn) -> None:
        if key not in self._drawn and len(self._drawn) >= 256:
            self._take(next(iter(self._drawn)))
        self._drawn[key] = drawn
        self._shapes.setdefault(key[0], {})[key[1]] = None

    def _take(self, key: _Kind) -> _Drawn | None:
        """The walk kept for ``key``, forgotten (None if none is kept)."""
        drawn = self._drawn.pop(key, None)
        if drawn is not None:
            shapes = self._shapes[key[0]]
            del shapes[key[1]]
            if not shapes:
                del self._shapes[key[0]]
        return drawn

    def _order_keys(self, rows: IntArray) -> IntArray:
        """Each row's place in the walk's order: (level, group, row)."""
        b = self.bucket_of[rows]
        keys: IntArray = ((b % self.levels) << 48) | (self._group_order()[b // self.levels] << 24)
        return keys | rows

    def _update(
        self,
        drawn: _Drawn,
        snapshot: Snapshot,
        demand: Sequence[tuple[int, int]],
        passing: Verdicts,
        capacity: IntArray | None,
    ) -> _Drawn:
        """``drawn`` as of now: the rows re-read since it was taken leave it,
        and come back where they belong if they still fit before its end
        (as the log noted them: their latest entries are how they are now)."""
        start, end = self._since(drawn.epoch)
        if start == end:
            return drawn
        epoch, boundary = self._epoch(), drawn.boundary
        # a kept row stays unless it was re-read since: its latest entry is
        # before the slice (one step over the rows kept, however long the slice)
        stay = self._last[drawn.rows] < start + self._log_offset
        if end - start <= _FEW_SINCE:
            rows, keys = self._back_few(start, end, demand, boundary, passing)
        else:
            rows, keys = self._back(start, end, demand, boundary, passing)
        kept_rows, kept_keys = drawn.rows, drawn.keys
        if np.count_nonzero(stay) != len(stay):
            kept_rows, kept_keys = kept_rows[stay], kept_keys[stay]
        if not len(rows):  # none come back: what stays is in order already
            return _Drawn(epoch, drawn.layout, kept_rows, kept_keys, boundary)
        if len(rows) == 1:  # one row comes back (the usual pick): put it in its place
            at = int(kept_keys.searchsorted(keys[0]))
            rows = np.concatenate((kept_rows[:at], rows, kept_rows[at:]))
            keys = np.concatenate((kept_keys[:at], keys, kept_keys[at:]))
            return _Drawn(epoch, drawn.layout, rows, keys, boundary)
        rows = np.concatenate((kept_rows, rows))
        keys = np.concatenate((kept_keys, keys))
        order = keys.argsort(kind="stable")
        return _Drawn(epoch, drawn.layout, rows[order], keys[order], boundary)

    def _back(
        self,
        start: int,
        end: int,
        demand: Sequence[tuple[int, int]],
        boundary: int | None,
        passing: Verdicts,
    ) -> tuple[IntArray, IntArray]:
        """The rows of log entries ``start:end`` that come back into a walk
        kept (and their keys, in log order): those whose latest entry holds
        the demand, up to the walk's ``boundary``, in a group the filters
        let through."""
        back = self._log_latest[start:end]  # one entry for each row re-read since
        if demand:
            columns, amounts = self._arrays(demand)
            back = back & np.logical_and.reduce(self._log_free[columns[:, 0], start:end] >= amounts)
        keys = self._log_keys[start:end]
        if boundary is not None:
            back = back & (keys <= boundary)
        found = np.flatnonzero(back)
        rows = self._log[start:end][found]
        keys = keys[found]
        if len(rows):
            gids = self.bucket_of[rows] // self.levels
            verdicts = passing.known[gids]
            if (verdicts < 0).any():  # groups not asked yet
                passing.admit(np.unique(gids) if len(gids) > 1 else gids)
                verdicts = passing.known[gids]
            admitted = verdicts > 0
            rows, keys = rows[admitted], keys[admitted]
        return rows, keys

    def _back_few(
        self,
        start: int,
        end: int,
        demand: Sequence[tuple[int, int]],
        boundary: int | None,
        passing: Verdicts,
    ) -> tuple[IntArray, IntArray]:
        """``_back`` of a few entries (the picks since a walk of this kind
        and shape was last taken, the usual case), in Python numbers: a
        handful of entries cost less so than through a dozen array calls."""
        latest = self._log_latest[start:end].tolist()
        logged = self._log[start:end].tolist()
        keyed = self._log_keys[start:end].tolist()
        free = self._log_free[:, start:end].tolist()
        rows: list[int] = []
        keys: list[int] = []
        for n, row in enumerate(logged):
            if not latest[n] or (boundary is not None and keyed[n] > boundary):
                continue
            if any(free[j][n] < amount for j, amount in demand):
                continue
            gid = int(self.bucket_of[row]) // self.levels
            verdict = int(passing.known[gid])
            if verdict < 0:  # its group not asked yet
                passing.admit(np.asarray([gid], dtype=np.int64))
                verdict = int(passing.known[gid])
            if verdict > 0:
                rows.append(row)
                keys.append(keyed[n])
        return np.asarray(rows, dtype=np.int64), np.asarray(keys, dtype=np.int64)

    def _arrays(self, demand: Sequence[tuple[int, int]]) -> tuple[npt.NDArray[np.intp], IntArray]:
        """``demand``'s columns and amounts, each as a column (classes x 1)."""
        asked = self._asked.get(tuple(demand))
        if asked is None:
            if len(self._asked) > 1024:
                self._asked.clear()
            columns = np.asarray([[j] for j, _ in demand], dtype=np.intp).reshape(-1, 1)
            amounts = np.asarray([[a] for _, a in demand], dtype=np.int64).reshape(-1, 1)
            asked = self._asked[tuple(demand)] = (columns, amounts)
        return asked

    def _note(self, rows: IntArray, free: IntArray) -> None:
        """Note rows re-read (distinct), with their free capacity (classes x
        rows), for the walks kept."""
        start = self._log_ends[-1] if self._log_ends else 0
        end = self._room(len(rows))
        self._log[start:end] = rows
        self._log_free[:, start:end] = free
        self._log_keys[start:end] = self._order_keys(rows)
        before = self._last[rows] - self._log_offset
        self._log_latest[before[before >= 0]] = False
        self._log_latest[start:end] = True
        self._last[rows] = np.arange(start, end) + self._log_offset
        self._noted(end)

    def _note_one(self, row: int, free: list[int], b: int) -> None:
        """``_note`` of one row (now in bucket ``b``), in Python numbers."""
        start = self._log_ends[-1] if self._log_ends else 0
        self._room(1)
        before = int(self._last[row]) - self._log_offset
        if before >= 0:
            self._log_latest[before] = False
        self._log[start] = row
        self._log_free[:, start] = free
        group = int(self._group_order()[b // self.levels])
        self._log_keys[start] = ((b % self.levels) << 48) | (group << 24) | row
        self._log_latest[start] = True
        self._last[row] = start + self._log_offset
        self._noted(start + 1)

    def _room(self, more: int) -> int:
        """Where ``more`` entries noted next end, the log grown to hold them."""
        start = self._log_ends[-1] if self._log_ends else 0
        end = start + more
        if end > len(self._log):
            size = max(2 * len(self._log), end)
            log, free = np.zeros(size, np.int64), np.zeros((len(self.classes), size), np.int64)
            keys, latest = np.zeros(size, np.int64), np.zeros(size, np.bool_)
            log[:start], free[:, :start] = self._log[:start], self._log_free[:, :start]
            keys[:start], latest[:start] = self._log_keys[:start], self._log_latest[:start]
            self._log, self._log_free, self._log_keys, self._log_latest = log, free, keys, latest
        return end

    def _noted(self, end: int) -> None:
        """A refresh noted up to ``end``; forget the oldest half once the
        log is long (the walks kept from before then start again)."""
        ends = self._log_ends
        ends.append(end)
        if len(ends) > 4096 or end > 65_536:
            half = len(ends) // 2
            cut = ends[half - 1]
            for kept in (self._log, self._log_keys, self._log_latest):
                kept[: end - cut] = kept[cut:end]
            self._log_free[:, : end - cut] = self._log_free[:, cut:end]
            self._log_ends = [e - cut for e in ends[half:]]
            self._log_base += half
            self._log_offset += cut

    def _since(self, epoch: int) -> tuple[int, int]:
        """Where the entries noted since refresh number ``epoch`` start
        and end in the log."""
        ends, i = self._log_ends, epoch - self._log_base
        return (ends[i - 1] if i else 0), (ends[-1] if ends else 0)

    def _epoch(self) -> int:
        return self._log_base + len(self._log_ends)

    def _walk(
        self,
        snapshot: Snapshot,
        demand: Sequence[tuple[int, int]],
        passing: Verdicts,
        capacity: IntArray | None,
        batch: int,
        after: int | None = None,
    ) -> Iterator[IntArray]:
        """The rows ``walk`` reads, in its order: past the key ``after`` when
        given (the levels and groups before it are not read at all). The
        buckets that may hold ``demand`` are found for every level at once,
        then read in rounds of about ``batch`` rows, each round's small
        buckets checked together whatever their levels."""
        if not self.prunes:
            demand = ()
        cells, marks = self._cells(demand, passing, after)
        cap = snapshot.capacity_by_class() if capacity is None else capacity
        levels, known = self.levels, passing.known
        if after is not None and len(cells) and marks[0] == after >> 24:
            # ``after``'s own bucket: only its rows past ``after``
            b = int(cells[0])
            cells, marks = cells[1:], marks[1:]
            if known[b // levels] > 0:
                rows, complete = self.buckets[b].head(_WHOLE, self.bucket_of, b)
                for fitting in self._bucket(snapshot, cap, b, demand, rows, complete):
                    fitting = fitting[fitting > after & 0xFFFFFF]
                    if len(fitting):
                        yield fitting
        total = np.cumsum(self.count[cells])
        start, read = 0, 0
        while start < len(cells):
            # the next round: enough buckets to hold what is still wanted
            before = int(total[start - 1]) if start else 0
            want = max(batch - read, _WHOLE)
            end = max(int(np.searchsorted(total, before + want)) + 1, start + 1)
            gids = cells[start:end] // levels
            if (known[gids] < 0).any():
                # the groups of the buckets a few rounds on decided together;
                # the buckets of those refused are dropped from the walk
                ahead = int(np.searchsorted(total, before + 4 * want)) + 1
                passing.admit(np.unique(cells[start:ahead] // levels))
                cells = cells[start:]
                cells = cells[known[cells // levels] != 0]
                total = np.cumsum(self.count[cells])
                start = 0
                continue
            chunk = cells[start:end]
            start = end
            for rows in self._round(snapshot, cap, chunk.tolist(), demand):
                read += len(rows)
                yield rows

    def _cells(
        self, demand: Sequence[tuple[int, int]], passing: Verdicts, after: int | None
    ) -> tuple[IntArray, IntArray]:
        """The buckets a walk may find ``demand`` in (not empty, bounds
        high enough, in a group not refused), in walk order (level, then
        group order), from ``after``'s on; with each one's (level, group
        order) as the top bits of a row's key."""
        levels = self.levels
        groups = min(self.group_count, len(passing.known))
        slots = groups * levels
        ok = self.count[:slots] > 0
        by_group = ok.reshape(groups, levels)  # a view: ``ok`` itself changes
        by_group &= (passing.known[:groups] != 0)[:, None]
        for j, amount in demand:
            ok &= self.ub[:slots, j] >= amount
        every, all_marks = self._walk_cells(groups)
        chosen = ok.take(every)
        cells: IntArray = every[chosen]
        marks = all_marks[chosen]
        if after is not None:
            first = int(np.searchsorted(marks, after >> 24))
            cells, marks = cells[first:], marks[first:]
        return cells, marks

    def _walk_cells(self, groups: int) -> tuple[IntArray, IntArray]:
        """Every bucket of the first ``groups`` groups in walk order (level,
        then group order) with its mark (see ``_cells``): the same until a
        group is added, so a walk selects from it rather than sorting."""
        known = self._cell_order
        if known is not None and known[0] == (self._layout, groups):
            return known[1], known[2]
        levels = self.levels
        ranks = np.tile(np.arange(levels, dtype=np.int64), groups)
        gids = np.repeat(np.arange(groups, dtype=np.int64), levels)
        marks = (ranks << 24) | self._group_order()[gids]
        order = np.argsort(marks, kind="stable")
        every: IntArray = (gids * levels + ranks)[order]
        self._cell_order = ((self._layout, groups), every, marks[order])
        return every, marks[order]

    def _round(
        self,
        snapshot: Snapshot,
        cap: IntArray,
        buckets: list[int],
        demand: Sequence[tuple[int, int]],
    ) -> Iterator[IntArray]:
        """The rows of ``buckets`` (in walk order) that hold ``demand``:
        small buckets read whole and checked together; a large one read a
        growing prefix at a time, after those before it."""
        whole: list[tuple[int, IntArray]] = []
        for b in buckets:
            rows, complete = self.buckets[b].head(_WHOLE, self.bucket_of, b)
            if complete:
                whole.append((b, rows))
                continue
            if whole:
                yield from self._fitting(snapshot, cap, whole, demand)
                whole = []
            yield from self._bucket(snapshot, cap, b, demand, rows, False)
        if whole:
            yield from self._fitting(snapshot, cap, whole, demand)

    def _fitting(
        self,
        snapshot: Snapshot,
        cap: IntArray,
        whole: list[tuple[int, IntArray]],
        demand: Sequence[tuple[int, int]],
    ) -> Iterator[IntArray]:
        """The rows of buckets read whole (in walk order) that hold
        ``demand``; a bucket none of whose rows does had a loose bound,
        brought down to what its rows hold."""
        rows = np.concatenate([r for _, r in whole]) if len(whole) > 1 else whole[0][1]
        free: IntArray = cap[:, rows] - snapshot.used[rows].T
        fits = np.ones(len(rows), dtype=np.bool_)
        for j, amount in demand:
            fits &= free[j] >= amount
        if demand and len(rows):
            sizes = np.fromiter((len(r) for _, r in whole), np.int64, len(whole))
            full = np.flatnonzero(sizes)
            starts = np.cumsum(sizes)[full] - sizes[full]
            loose = np.flatnonzero(np.add.reduceat(fits, starts) == 0)
            if len(loose):
                bounds = np.maximum.reduceat(free, starts, axis=1)[:, loose].T
                tight = [whole[k][0] for k in full[loose].tolist()]
                self.ub[tight] = bounds
                for rank in {b % self.levels for b in tight}:
                    self._level_bound(rank)
        fitting = rows[fits]
        if len(fitting):
            yield fitting

    def _bucket(
        self,
        snapshot: Snapshot,
        cap: IntArray,
        b: int,
        demand: Sequence[tuple[int, int]],
        first: IntArray,
        complete: bool,
    ) -> Iterator[IntArray]:
        """The rows of a bucket ``b`` that hold ``demand``, ascending, read a
        growing prefix at a time (``first`` the first prefix, ``complete``
        when it is the whole bucket)."""
        rows, m, emitted = first, _WHOLE, 0
        while True:
            fresh = rows[emitted:]
            if len(fresh):
                free: IntArray = cap[:, fresh] - snapshot.used[fresh].T
                fits = np.ones(len(fresh), dtype=np.bool_)
                for j, amount in demand:
                    fits &= free[j] >= amount
                fitting = fresh[fits]
                if len(fitting):
                    yield fitting
            if complete:
                return
            emitted, m = len(rows), m * 4
            rows, complete = self.buckets[b].head(m, self.bucket_of, b)

    def _level_bound(self, rank: int) -> None:
        """Level ``rank``'s bounds, again from its buckets'."""
        c, groups = len(self.classes), self.group_count
        by_level = self.ub[: groups * self.levels].reshape(groups, self.levels, c)
        self.level_ub[rank] = by_level[:, rank].max(axis=0)

    def reference(self) -> FloatArray:
        """Per class, the largest capacity of any provider, for the classes
        the resource weighers weigh (0 for the others): what bounded mode
        normalises free capacity by, as the full scan's weighers normalise
        by the largest free among every provider the request can take, of
        which a large cluster has some nearly empty of the largest size.
        The candidates alone, the fullest or emptiest of them, would weigh
        the classes otherwise. A function of the snapshot, as decisions
        must be."""
        if self._reference is None:  # the scales hold until a rebuild
            out = np.zeros(len(self.classes), dtype=np.float64)
            for k, (j, _) in enumerate(self.proxy):
                out[j] = self.scale[k]
            out.flags.writeable = False
            self._reference = out
        return self._reference

    def where(self, row: int) -> tuple[Hashable, int]:
        """The static key and the level under which ``row`` is kept (for
        diagnostics, and for checking an index against a fresh one)."""
        keys = {gid: key for key, gid in self._groups.items()}
        b = int(self.bucket_of[row])
        return keys[b // self.levels], b % self.levels

    def check(self, snapshot: Snapshot, capacity: IntArray | None) -> None:
        """Raise AssertionError unless the index holds ``snapshot`` (it was
        last synced to it): every row in the bucket of its group and level,
        the counts right, and every bound at or above what it bounds."""
        weighed = snapshot.capacity_by_class()
        cap = weighed if capacity is None else capacity
        free: IntArray = cap - snapshot.used.T
        groups = np.fromiter(
            (
                self._groups[tuple(f.group_key(p, self.aggregates) for f in self.statics)]
                for p in snapshot.providers
            ),
            np.int64,
            snapshot.size,
        )
        assert (self.group_of == groups).all(), "a row in the wrong group"
        ranks = self._ranks(weighed - snapshot.used.T)
        assert (self.bucket_of == groups * self.levels + ranks).all(), "wrong level"
        assert (np.bincount(self.bucket_of, minlength=len(self.count)) == self.count).all()
        if self.prunes and len(self.classes):
            assert (self.ub[self.bucket_of] >= free.T).all(), "a bucket's bound below a row"
            assert (self.level_ub[self.bucket_of % self.levels] >= free.T).all()
        for b, bucket in self.buckets.items():
            rows, complete = bucket.head(snapshot.size, self.bucket_of, b)
            assert complete and rows.tolist() == np.flatnonzero(self.bucket_of == b).tolist()

    def memory_bytes(self) -> int:
        """What the index holds, roughly: its arrays and its buckets' rows."""
        arrays = (
            self.group_of,
            self.bucket_of,
            self.capacities,
            self.count,
            self.ub,
            self.level_count,
            self.level_ub,
            self._last,
            self._log,
            self._log_free,
            self._log_keys,
            self._log_latest,
        )
        rows = sum(b.rows.nbytes + 8 * len(b.added) + 64 for b in self.buckets.values())
        return sum(a.nbytes for a in arrays) + rows
