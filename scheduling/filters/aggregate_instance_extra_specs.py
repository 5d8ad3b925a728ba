"""Nova's AggregateInstanceExtraSpecsFilter: flavor extra specs against aggregate metadata."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping

from scheduling.extra_specs import matches
from scheduling.filters.base import Context, HostFilter, frozen
from scheduling.model import Aggregate, Provider, Request

SCOPE = "aggregate_instance_extra_specs"


class AggregateInstanceExtraSpecsFilter(HostFilter):
    """Every extra spec that is unscoped or scoped
    ``aggregate_instance_extra_specs:`` names a metadata key (the rest of the
    spec's key after the first ``:``). Some aggregate of the provider must set
    that key, and at least one of the values found under it across all the
    provider's aggregates (each split on commas) must satisfy the spec's
    requirement. A provider in no aggregate therefore fails any such spec."""

    name = "AggregateInstanceExtraSpecsFilter"
    cost = 6
    static = True

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return provider.aggregates

    def request_key(self, request: Request) -> Hashable:
        return frozen(request.extra_specs)

    def reject(self, ctx: Context, row: int) -> str | None:
        specs = ctx.request.extra_specs
        if not specs:
            return None
        metadata: defaultdict[str, set[str]] = defaultdict(set)
        for aggregate in ctx.snapshot.aggregates_of(row):
            for key, value in aggregate.metadata.items():
                metadata[key].update(part.strip() for part in value.split(","))
        for spec, requirement in sorted(specs.items()):
            scope, colon, rest = spec.partition(":")
            if colon and scope != SCOPE:
                continue
            key = rest if colon else spec
            values = metadata.get(key)
            if not values:
                return f"no aggregate sets {key}"
            if not any(matches(value, requirement) for value in values):
                shown = ", ".join(sorted(values))
                return f"aggregate {key} is {shown}, wanted {requirement!r}"
        return None
