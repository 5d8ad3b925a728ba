"""HypervisorVersionWeigher: prefer newer hypervisors (Nova's
HypervisorVersionWeigher).

Reads ``capabilities["hypervisor_version"]`` (an int such as 8000000 for
8.0.0); a provider that does not report one weighs 0, i.e. oldest. A negative
multiplier prefers older hypervisors.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray
from scheduling.weighers.base import Weigher, accumulate


class HypervisorVersionWeigher(Weigher):
    name: ClassVar[str] = "HypervisorVersionWeigher"
    multiplier_key: ClassVar[str] = "hypervisor_version_weight_multiplier"

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier)

    def idle(self, ctx: Context) -> bool:
        return not ctx.snapshot.hypervisor_versions_differ

    def add_to(self, total: FloatArray, ctx: Context, rows: IntArray) -> FloatArray | None:
        multiplier = self.uniform_multiplier(ctx)
        if multiplier is None or not math.isfinite(multiplier) or len(rows) == 0:
            return super().add_to(total, ctx, rows)
        # normalize's arithmetic on one gathered copy, in place: the versions
        # are a column of the snapshot, and a decision weighs a thousand rows
        values = ctx.gather(ctx.snapshot.hypervisor_version, rows)
        low, high = float(values.min()), float(values.max())
        if low == high:  # all 0 after normalising: a finite multiplier adds nothing
            return np.zeros(len(rows), dtype=np.float64)
        if low != 0.0 or math.copysign(1.0, low) < 0.0:
            values -= low
            values /= high - low
        else:
            values /= high
        accumulate(total, multiplier, values)
        return values

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        versions: FloatArray = ctx.snapshot.hypervisor_version[rows]
        return versions
