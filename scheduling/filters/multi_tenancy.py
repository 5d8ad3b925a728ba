"""Nova's AggregateMultiTenancyIsolation: aggregates reserved for some tenants."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Aggregate, Provider, Request

PREFIX = "filter_tenant_id"


class AggregateMultiTenancyIsolation(HostFilter):
    """A provider in aggregates whose metadata has ``filter_tenant_id`` or any
    key starting with it (``filter_tenant_id_2``, ...; several keys exist
    because an aggregate value is limited to 255 characters) takes requests
    only from the project ids listed there, comma separated. The lists of all
    the provider's aggregates and keys are pooled: being named by any of them
    is enough. A provider with no such key anywhere takes every project.

    Blank entries (``"a,,b"``, an empty value) are ignored, so a key whose
    value lists nobody restricts nothing, like Nova's "no tenant ids defined".
    This filter does not keep listed projects *out* of other providers.
    """

    name = "AggregateMultiTenancyIsolation"
    cost = 3
    static = True

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return provider.aggregates

    def request_key(self, request: Request) -> Hashable:
        return request.project_id

    def reject(self, ctx: Context, row: int) -> str | None:
        allowed: set[str] = set()
        isolating: list[str] = []
        for aggregate in ctx.snapshot.aggregates_of(row):
            keys = [k for k in aggregate.metadata if k.startswith(PREFIX)]
            for key in keys:
                allowed.update(t.strip() for t in aggregate.metadata[key].split(","))
            if keys:
                isolating.append(aggregate.name)
        allowed.discard("")
        if not allowed or ctx.request.project_id in allowed:
            return None
        return (
            f"project {ctx.request.project_id!r} is not a tenant of isolated "
            f"aggregate {', '.join(isolating)}"
        )
