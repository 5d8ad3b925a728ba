"""RAMWeigher: prefer providers with more free memory (Nova's RAMWeigher).

A positive multiplier spreads; a negative one stacks onto the fullest
providers. ``minval = 0`` matters twice: an overcommitted provider (negative
free) is clamped to 0, and the range is measured from 0 rather than from the
fullest candidate, so free memory of 1000 and 2000 MB normalises to 0.5 and
1.0, not 0.0 and 1.0.

``free_of`` is shared with the CPU and disk weighers.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from placement.filters.base import Context
from placement.model import FloatArray, IntArray
from placement.weighers.base import Weigher


def free_of(ctx: Context, rows: IntArray, resource_class: str) -> FloatArray:
    """Capacity left in ``resource_class`` on ``rows`` after what is used and
    what earlier picks of this request took (0 where the class is absent)."""
    column = ctx.snapshot.column(resource_class)
    if column is None:
        return np.zeros(len(rows), dtype=np.float64)
    # Truncated like Snapshot.capacity, so weighers and the resource filter
    # agree to the unit on what is free.
    free: FloatArray = ctx.free(rows, ctx.snapshot.capacity_table())[:, column].astype(np.float64)
    return free


class RAMWeigher(Weigher):
    name: ClassVar[str] = "RAMWeigher"
    multiplier_key: ClassVar[str] = "ram_weight_multiplier"
    minval: ClassVar[float | None] = 0.0

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier)

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        return free_of(ctx, rows, "MEMORY_MB")
