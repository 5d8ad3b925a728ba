"""TagAffinityWeigher: Shaken Fist's soft tag affinity.

For each provider, +1 per instance there carrying a tag in the request's
``tags.prefer_with`` and -1 per instance carrying a tag in
``tags.prefer_without``. ``Provider.tags`` counts instances per tag, so an
instance carrying two preferred tags counts twice, and a tag listed in both
sets cancels out. The hard ``require_*`` rules belong to a filter.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray
from scheduling.weighers.base import Weigher


class TagAffinityWeigher(Weigher):
    name: ClassVar[str] = "TagAffinityWeigher"
    multiplier_key: ClassVar[str] = "tag_affinity_weight_multiplier"

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier)

    def idle(self, ctx: Context) -> bool:
        return not ctx.request.tags.prefer_with and not ctx.request.tags.prefer_without

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        rules = ctx.request.tags
        if not rules.prefer_with and not rules.prefer_without:
            return np.zeros(len(rows), dtype=np.float64)
        providers = ctx.snapshot.providers
        return np.fromiter(
            (
                sum(providers[int(r)].tags.get(t, 0) for t in rules.prefer_with)
                - sum(providers[int(r)].tags.get(t, 0) for t in rules.prefer_without)
                for r in rows
            ),
            dtype=np.float64,
            count=len(rows),
        )
