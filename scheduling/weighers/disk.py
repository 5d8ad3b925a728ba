"""DiskWeigher: prefer providers with more free disk (Nova's DiskWeigher).

Nova weighs free disk in MB and Berth in GB; with the range anchored at
``minval = 0`` the unit cancels out in normalisation, so the scores agree.
"""

from __future__ import annotations

from typing import ClassVar

from scheduling.weighers.ram import FreeResourceWeigher


class DiskWeigher(FreeResourceWeigher):
    name: ClassVar[str] = "DiskWeigher"
    multiplier_key: ClassVar[str] = "disk_weight_multiplier"
    resource_class: ClassVar[str] = "DISK_GB"

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier)
