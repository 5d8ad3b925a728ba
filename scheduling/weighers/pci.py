"""PCIWeigher: keep the providers with PCI devices for the requests that
need them (Nova's PCIWeigher).

Every provider weighs ``100 - min(devices, 99)``: the fewer devices it can
pass through, the heavier. A request without PCI asks thus avoids the
PCI-rich providers, and one with them stacks onto the providers with the
fewest devices that still have enough (PciPassthroughFilter has removed
those with too few), leaving whole providers free for larger asks. Beyond
99 devices there is no scarcity to protect, so more count the same. Each
earlier pick of the same request takes its devices from its provider, as
Nova's ``consume_from_request`` does.

Only a multiplier of 0 or more is allowed, configured or an aggregate's
``pci_weight_multiplier``: a negative one would push plain requests onto
the PCI providers. The configuration refuses a negative multiplier; an
aggregate's negative value is passed over, as if not set.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import Aggregate, FloatArray, IntArray, Provider, picks_per_row
from scheduling.weighers.base import Weigher
from schemas.guest_topology import PCI_ALIAS, pci_asks

log = logging.getLogger(__name__)

MAX_DEVICES = 100
"""Counts of free devices are capped just below this: beyond it, no
provider is short of devices."""


def devices_asked(extra_specs: Mapping[str, str]) -> int:
    """How many devices one instance of a request takes by its aliases."""
    if PCI_ALIAS not in extra_specs:
        return 0
    return sum(count for _, count in pci_asks(extra_specs))


class PCIWeigher(Weigher):
    name: ClassVar[str] = "PCIWeigher"
    multiplier_key: ClassVar[str] = "pci_weight_multiplier"

    def __init__(self, multiplier: float = 1.0) -> None:
        if not multiplier >= 0.0:
            raise ValueError(
                f"PCIWeigher's multiplier is {multiplier}: only 0 or more, since a"
                " negative one would send requests without PCI devices to PCI providers"
            )
        super().__init__(multiplier)
        self._counts: tuple[tuple[Provider, ...], IntArray, bool] | None = None
        """(a snapshot's providers, each one's device count, whether any has one)."""

    def _devices(self, ctx: Context) -> tuple[IntArray, bool]:
        providers = ctx.snapshot.providers
        memo = self._counts
        if memo is None or memo[0] is not providers:
            counts = np.fromiter(
                (len(p.pci_devices) for p in providers), dtype=np.int64, count=len(providers)
            )
            memo = self._counts = (providers, counts, bool(counts.any()))
        return memo[1], memo[2]

    def idle(self, ctx: Context) -> bool:
        return not self._devices(ctx)[1]

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        counts, _ = self._devices(ctx)
        free = counts[rows]
        if ctx.picked:
            taken = devices_asked(ctx.request.extra_specs) + len(ctx.request.sriov_ports)
            free = np.maximum(free - taken * picks_per_row(ctx.picked, rows, ctx.snapshot.size), 0)
        weights: FloatArray = (MAX_DEVICES - np.minimum(free, MAX_DEVICES - 1)).astype(np.float64)
        return weights

    def _override(self, member_of: list[Aggregate]) -> float:
        usable = []
        for aggregate in member_of:
            raw = aggregate.metadata.get(self.multiplier_key)
            try:
                negative = raw is not None and float(raw) < 0.0
            except ValueError:
                negative = False  # the base class says so and uses the configured one
            if negative:
                log.warning(
                    "aggregate %s: %s=%s is negative, which PCIWeigher does not allow; passed over",
                    aggregate.name,
                    self.multiplier_key,
                    raw,
                )
                continue
            usable.append(aggregate)
        return super()._override(usable)
