"""Power saving (oVirt's power_saving policy): relieve the providers used
above ``high_utilization`` percent of one resource class, then empty those
used under ``low_utilization`` percent so they can be switched off.

Over-used providers come first, as in even distribution. Then the least
used provider under ``low_utilization`` that still holds instances is
emptied, largest instance first, onto providers more used than it that stay
at ``high_utilization`` or under. Either way an instance goes to a provider
already at ``low_utilization`` or above where one can take it, so an idle
provider is woken only when no busy one has room; and emptying only moves
load onto providers more used than the one it leaves, so it cannot go in
circles.

Its cluster policy stacks: the RAM, CPU and disk weighers' multipliers are
negated, so new instances also go to the fullest providers that fit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from scheduling.balancers.base import (
    BalanceUnit,
    Instance,
    Load,
    Source,
    amount_of,
    check_percent,
)
from scheduling.balancers.even_distribution import over_used, relieving_order
from scheduling.model import BoolArray
from scheduling.registry import DEFAULT_WEIGHERS

_STACKING = {"RAMWeigher", "CPUWeigher", "DiskWeigher"}


class PowerSaving(BalanceUnit):
    name = "power_saving"
    weighers: ClassVar[Mapping[str, float] | None] = {
        n: -m if n in _STACKING else m for n, m in DEFAULT_WEIGHERS.items()
    }

    def __init__(
        self,
        resource_class: str = "VCPU",
        high_utilization: float = 80.0,
        low_utilization: float = 20.0,
    ) -> None:
        self.resource_class = resource_class
        self.high = check_percent("high_utilization", high_utilization)
        self.low = check_percent("low_utilization", low_utilization)
        if self.low >= self.high:
            raise ValueError(
                f"low_utilization ({self.low:g}) must be below high_utilization ({self.high:g})"
            )

    def sources(self, load: Load) -> Iterator[Source]:
        yield from over_used(load, self.resource_class, self.high)
        utilisation = load.utilisation(self.resource_class)
        for r in load.ranked(load.snapshot.enabled & (utilisation < self.low), utilisation):
            yield Source(
                r,
                "under",
                f"{load.provider_id(r)}: {self.resource_class} at {utilisation[r]:.1f}%, "
                f"under {self.low:g}%: emptying it",
            )

    def candidates(self, load: Load, source: Source) -> list[Instance]:
        if source.kind == "over":
            return relieving_order(load, source.row, self.resource_class, self.high)
        return sorted(
            load.by_row[source.row],
            key=lambda i: (-amount_of(i, self.resource_class), i.reservation_id),
        )

    def destinations(self, load: Load, source: Source, instance: Instance) -> BoolArray:
        before = load.utilisation(self.resource_class)
        after = load.utilisation(self.resource_class, amount_of(instance, self.resource_class))
        fits: BoolArray = load.open_to(source.row) & (after <= self.high)
        if source.kind == "under":
            # only onto providers more used than the source: load only ever
            # gathers, so emptying cannot go in circles
            fits &= before > before[source.row]
        busy: BoolArray = fits & (before >= self.low)
        return busy if busy.any() else fits

    def balanced(self) -> str:
        return (
            f"{self.name}: no provider above {self.high:g}% {self.resource_class}, "
            f"and none under {self.low:g}% that another can empty"
        )
