"""CrossCellWeigher: on a move, prefer destinations in the cell of the
provider the instance is moving from (Nova's CrossCellWeigher).

A provider's cell is its description's ``metadata`` key ``cell`` (a
deployment's partition of compute hosts: Nova's cells v2 cell, a rack
row, a site). A request that moves an instance names the provider it
leaves (``source_provider``: the balancer's evacuations and relocations
say it, a service moving an instance may). When that provider is in the
snapshot and has a cell, providers in the same cell weigh 1 and every
other -1; otherwise every provider weighs 0 and the weigher stands aside.
Nova's default multiplier, 1,000,000, makes staying in the cell outweigh
the other weighers; an aggregate's ``cross_cell_move_weight_multiplier``
overrides it.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray, Provider
from scheduling.weighers.base import Weigher

CELL_KEY = "cell"
"""The provider metadata key that names its cell."""


def cell_of(provider: Provider) -> str | None:
    """The provider's cell, if its description names one."""
    return provider.metadata.get(CELL_KEY) or None


class CrossCellWeigher(Weigher):
    name: ClassVar[str] = "CrossCellWeigher"
    multiplier_key: ClassVar[str] = "cross_cell_move_weight_multiplier"

    def __init__(self, multiplier: float = 1000000.0) -> None:
        super().__init__(multiplier)

    def _source_cell(self, ctx: Context) -> str | None:
        source = ctx.request.source_provider
        if source is None:
            return None
        row = ctx.snapshot.row_of.get(source)
        return None if row is None else cell_of(ctx.snapshot.providers[row])

    def idle(self, ctx: Context) -> bool:
        return self._source_cell(ctx) is None

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        cell = self._source_cell(ctx)
        if cell is None:
            return np.zeros(len(rows), dtype=np.float64)
        providers = ctx.snapshot.providers
        same = [cell_of(providers[row]) == cell for row in rows.tolist()]
        weights: FloatArray = np.where(same, 1.0, -1.0)
        return weights
