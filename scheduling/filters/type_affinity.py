"""Nova's AggregateTypeAffinityFilter: aggregates that only take some flavors."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Aggregate, Provider, Request

KEY = "instance_type"


class AggregateTypeAffinityFilter(HostFilter):
    """A provider in aggregates carrying ``instance_type`` metadata (a flavor
    name or a comma separated list of them) passes only if
    ``request.flavor_name`` is listed by at least one of those aggregates.
    Aggregates without the key do not restrict anything, and a provider none of
    whose aggregates has it takes every flavor."""

    name = "AggregateTypeAffinityFilter"
    cost = 3
    static = True

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return provider.aggregates

    def request_key(self, request: Request) -> Hashable:
        return request.flavor_name

    def reject(self, ctx: Context, row: int) -> str | None:
        restricting = [a for a in ctx.snapshot.aggregates_of(row) if KEY in a.metadata]
        if not restricting:
            return None
        flavor = ctx.request.flavor_name
        for aggregate in restricting:
            if flavor in (name.strip() for name in aggregate.metadata[KEY].split(",")):
                return None
        names = ", ".join(a.name for a in restricting)
        return f"flavor {flavor!r} not in instance_type of aggregate {names}"
