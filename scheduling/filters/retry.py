"""Nova's RetryFilter: do not go back to a provider this request failed on."""

from __future__ import annotations

import numpy as np

from scheduling.filters.base import Context, HostFilter
from scheduling.model import BoolArray, IntArray, Request


class RetryFilter(HostFilter):
    """Rejects the providers listed in ``request.tried_providers`` (by
    provider id, where Nova compares host and node name)."""

    name = "RetryFilter"
    cost = 1

    def applies(self, request: Request) -> bool:
        return bool(request.tried_providers)

    def reject(self, ctx: Context, row: int) -> str | None:
        if ctx.snapshot.providers[row].provider_id in ctx.request.tried_providers:
            return "already tried for this request"
        return None

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        row_of = ctx.snapshot.row_of
        tried = [row_of[pid] for pid in ctx.request.tried_providers if pid in row_of]
        keep: BoolArray = ~np.isin(rows, np.asarray(tried, dtype=np.int64))
        return keep
