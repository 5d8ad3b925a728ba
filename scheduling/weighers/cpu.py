"""CPUWeigher: prefer providers with more free vCPUs (Nova's CPUWeigher).

A positive multiplier spreads; a negative one stacks. As with RAM,
``minval = 0`` clamps overcommitted providers to 0 and anchors the range at
0 instead of at the busiest candidate.
"""

from __future__ import annotations

from typing import ClassVar

from scheduling.weighers.ram import FreeResourceWeigher


class CPUWeigher(FreeResourceWeigher):
    name: ClassVar[str] = "CPUWeigher"
    multiplier_key: ClassVar[str] = "cpu_weight_multiplier"
    resource_class: ClassVar[str] = "VCPU"

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier)
