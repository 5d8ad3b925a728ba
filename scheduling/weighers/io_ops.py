"""IoOpsWeigher: weigh providers by their in-flight IO-heavy operations
(builds, resizes, snapshots, migrations), Nova's IoOpsWeigher.

The default multiplier is -1.0, so lighter-loaded providers win; a positive
multiplier prefers busy ones. Each earlier pick of the same request counts as
one more operation on its provider, as Nova's ``consume_from_request`` adds
one to ``num_io_ops`` per placed instance.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray, Snapshot, picks_per_row
from scheduling.weighers.base import Weigher, accumulate

_NONE: IntArray = np.zeros(0, dtype=np.int64)


class IoOpsWeigher(Weigher):
    name: ClassVar[str] = "IoOpsWeigher"
    multiplier_key: ClassVar[str] = "io_ops_weight_multiplier"
    minval: ClassVar[float | None] = 0.0

    def __init__(self, multiplier: float = -1.0) -> None:
        super().__init__(multiplier)
        self._clamped: tuple[IntArray, FloatArray] = (_NONE, np.zeros(0, dtype=np.float64))
        """(a snapshot's ``num_io_ops``, those counts clamped at 0 as floats),
        shared by the snapshot's usage-only twins."""

    def idle(self, ctx: Context) -> bool:
        return not ctx.picked and not ctx.snapshot.any_io_ops

    def add_to(self, total: FloatArray, ctx: Context, rows: IntArray) -> FloatArray | None:
        multiplier = self.uniform_multiplier(ctx)
        simple = self.minval == 0.0 and self.maxval is None and len(rows) > 0
        if ctx.picked or multiplier is None or not simple or not math.isfinite(multiplier):
            return super().add_to(total, ctx, rows)
        # Before the first pick the weights are the snapshot's own counts, so
        # their clamped float form is worked out once per snapshot; what is
        # left of normalize is one division by the largest.
        values = ctx.gather(self._clamped_counts(ctx.snapshot), rows)
        high = max(float(values.max()), ctx.io_reference)
        if high > 0.0:  # all 0 otherwise: a finite multiplier adds nothing
            values /= high
            accumulate(total, multiplier, values)
        return values  # all 0 when high is: the counts are clamped at 0

    def _clamped_counts(self, snapshot: Snapshot) -> FloatArray:
        counts, clamped = self._clamped
        if counts is not snapshot.num_io_ops:
            counts = snapshot.num_io_ops
            clamped = np.maximum(counts, 0).astype(np.float64)
            self._clamped = (counts, clamped)
        return clamped

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        snapshot = ctx.snapshot
        ops = snapshot.num_io_ops[rows] + picks_per_row(ctx.picked, rows, snapshot.size)
        weights: FloatArray = ops.astype(np.float64)
        return weights
