"""Even distribution (oVirt's evenly_distributed policy): relieve the
providers used above ``high_utilization`` percent of one resource class.

The most used provider above the threshold goes first. Of its instances,
those that alone bring it back under the threshold are tried first, smallest
first (the cheapest move that is enough), then the others, largest first
(each relieves it most). A provider may take an instance if it
stays at or under the threshold with it, so a move never makes another
provider over-used and the source ends less used than it was.
"""

from __future__ import annotations

from collections.abc import Iterator

from scheduling.balancers.base import (
    BalanceUnit,
    Instance,
    Load,
    Source,
    amount_of,
    check_percent,
)
from scheduling.model import BoolArray


class EvenDistribution(BalanceUnit):
    name = "evenly_distributed"

    def __init__(self, resource_class: str = "VCPU", high_utilization: float = 80.0) -> None:
        self.resource_class = resource_class
        self.high = check_percent("high_utilization", high_utilization)

    def sources(self, load: Load) -> Iterator[Source]:
        return over_used(load, self.resource_class, self.high)

    def candidates(self, load: Load, source: Source) -> list[Instance]:
        return relieving_order(load, source.row, self.resource_class, self.high)

    def destinations(self, load: Load, source: Source, instance: Instance) -> BoolArray:
        after = load.utilisation(self.resource_class, amount_of(instance, self.resource_class))
        mask: BoolArray = load.open_to(source.row) & (after <= self.high)
        return mask

    def balanced(self) -> str:
        return f"{self.name}: no provider above {self.high:g}% {self.resource_class}"


def over_used(load: Load, resource_class: str, high: float) -> Iterator[Source]:
    """Enabled providers used above ``high`` percent of ``resource_class``
    that hold an instance using some of it, the most used first."""
    utilisation = load.utilisation(resource_class)
    for r in load.ranked(load.snapshot.enabled & (utilisation > high), -utilisation):
        if any(amount_of(i, resource_class) > 0 for i in load.by_row[r]):
            yield Source(
                r,
                "over",
                f"{load.provider_id(r)}: {resource_class} at {utilisation[r]:.1f}%, "
                f"above {high:g}%",
            )


def relieving_order(load: Load, row: int, resource_class: str, high: float) -> list[Instance]:
    """The instances on ``row`` using some of ``resource_class``: those that
    alone bring it to ``high`` percent or under, smallest first, then the
    others, largest first."""
    column = load.snapshot.column(resource_class)
    if column is None:
        return []
    used = int(load.used[row, column])
    capacity = int(load.capacity[row, column])
    movable = [i for i in load.by_row[row] if amount_of(i, resource_class) > 0]
    enough = sorted(
        (i for i in movable if (used - amount_of(i, resource_class)) * 100.0 <= high * capacity),
        key=lambda i: (amount_of(i, resource_class), i.reservation_id),
    )
    chosen = {i.reservation_id for i in enough}
    rest = sorted(
        (i for i in movable if i.reservation_id not in chosen),
        key=lambda i: (-amount_of(i, resource_class), i.reservation_id),
    )
    return enough + rest
