"""HypervisorVersionWeigher: prefer newer hypervisors (Nova's
HypervisorVersionWeigher).

Reads ``capabilities["hypervisor_version"]`` (an int such as 8000000 for
8.0.0); a provider that does not report one weighs 0, i.e. oldest. A negative
multiplier prefers older hypervisors.
"""

from __future__ import annotations

from typing import ClassVar

from placement.filters.base import Context
from placement.model import FloatArray, IntArray
from placement.weighers.base import Weigher


class HypervisorVersionWeigher(Weigher):
    name: ClassVar[str] = "HypervisorVersionWeigher"
    multiplier_key: ClassVar[str] = "hypervisor_version_weight_multiplier"

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier)

    def idle(self, ctx: Context) -> bool:
        return not ctx.snapshot.hypervisor_versions_differ

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        versions: FloatArray = ctx.snapshot.hypervisor_version[rows]
        return versions
