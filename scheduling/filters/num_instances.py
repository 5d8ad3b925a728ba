"""Nova's NumInstancesFilter, with AggregateNumInstancesFilter's override."""

from __future__ import annotations

from scheduling.filters.base import Context, HostFilter

KEY = "max_instances_per_host"


def aggregate_limit(ctx: Context, row: int, key: str, default: int) -> int:
    """The smallest integer the provider's aggregates set under ``key``, or
    ``default`` when none sets it or any of the values is not an integer."""
    values = {a.metadata[key] for a in ctx.snapshot.aggregates_of(row) if key in a.metadata}
    try:
        # Nova casts them all before taking the minimum, so a single bad
        # value makes the configured default apply, not the other values.
        return min((int(v) for v in values), default=default)
    except ValueError:
        return default


class NumInstancesFilter(HostFilter):
    """A provider passes while it holds fewer than the limit of instances,
    counting those this request has already been given there. An
    aggregate's ``max_instances_per_host`` metadata replaces the limit."""

    name = "NumInstancesFilter"
    cost = 3
    per_pick = True

    def __init__(self, max_instances_per_host: int = 50) -> None:
        self.max_instances_per_host = max_instances_per_host

    def reject(self, ctx: Context, row: int) -> str | None:
        limit = aggregate_limit(ctx, row, KEY, self.max_instances_per_host)
        count = len(ctx.snapshot.providers[row].instances) + ctx.picked.count(row)
        if count < limit:
            return None
        return f"{count} instances, max_instances_per_host {limit}"
