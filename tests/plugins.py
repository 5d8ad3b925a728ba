"""An operator's own filter, weigher and balance policy, loaded by import
path from the scheduler configuration (tests/test_plugins.py)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from scheduling.balancers.base import BalanceUnit, Instance, Load, Source
from scheduling.filters.base import Context, HostFilter
from scheduling.model import BoolArray, FloatArray, IntArray
from scheduling.weighers.base import Weigher


class RackFilter(HostFilter):
    """Only providers whose metadata puts them in ``rack``."""

    name = "RackFilter"

    def __init__(self, rack: str) -> None:
        self.rack = rack

    def reject(self, ctx: Context, row: int) -> str | None:
        rack = ctx.snapshot.providers[row].metadata.get("rack")
        return None if rack == self.rack else f"in rack {rack}, not {self.rack}"


class LastFirstWeigher(Weigher):
    """Prefers the providers that come last in the snapshot."""

    name = "LastFirstWeigher"
    multiplier_key = "last_first_weight_multiplier"

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        weights: FloatArray = rows.astype(np.float64)
        return weights


class Drain(BalanceUnit):
    """Moves every instance off ``provider_id``, to any enabled provider."""

    name = "drain"

    def __init__(self, provider_id: str) -> None:
        self.provider_id = provider_id

    def sources(self, load: Load) -> Iterator[Source]:
        row = load.snapshot.row_of.get(self.provider_id)
        if row is not None and load.by_row[row]:
            yield Source(row, "over", f"{self.provider_id}: draining")

    def candidates(self, load: Load, source: Source) -> list[Instance]:
        return list(load.by_row[source.row])

    def destinations(self, load: Load, source: Source, instance: Instance) -> BoolArray:
        return load.open_to(source.row)


NOT_A_FILTER = "a string"
