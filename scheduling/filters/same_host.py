"""Nova's SameHostFilter: land next to one of the named instances."""

from __future__ import annotations

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Request


class SameHostFilter(HostFilter):
    """With a ``same_host`` hint, a provider passes only if it already hosts at
    least one of the hinted instances (any one is enough, as in Nova). Without
    the hint every provider passes."""

    name = "SameHostFilter"
    cost = 2

    def applies(self, request: Request) -> bool:
        return bool(request.hints.same_host)

    def reject(self, ctx: Context, row: int) -> str | None:
        wanted = ctx.request.hints.same_host
        if not wanted or not wanted.isdisjoint(ctx.snapshot.providers[row].instances):
            return None
        return f"hosts none of the same_host instances ({_shown(wanted)})"


def _shown(ids: frozenset[str], limit: int = 3) -> str:
    # a hint may name many instances; the reason only has to say which kind
    listed = sorted(ids)
    more = f", +{len(listed) - limit} more" if len(listed) > limit else ""
    return ", ".join(listed[:limit]) + more
