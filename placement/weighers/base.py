"""The weigher port: raw numbers per provider, normalised and multiplied by the
engine exactly as Nova's weight handler does.

A weigher returns one raw value per candidate row. The engine normalises each
weigher's values to [0, 1] against ``minval``/``maxval`` (the observed
minimum and maximum unless the weigher fixes them; all values equal gives all
0.0), multiplies by the weigher's multiplier for that provider (an aggregate's
metadata key ``multiplier_key`` overrides the configured one; with several
aggregates the smallest valid value wins; an unparsable value falls back to
the configured multiplier) and sums. A negative multiplier stacks instead of
spreading.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from placement.filters.base import Context
from placement.model import FloatArray, IntArray

log = logging.getLogger(__name__)


class Weigher(ABC):
    name: ClassVar[str]
    multiplier_key: ClassVar[str]
    minval: ClassVar[float | None] = None
    maxval: ClassVar[float | None] = None

    def __init__(self, multiplier: float = 1.0) -> None:
        self.multiplier = multiplier

    @abstractmethod
    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        """Raw weights of ``rows`` (higher is preferred before multiplying)."""

    def multipliers(self, ctx: Context, rows: IntArray) -> FloatArray:
        """Per-row multiplier with per-aggregate overrides."""
        out = np.full(len(rows), self.multiplier, dtype=np.float64)
        if not ctx.snapshot.aggregates:
            return out
        for k, row in enumerate(rows):
            values = []
            for aggregate in ctx.snapshot.aggregates_of(int(row)):
                raw = aggregate.metadata.get(self.multiplier_key)
                if raw is None:
                    continue
                try:
                    values.append(float(raw))
                except ValueError:
                    log.warning(
                        "aggregate %s: %s=%r is not a number; using %s",
                        aggregate.name,
                        self.multiplier_key,
                        raw,
                        self.multiplier,
                    )
            if values:
                out[k] = min(values)
        return out


def normalize(
    values: FloatArray, minval: float | None = None, maxval: float | None = None
) -> FloatArray:
    """Scale ``values`` to [0, 1] between ``minval`` and ``maxval`` (the observed
    extremes unless given); an empty range gives all zeros."""
    if len(values) == 0:
        return values
    low = float(values.min()) if minval is None else float(minval)
    high = float(values.max()) if maxval is None else float(maxval)
    if low == high:
        return np.zeros(len(values), dtype=np.float64)
    return (values - low) / (high - low)
