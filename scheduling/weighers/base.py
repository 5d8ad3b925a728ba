"""The weigher port: raw numbers per provider, normalised and multiplied by the
engine exactly as Nova's weight handler does.

A weigher returns one raw value per candidate row. The engine normalises each
weigher's values to [0, 1] against ``minval``/``maxval`` (the observed
minimum and maximum unless the weigher fixes them; raw values outside fixed
bounds are first clamped to them; an empty range gives all 0.0, but equal
positive values against a fixed minval of 0 give 1.0 each), multiplies by
the weigher's multiplier for that provider (an aggregate's metadata key
``multiplier_key`` overrides the configured one; with several aggregates the
smallest value wins; if any of them is unparsable the configured multiplier
is used) and sums. A negative multiplier stacks instead of spreading.
``scheduling.weighers.combine.weigh_all`` is that sum, including Nova's rule
that a lone candidate is not weighed at all.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import Aggregate, FloatArray, IntArray, Snapshot

log = logging.getLogger(__name__)


class Weigher(ABC):
    name: ClassVar[str]
    multiplier_key: ClassVar[str]
    minval: ClassVar[float | None] = None
    maxval: ClassVar[float | None] = None
    negated: ClassVar[bool] = False
    """Nova negates some weighers' multiplier (configured or overridden)
    rather than their weights."""
    _overridden: tuple[Mapping[str, Aggregate], bool] | None = None
    """(aggregates, whether one of them sets ``multiplier_key``) for the last
    snapshot's aggregates, which its usage-only twins share."""
    _by_row: tuple[Mapping[str, Aggregate], object, FloatArray, float | None] | None = None
    """:meth:`_every` of the last snapshot."""

    def __init__(self, multiplier: float = 1.0) -> None:
        self.multiplier = multiplier

    def idle(self, ctx: Context) -> bool:
        """True when this weigher would add exactly 0.0 to every candidate
        (nothing in the request or the snapshot for it to tell apart), so the
        handler can skip it."""
        return False

    @abstractmethod
    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        """Raw weights of ``rows`` (higher is preferred before multiplying)."""

    def add_to(self, total: FloatArray, ctx: Context, rows: IntArray) -> FloatArray | None:
        """``total += multipliers x normalize(weigh)``, one value per row:
        this weigher's share of Nova's weight sum. Weighers may override it
        with fewer array operations, giving the very same numbers. Returns
        the normalised values it multiplied, one per row, for an answer's
        ranking (``weigh_parts``); an override that returns None has its
        share kept apart instead."""
        raw = np.asarray(self.weigh(ctx, rows), dtype=np.float64)
        if raw.shape != (len(rows),):
            raise ValueError(
                f"{self.name} returned weights of shape {raw.shape} for {len(rows)} rows"
            )
        normalised = normalize(raw, self.minval, self.maxval)
        multiplier = self.uniform_multiplier(ctx)
        if multiplier is None:
            total += self.multipliers(ctx, rows) * normalised
        else:
            accumulate(total, multiplier, normalised)
        return normalised

    def uniform_multiplier(self, ctx: Context) -> float | None:
        """The multiplier of every provider (what ``multipliers`` would fill
        its array with) when no aggregate of the snapshot can override it,
        or when the overrides leave every provider the same one; else None."""
        if type(self).multipliers is not Weigher.multipliers:
            return None  # a subclass computes its own: ask it row by row
        aggregates = ctx.snapshot.aggregates
        if aggregates:
            known = self._overridden
            if known is None or known[0] is not aggregates:
                key = self.multiplier_key
                known = (aggregates, any(key in a.metadata for a in aggregates.values()))
                self._overridden = known
            if known[1]:
                # aggregates that all set the same value (as a cluster's
                # often do) leave one multiplier: the common path's arithmetic
                return self._every(ctx.snapshot)[3]
        return -self.multiplier if self.negated else self.multiplier

    def multipliers(self, ctx: Context, rows: IntArray) -> FloatArray:
        """Per-row multiplier with per-aggregate overrides: every provider's,
        worked out once per snapshot's membership (which its twins share
        until a provider joins or leaves an aggregate), each set of
        aggregates a provider is in once (few sets, many providers)."""
        snapshot = ctx.snapshot
        if not snapshot.aggregates:
            same = np.full(len(rows), self.multiplier, dtype=np.float64)
            return -same if self.negated else same
        out: FloatArray = self._every(snapshot)[2][rows]
        return out

    def _every(
        self, snapshot: Snapshot
    ) -> tuple[Mapping[str, Aggregate], object, FloatArray, float | None]:
        """(aggregates, membership, every provider's multiplier, the one
        value they all have or None), worked out once per membership."""
        aggregates = snapshot.aggregates
        memo = self._by_row
        if memo is not None and memo[0] is aggregates and memo[1] is snapshot.membership:
            return memo
        known: dict[frozenset[str], float] = {}
        every = np.empty(snapshot.size, dtype=np.float64)
        for row, provider in enumerate(snapshot.providers):
            names = provider.aggregates
            value = known.get(names)
            if value is None:
                value = known[names] = self._override(
                    [aggregates[n] for n in sorted(names) if n in aggregates]
                )
            every[row] = value
        if self.negated:
            every = -every
        memo = self._by_row = (aggregates, snapshot.membership, every, _one_value(every))
        return memo

    def _override(self, member_of: list[Aggregate]) -> float:
        """The multiplier of a provider in ``member_of``: the smallest of
        their ``multiplier_key`` values, else the configured one."""
        values = []
        for aggregate in member_of:
            raw = aggregate.metadata.get(self.multiplier_key)
            if raw is None:
                continue
            try:
                values.append(float(raw))
            except ValueError:
                # Nova casts the whole set of aggregate values at once, so
                # one bad value discards the good ones too.
                log.warning(
                    "aggregate %s: %s=%r is not a number; using %s",
                    aggregate.name,
                    self.multiplier_key,
                    raw,
                    self.multiplier,
                )
                return self.multiplier
        return min(values) if values else self.multiplier


def _one_value(every: FloatArray) -> float | None:
    """The value every item of ``every`` has, bit for bit (0.0 and -0.0
    differ, a NaN is never one), or None."""
    if not len(every):
        return None
    first = every[:1]
    if (every == first).all() and (np.signbit(every) == np.signbit(first)).all():
        return float(first[0])
    return None


def accumulate(total: FloatArray, multiplier: float, normalised: FloatArray) -> None:
    """``total += multiplier x normalised``. The common multipliers skip the
    product: x x 1.0 is x, and t + (-1.0 x x) is t - x, bit for bit."""
    if multiplier == 1.0:
        total += normalised
    elif multiplier == -1.0:
        total -= normalised
    else:
        total += multiplier * normalised


def normalize(
    values: FloatArray, minval: float | None = None, maxval: float | None = None
) -> FloatArray:
    """Scale ``values`` to [0, 1] between ``minval`` and ``maxval`` (the observed
    extremes unless given); an empty range gives all zeros.

    Values beyond a given bound are clamped to it first. Nova does that clamp
    in ``BaseWeigher.weigh_objects``, before the observed extremes are taken,
    so an overcommitted host (negative free RAM) counts as 0 free and cannot
    stretch the range; folding it in here keeps every caller of
    ``normalize`` Nova-exact."""
    if len(values) == 0:
        return values
    if minval is not None:
        values = np.maximum(values, float(minval))
    if maxval is not None:
        values = np.minimum(values, float(maxval))
    low = float(values.min()) if minval is None else float(minval)
    high = float(values.max()) if maxval is None else float(maxval)
    if low == high:
        return np.zeros(len(values), dtype=np.float64)
    if low == 0.0 and math.copysign(1.0, low) > 0.0:
        # x - (+0.0) is x exactly, -0.0 included: the usual minval 0 saves a pass
        scaled: FloatArray = values / high
        return scaled
    return (values - low) / (high - low)
