"""Nova's AvailabilityZoneFilter."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import numpy as np

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Aggregate, BoolArray, IntArray, Provider, Request, Snapshot

KEY = "availability_zone"


class AvailabilityZoneFilter(HostFilter):
    """With a requested zone, a provider passes if that zone is among its
    zones: its own ``availability_zone`` and every name in its aggregates'
    ``availability_zone`` metadata (comma separated, as Nova splits all
    aggregate metadata). A provider with no zone at all is in
    ``default_zone``, as Nova puts such hosts in ``default_availability_zone``;
    with ``default_zone=None`` it matches no request that names a zone."""

    name = "AvailabilityZoneFilter"
    cost = 2
    static = True

    def __init__(self, default_zone: str | None = "nova") -> None:
        self.default_zone = default_zone
        self._known: tuple[object, object, dict[str, BoolArray]] | None = None
        """(providers, aggregates, zone -> the rows in it) of the last
        snapshot: its usage-only twins share both, and most requests that
        name a zone name one of a few."""

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        wanted = ctx.request.availability_zone
        if not wanted:
            return np.ones(len(rows), dtype=np.bool_)
        passing: BoolArray = self._in_zone(ctx.snapshot, wanted, ctx).take(rows)
        return passing

    def _in_zone(self, snapshot: Snapshot, zone: str, ctx: Context) -> BoolArray:
        known = self._known
        if (
            known is None
            or known[0] is not snapshot.providers
            or known[1] is not snapshot.aggregates
        ):
            known = self._known = (snapshot.providers, snapshot.aggregates, {})
        passing = known[2].get(zone)
        if passing is None:
            passing = np.fromiter(
                (zone in self.zones(ctx, row) for row in range(snapshot.size)),
                np.bool_,
                snapshot.size,
            )
            known[2][zone] = passing
        return passing

    def zones(self, ctx: Context, row: int) -> set[str]:
        return self._zones(ctx.snapshot.providers[row], ctx.snapshot.aggregates)

    def _zones(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> set[str]:
        found = {
            zone.strip()
            for name in sorted(provider.aggregates)
            if name in aggregates and KEY in aggregates[name].metadata
            for zone in aggregates[name].metadata[KEY].split(",")
        }
        if provider.availability_zone is not None:
            found.add(provider.availability_zone)
        if not found and self.default_zone is not None:
            found.add(self.default_zone)
        return found

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return frozenset(self._zones(provider, aggregates))

    def applies(self, request: Request) -> bool:
        return bool(request.availability_zone)

    def request_key(self, request: Request) -> Hashable:
        return request.availability_zone

    def reject(self, ctx: Context, row: int) -> str | None:
        wanted = ctx.request.availability_zone
        if not wanted:  # Nova treats an empty zone name as no request
            return None
        zones = self.zones(ctx, row)
        if wanted in zones:
            return None
        where = ", ".join(sorted(zones)) or "no zone"
        return f"zone {wanted!r} wanted, provider is in {where}"
