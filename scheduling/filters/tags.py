"""Shaken Fist's hard tag affinity rules."""

from __future__ import annotations

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Request


class TagRequirementsFilter(HostFilter):
    """A provider must already run an instance carrying each tag in
    ``require_with`` and none carrying a tag in ``require_without``. A tag
    whose count is zero is absent. The soft ``prefer_*`` rules are weighers'."""

    name = "TagRequirementsFilter"
    cost = 3

    def applies(self, request: Request) -> bool:
        return bool(request.tags.require_with or request.tags.require_without)

    def reject(self, ctx: Context, row: int) -> str | None:
        rules = ctx.request.tags
        tags = ctx.snapshot.providers[row].tags
        missing = sorted(t for t in rules.require_with if tags.get(t, 0) <= 0)
        if missing:
            return f"no instance tagged {', '.join(missing)}"
        clash = sorted(t for t in rules.require_without if tags.get(t, 0) > 0)
        if clash:
            return f"has instances tagged {', '.join(clash)}"
        return None
