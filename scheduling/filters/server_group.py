"""Nova's hard server group filters: affinity and anti-affinity.

Members of the request's group already placed are ``provider.groups[group_id]``.
Each earlier pick of the same multi-instance request counts as one more
member on the picked row, as Nova adds every pick to the group's hosts and
to the host's instances while placing the rest of a multi-create. That makes
both filters ``per_pick``. The soft policies are weighers' business; these
filters let every provider through for them.

Berth keeps the group per provider where Nova keeps it per compute host name.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from scheduling.filters.base import Context, HostFilter
from scheduling.model import BoolArray, IntArray, Request, Snapshot


def _members_by_row(snapshot: Snapshot, group_id: str) -> dict[int, int]:
    """Row -> members of the group placed there: one scan of the snapshot,
    for every row a mask asks about (rather than a lookup per row)."""
    return {
        row: n
        for row, provider in enumerate(snapshot.providers)
        if (n := provider.groups.get(group_id, 0)) > 0
    }


def _placed_here(ctx: Context, row: int) -> int:
    group_id = ctx.request.group_id
    if group_id is None:
        return 0
    return ctx.snapshot.providers[row].groups.get(group_id, 0)


class ServerGroupAffinityFilter(HostFilter):
    """``group_policy == "affinity"``: every member on one provider.

    Once this request has picked a provider, only that provider passes;
    before that, if members are placed already, only their providers pass;
    a group with no members yet lets every provider through. (Nova keeps
    admitting every host of the group after the first pick; the group's
    members on several providers is already a broken group, and Berth does
    not spread the request over them further.)
    """

    name = "ServerGroupAffinityFilter"
    cost = 5
    per_pick = True
    reads_others = True  # where the group's members are, anywhere

    def __init__(self) -> None:
        # The rows holding members depend only on the snapshot and the group,
        # and finding them is a scan; keep the last answer for the next rows.
        self._homes: tuple[Snapshot, str, frozenset[int]] | None = None

    def applies(self, request: Request) -> bool:
        return request.group_policy == "affinity"

    def reject(self, ctx: Context, row: int) -> str | None:
        request = ctx.request
        if request.group_policy != "affinity":
            return None
        group = request.group_id or "(unnamed)"
        if ctx.picked:
            if row in ctx.picked:
                return None
            first = ctx.snapshot.providers[ctx.picked[0]].provider_id
            return f"affinity group {group}: this request's members are going to {first}"
        homes = self._homes_of(ctx)
        if not homes or row in homes:
            return None
        return f"affinity group {group}: its members are on {len(homes)} other provider(s)"

    def _homes_of(self, ctx: Context) -> frozenset[int]:
        group_id = ctx.request.group_id
        if group_id is None:
            return frozenset()
        cached = self._homes
        if cached is not None and cached[0] is ctx.snapshot and cached[1] == group_id:
            return cached[2]
        homes = frozenset(
            row
            for row, provider in enumerate(ctx.snapshot.providers)
            if provider.groups.get(group_id, 0) > 0
        )
        self._homes = (ctx.snapshot, group_id, homes)
        return homes

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        """As :meth:`reject`, for ``rows`` at once."""
        if ctx.request.group_policy != "affinity":
            return np.ones(len(rows), dtype=np.bool_)
        allowed = ctx.picked or self._homes_of(ctx)
        if not allowed:
            return np.ones(len(rows), dtype=np.bool_)
        return np.isin(rows, np.fromiter(allowed, dtype=rows.dtype))


class ServerGroupAntiAffinityFilter(HostFilter):
    """``group_policy == "anti-affinity"``: a provider passes while it holds
    fewer than ``request.max_server_per_host`` members of the group (Nova's
    rule, default 1: no member there yet), earlier picks of this request
    included."""

    name = "ServerGroupAntiAffinityFilter"
    cost = 5
    per_pick = True

    def __init__(self) -> None:
        # where the group's members are, per snapshot: found by one scan
        self._members: tuple[Snapshot, str, dict[int, int]] | None = None

    def applies(self, request: Request) -> bool:
        return request.group_policy == "anti-affinity"

    def reject(self, ctx: Context, row: int) -> str | None:
        request = ctx.request
        if request.group_policy != "anti-affinity":
            return None
        members = _placed_here(ctx, row) + ctx.picked.count(row)
        if members < request.max_server_per_host:
            return None
        group = request.group_id or "(unnamed)"
        return (
            f"anti-affinity group {group}: {members} member(s) here, "
            f"max_server_per_host is {request.max_server_per_host}"
        )

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        """As :meth:`reject`, for ``rows`` at once: only the rows holding
        members (placed, or picked by this request) can be full."""
        request = ctx.request
        if request.group_policy != "anti-affinity":
            return np.ones(len(rows), dtype=np.bool_)
        if request.max_server_per_host <= 0:  # fewer than none: nowhere
            return np.zeros(len(rows), dtype=np.bool_)
        here = Counter(self._members_of(ctx))
        here.update(ctx.picked)
        full = [row for row, n in here.items() if n >= request.max_server_per_host]
        if not full:
            return np.ones(len(rows), dtype=np.bool_)
        return ~np.isin(rows, np.fromiter(full, dtype=rows.dtype))

    def _members_of(self, ctx: Context) -> dict[int, int]:
        group_id = ctx.request.group_id
        if group_id is None:
            return {}
        cached = self._members
        if cached is None or cached[0] is not ctx.snapshot or cached[1] != group_id:
            members = _members_by_row(ctx.snapshot, group_id)
            cached = self._members = (ctx.snapshot, group_id, members)
        return cached[2]
