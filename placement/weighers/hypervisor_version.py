"""HypervisorVersionWeigher: prefer newer hypervisors (Nova's
HypervisorVersionWeigher).

Reads ``capabilities["hypervisor_version"]`` (an int such as 8000000 for
8.0.0); a provider that does not report one weighs 0, i.e. oldest. A negative
multiplier prefers older hypervisors.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from placement.filters.base import Context
from placement.model import FloatArray, IntArray
from placement.weighers.base import Weigher


def _version(value: Any) -> float:
    # bool is an int subclass but never a version; anything non-numeric is
    # treated like a missing version rather than failing the whole request.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0


class HypervisorVersionWeigher(Weigher):
    name: ClassVar[str] = "HypervisorVersionWeigher"
    multiplier_key: ClassVar[str] = "hypervisor_version_weight_multiplier"

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier)

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        providers = ctx.snapshot.providers
        return np.fromiter(
            (_version(providers[int(r)].capabilities.get("hypervisor_version")) for r in rows),
            dtype=np.float64,
            count=len(rows),
        )
