"""Nova's AllHostsFilter: a filter that removes nothing (for a policy that
lists its filters and wants none to narrow the providers, or a test)."""

from __future__ import annotations

import numpy as np

from scheduling.filters.base import Context, HostFilter
from scheduling.model import BoolArray, IntArray


class AllHostsFilter(HostFilter):
    name = "AllHostsFilter"
    cost = 0
    static = True

    def reject(self, ctx: Context, row: int) -> str | None:
        return None

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        return np.ones(len(rows), dtype=np.bool_)
