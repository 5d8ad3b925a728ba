"""Nova's IoOpsFilter, with AggregateIoOpsFilter's override."""

from __future__ import annotations

from scheduling.filters.base import Context, HostFilter
from scheduling.filters.num_instances import aggregate_limit

KEY = "max_io_ops_per_host"


class IoOpsFilter(HostFilter):
    """A provider passes while its I/O-heavy operations in flight number
    fewer than the limit. Every instance this request has already been given
    there counts as one more, since Nova's host state counts a build as an
    I/O operation the moment it is scheduled. An aggregate's
    ``max_io_ops_per_host`` metadata replaces the limit."""

    name = "IoOpsFilter"
    cost = 3
    per_pick = True

    def __init__(self, max_io_ops_per_host: int = 8) -> None:
        self.max_io_ops_per_host = max_io_ops_per_host

    def reject(self, ctx: Context, row: int) -> str | None:
        limit = aggregate_limit(ctx, row, KEY, self.max_io_ops_per_host)
        ops = ctx.snapshot.providers[row].num_io_ops + ctx.picked.count(row)
        if ops < limit:
            return None
        return f"{ops} I/O operations, max_io_ops_per_host {limit}"
