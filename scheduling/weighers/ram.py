"""RAMWeigher: prefer providers with more free memory (Nova's RAMWeigher).

A positive multiplier spreads; a negative one stacks onto the fullest
providers. ``minval = 0`` matters twice: an overcommitted provider (negative
free) is clamped to 0, and the range is measured from 0 rather than from the
fullest candidate, so free memory of 1000 and 2000 MB normalises to 0.5 and
1.0, not 0.0 and 1.0.

``FreeResourceWeigher`` is shared with the CPU and disk weighers: on the
common path (no aggregate overriding the multiplier) the three of them read
one normalisation of every class's free capacity, ``Context.free_scaled``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray
from scheduling.weighers.base import Weigher, accumulate


def free_of(ctx: Context, rows: IntArray, resource_class: str) -> FloatArray:
    """Capacity left in ``resource_class`` on ``rows`` after what is used and
    what earlier picks of this request took (0 where the class is absent)."""
    column = ctx.snapshot.column(resource_class)
    if column is None:
        return np.zeros(len(rows), dtype=np.float64)
    # Truncated like Snapshot.capacity, so weighers and the resource filter
    # agree to the unit on what is free.
    free: FloatArray = ctx.free(rows, ctx.snapshot.capacity_by_class())[column].astype(np.float64)
    return free


class FreeResourceWeigher(Weigher):
    """Weighs the free capacity of one resource class, clamped at 0 and
    measured from 0 (``minval``)."""

    resource_class: ClassVar[str]
    minval: ClassVar[float | None] = 0.0

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        return free_of(ctx, rows, self.resource_class)

    def add_to(self, total: FloatArray, ctx: Context, rows: IntArray) -> FloatArray | None:
        column = ctx.snapshot.column(self.resource_class)
        multiplier = self.uniform_multiplier(ctx)
        anchored = self.minval == 0.0 and self.maxval is None
        if column is None or not anchored or not len(rows):
            return super().add_to(total, ctx, rows)
        if multiplier is None and ctx.reference is not None:
            return super().add_to(total, ctx, rows)  # normalised among these rows alone
        # the RAM, CPU and disk weighers share one normalisation of every class
        normalised: FloatArray = ctx.free_scaled(rows, ctx.snapshot.capacity_by_class())[column]
        if multiplier is None:  # an aggregate sets this weigher's multiplier
            total += self.multipliers(ctx, rows) * normalised
        else:
            accumulate(total, multiplier, normalised)
        return normalised


class RAMWeigher(FreeResourceWeigher):
    name: ClassVar[str] = "RAMWeigher"
    multiplier_key: ClassVar[str] = "ram_weight_multiplier"
    resource_class: ClassVar[str] = "MEMORY_MB"

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier)
