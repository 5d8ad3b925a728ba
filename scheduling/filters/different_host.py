"""Nova's DifferentHostFilter: keep away from the named instances."""

from __future__ import annotations

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Request


class DifferentHostFilter(HostFilter):
    """With a ``different_host`` hint, a provider fails if it hosts any of the
    hinted instances. Without the hint every provider passes."""

    name = "DifferentHostFilter"
    cost = 2

    def applies(self, request: Request) -> bool:
        return bool(request.hints.different_host)

    def reject(self, ctx: Context, row: int) -> str | None:
        avoid = ctx.request.hints.different_host
        if not avoid:
            return None
        clash = sorted(avoid.intersection(ctx.snapshot.providers[row].instances))
        if not clash:
            return None
        more = f" and {len(clash) - 1} more" if len(clash) > 1 else ""
        return f"hosts different_host instance {clash[0]}{more}"
