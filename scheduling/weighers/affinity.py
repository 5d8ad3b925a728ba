"""Soft server-group affinity and anti-affinity (Nova's
ServerGroupSoftAffinityWeigher and ServerGroupSoftAntiAffinityWeigher).

Each counts the members of the request's server group already on a
provider, including the instances earlier picks of this request put there.
Affinity prefers more of them, anti-affinity fewer (it returns the count
negated, so both use a positive multiplier). A request with no group, or
whose group has another policy, weighs 0 everywhere; the hard policies are
filters, not weighers.

Nova itself counts only instances already recorded on the host, so the
instances of one multi-create request do not see each other and a
soft-anti-affinity group can land on one host; counting earlier picks here
is deliberate.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import ClassVar

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, GroupPolicy, IntArray
from scheduling.weighers.base import Weigher

log = logging.getLogger(__name__)


def _members_on(ctx: Context, rows: IntArray, policy: GroupPolicy) -> FloatArray:
    group = ctx.request.group_id
    if group is None or ctx.request.group_policy != policy:
        return np.zeros(len(rows), dtype=np.float64)
    picks = Counter(ctx.picked)
    providers = ctx.snapshot.providers
    return np.fromiter(
        (providers[int(r)].groups.get(group, 0) + picks[int(r)] for r in rows),
        dtype=np.float64,
        count=len(rows),
    )


def _warn_if_negative(weigher: Weigher, opposite: str) -> None:
    if weigher.multiplier < 0:
        log.warning(
            "%s: a negative multiplier (%s) turns it into %s; use the other weigher instead",
            weigher.name,
            weigher.multiplier,
            opposite,
        )


class ServerGroupSoftAffinityWeigher(Weigher):
    name: ClassVar[str] = "ServerGroupSoftAffinityWeigher"
    multiplier_key: ClassVar[str] = "soft_affinity_weight_multiplier"

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier)
        _warn_if_negative(self, "soft anti-affinity")

    def idle(self, ctx: Context) -> bool:
        return ctx.request.group_policy != "soft-affinity" or ctx.request.group_id is None

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        return _members_on(ctx, rows, "soft-affinity")


class ServerGroupSoftAntiAffinityWeigher(Weigher):
    name: ClassVar[str] = "ServerGroupSoftAntiAffinityWeigher"
    multiplier_key: ClassVar[str] = "soft_anti_affinity_weight_multiplier"

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier)
        _warn_if_negative(self, "soft affinity")

    def idle(self, ctx: Context) -> bool:
        return ctx.request.group_policy != "soft-anti-affinity" or ctx.request.group_id is None

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        return -_members_on(ctx, rows, "soft-anti-affinity")
