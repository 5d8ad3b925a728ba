"""IoOpsWeigher: weigh providers by their in-flight IO-heavy operations
(builds, resizes, snapshots, migrations), Nova's IoOpsWeigher.

The default multiplier is -1.0, so lighter-loaded providers win; a positive
multiplier prefers busy ones. Each earlier pick of the same request counts as
one more operation on its provider, as Nova's ``consume_from_request`` adds
one to ``num_io_ops`` per placed instance.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from placement.filters.base import Context
from placement.model import FloatArray, IntArray, picks_per_row
from placement.weighers.base import Weigher


class IoOpsWeigher(Weigher):
    name: ClassVar[str] = "IoOpsWeigher"
    multiplier_key: ClassVar[str] = "io_ops_weight_multiplier"
    minval: ClassVar[float | None] = 0.0

    def __init__(self, multiplier: float = -1.0) -> None:
        super().__init__(multiplier)

    def idle(self, ctx: Context) -> bool:
        return not ctx.picked and not ctx.snapshot.any_io_ops

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        snapshot = ctx.snapshot
        ops = snapshot.num_io_ops[rows] + picks_per_row(ctx.picked, rows, snapshot.size)
        weights: FloatArray = ops.astype(np.float64)
        return weights
