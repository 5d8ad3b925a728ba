"""NumInstancesWeigher: weigh providers by how many instances they host
(Nova's NumInstancesWeigher).

Nova ships it disabled (multiplier 0.0): a negative multiplier spreads by
instance count, a positive one packs. Unlike the resource weighers it fixes
no lower bound, so the emptiest candidate always normalises to 0.0. Earlier
picks of the same request count, as Nova's ``consume_from_request`` bumps
``num_instances`` per placed instance.
"""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray
from scheduling.weighers.base import Weigher


class NumInstancesWeigher(Weigher):
    name: ClassVar[str] = "NumInstancesWeigher"
    multiplier_key: ClassVar[str] = "num_instances_weight_multiplier"

    def __init__(self, multiplier: float = 0.0) -> None:
        super().__init__(multiplier)

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        picks = Counter(ctx.picked)
        providers = ctx.snapshot.providers
        return np.fromiter(
            (len(providers[int(r)].instances) + picks[int(r)] for r in rows),
            dtype=np.float64,
            count=len(rows),
        )
