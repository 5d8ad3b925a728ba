"""Nova's ComputeCapabilitiesFilter: flavor extra specs against host capabilities."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from scheduling.extra_specs import capability_value, matches, spec_applies
from scheduling.filters.base import Context, HostFilter, frozen
from scheduling.model import Aggregate, Provider, Request


class ComputeCapabilitiesFilter(HostFilter):
    """Every extra spec scoped ``capabilities:`` must name a capability the
    provider reports, whose text satisfies the spec's requirement. An
    unscoped spec is checked the same way, but only on providers that report
    it; specs in any other scope are for other filters."""

    name = "ComputeCapabilitiesFilter"
    cost = 5
    static = True

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return frozen(provider.capabilities)

    def applies(self, request: Request) -> bool:
        return bool(request.extra_specs)

    def reject(self, ctx: Context, row: int) -> str | None:
        capabilities = ctx.snapshot.providers[row].capabilities
        for key, requirement in sorted(ctx.request.extra_specs.items()):
            if not spec_applies(capabilities, key):
                continue
            value = capability_value(capabilities, key)
            if value is None:
                return f"{key} not reported"
            # Nova compares the capability's str(), lists and all
            text = str(value)
            if not matches(text, requirement):
                return f"{key} is {text!r}, wanted {requirement!r}"
        return None
