"""BuildFailureWeigher: steer away from providers where recent builds failed
(Nova's BuildFailureWeigher).

Nova weighs the failure count itself and negates the multiplier (the
configured one or an aggregate's override), rather than weighing the
negated count with a positive multiplier. Both rank alike, but the scores
differ by a per-provider constant: with multiplier 1000 and failures
0, 1, 10, 100 Nova scores 0, -10, -100, -1000, where the other form would
give 1000, 990, 900, 0. Since the constant would vary with per-aggregate
multipliers, it could reorder providers once other weighers are summed in,
so Nova's form is kept. The large default (1e6) lets one failure outweigh
every other weigher.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray
from scheduling.weighers.base import Weigher


class BuildFailureWeigher(Weigher):
    name: ClassVar[str] = "BuildFailureWeigher"
    multiplier_key: ClassVar[str] = "build_failure_weight_multiplier"
    negated: ClassVar[bool] = True

    def __init__(self, multiplier: float = 1000000.0) -> None:
        super().__init__(multiplier)

    def idle(self, ctx: Context) -> bool:
        return not ctx.snapshot.any_build_failures

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        failures: FloatArray = ctx.snapshot.build_failures[rows].astype(np.float64)
        return failures
