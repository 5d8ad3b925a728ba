"""DiskWeigher: prefer providers with more free disk (Nova's DiskWeigher).

Nova weighs free disk in MB and Berth in GB; with the range anchored at
``minval = 0`` the unit cancels out in normalisation, so the scores agree.
"""

from __future__ import annotations

from typing import ClassVar

from placement.filters.base import Context
from placement.model import FloatArray, IntArray
from placement.weighers.base import Weigher
from placement.weighers.ram import free_of


class DiskWeigher(Weigher):
    name: ClassVar[str] = "DiskWeigher"
    multiplier_key: ClassVar[str] = "disk_weight_multiplier"
    minval: ClassVar[float | None] = 0.0

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier)

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        return free_of(ctx, rows, "DISK_GB")
