"""Nova's AvailabilityZoneFilter."""

from __future__ import annotations

from placement.filters.base import Context, HostFilter
from placement.model import Request

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

    def __init__(self, default_zone: str | None = "nova") -> None:
        self.default_zone = default_zone

    def zones(self, ctx: Context, row: int) -> set[str]:
        provider = ctx.snapshot.providers[row]
        found = {
            zone.strip()
            for aggregate in ctx.snapshot.aggregates_of(row)
            if KEY in aggregate.metadata
            for zone in aggregate.metadata[KEY].split(",")
        }
        if provider.availability_zone is not None:
            found.add(provider.availability_zone)
        if not found and self.default_zone is not None:
            found.add(self.default_zone)
        return found

    def applies(self, request: Request) -> bool:
        return bool(request.availability_zone)

    def reject(self, ctx: Context, row: int) -> str | None:
        wanted = ctx.request.availability_zone
        if not wanted:  # Nova treats an empty zone name as no request
            return None
        zones = self.zones(ctx, row)
        if wanted in zones:
            return None
        where = ", ".join(sorted(zones)) or "no zone"
        return f"zone {wanted!r} wanted, provider is in {where}"
