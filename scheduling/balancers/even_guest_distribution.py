"""Even guest distribution (oVirt's vm_evenly_distributed policy): even
out the number of instances per provider, whatever their size.

A provider is crowded when it holds more than ``high_instance_count``
instances and at least ``migration_threshold`` more than the least crowded
enabled provider. The most crowded goes first; its instances are tried
smallest in ``resource_class`` first (MEMORY_MB by default: the least memory
is the quickest live migration). A provider may take one if it holds fewer
than ``high_instance_count`` and at least ``migration_threshold`` fewer than
the source, so every move narrows the gap.
"""

from __future__ import annotations

from collections.abc import Iterator

from scheduling.balancers.base import (
    BalanceUnit,
    Instance,
    Load,
    Source,
    amount_of,
    check_count,
)
from scheduling.model import BoolArray


class EvenGuestDistribution(BalanceUnit):
    name = "vm_evenly_distributed"

    def __init__(
        self,
        high_instance_count: int = 10,
        migration_threshold: int = 5,
        resource_class: str = "MEMORY_MB",
    ) -> None:
        self.high = check_count("high_instance_count", high_instance_count, 0)
        # with 1, a move would only swap which provider holds one more
        self.threshold = check_count("migration_threshold", migration_threshold, 2)
        self.resource_class = resource_class

    def sources(self, load: Load) -> Iterator[Source]:
        enabled = load.snapshot.enabled
        if not enabled.any():
            return
        counts = load.counts()
        fewest = int(counts[enabled].min())
        crowded = enabled & (counts > self.high) & (counts - fewest >= self.threshold)
        for r in load.ranked(crowded, -counts):
            yield Source(
                r,
                "crowded",
                f"{load.provider_id(r)}: {counts[r]} instances, above {self.high} "
                f"and {counts[r] - fewest} more than the least crowded",
            )

    def candidates(self, load: Load, source: Source) -> list[Instance]:
        return sorted(
            load.by_row[source.row],
            key=lambda i: (amount_of(i, self.resource_class), i.reservation_id),
        )

    def destinations(self, load: Load, source: Source, instance: Instance) -> BoolArray:
        counts = load.counts()
        room = (counts < self.high) & (counts <= counts[source.row] - self.threshold)
        mask: BoolArray = load.open_to(source.row) & room
        return mask

    def balanced(self) -> str:
        return (
            f"{self.name}: no provider above {self.high} instances "
            f"and {self.threshold} more than the least crowded"
        )
