"""Nova's ComputeFilter: only providers whose compute service is up and enabled."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Aggregate, BoolArray, IntArray, Provider, Request

ENABLED = "enabled"


class ComputeFilter(HostFilter):
    """A provider passes only in state ``enabled``; any other state (disabled,
    offline, evacuating, or one this filter has never heard of) is the
    reason it fails."""

    name = "ComputeFilter"
    cost = 1
    static = True

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return provider.state

    def request_key(self, request: Request) -> Hashable:
        return ()  # the provider's state alone decides

    def reject(self, ctx: Context, row: int) -> str | None:
        state = ctx.snapshot.providers[row].state
        return None if state == ENABLED else state or "no state"

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        enabled: BoolArray = ctx.snapshot.enabled[rows]
        return enabled
