"""Aggregates in a partition: their metadata, their members, and the
allocation ratios they set, which change what a member's claims may take.

An aggregate spans partitions: the edge appends its definition to every
partition, and each writer keeps a copy and applies it to its own members
at that copy's place in its log, as it applies an inventory change. The
ratio rule is Nova's (AggregateCoreFilter and its kin), the one the
scheduler's ResourceFilter applies to the same metadata: the smallest of
the member aggregates' values of ``<class>_allocation_ratio`` (or
``cpu_``/``ram_``/``disk_allocation_ratio``) replaces the inventory's, and
any value that is not a positive finite number leaves the inventory's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from projections.emitter import Emitter, missing_provider
from projections.state import Layout, PartitionState, ProviderState
from schemas.events import (
    AggregateDefined,
    AggregateMemberAdded,
    AggregateMemberRemoved,
    Inventory,
)
from schemas.outcomes import Code, Kind, Reason

NOVA_RATIO_KEYS: Mapping[str, str] = {
    "VCPU": "cpu_allocation_ratio",
    "MEMORY_MB": "ram_allocation_ratio",
    "DISK_GB": "disk_allocation_ratio",
}
"""The names Nova's AggregateCore/Ram/DiskFilter read, besides ``<class>_allocation_ratio``."""


def ratio_keys(resource_class: str) -> tuple[str, ...]:
    """Aggregate metadata keys that override ``resource_class``'s allocation ratio."""
    generic = f"{resource_class.lower()}_allocation_ratio"
    nova = NOVA_RATIO_KEYS.get(resource_class)
    return (generic,) if nova is None else (generic, nova)


def ratio_override(values: Iterable[str]) -> float | None:
    """The smallest of the aggregates' ratios, or None to keep the inventory's.
    Nova casts every value before taking the minimum, so one undecodable
    value discards the whole override rather than just itself."""
    parsed: list[float] = []
    for raw in values:
        try:
            ratio = float(raw)
        except ValueError:
            return None
        if not math.isfinite(ratio) or ratio <= 0:
            return None
        parsed.append(ratio)
    return min(parsed) if parsed else None


def effective_layout(state: PartitionState, provider: ProviderState, own: Layout) -> Layout:
    """``own`` (the provider's inventory) with its aggregates' ratios."""
    if not provider.aggregates or not own.classes:
        return own
    metadata = [state.aggregates[a] for a in sorted(provider.aggregates) if a in state.aggregates]
    if not metadata:
        return own
    inventories: dict[str, Inventory] = {}
    overridden = False
    for rc, limits in zip(own.classes, own.limits, strict=True):
        values = {m[k] for m in metadata for k in ratio_keys(rc) if k in m}
        ratio = ratio_override(values)
        if ratio is not None and ratio != limits.allocation_ratio:
            overridden = True
        # model_construct: the numbers were validated as the inventory's; a
        # ratio an aggregate sets is Nova's to bound, not the event's
        inventories[rc] = Inventory.model_construct(
            total=limits.total,
            reserved=limits.reserved,
            min_unit=limits.min_unit,
            max_unit=limits.max_unit,
            step_size=limits.step_size,
            allocation_ratio=limits.allocation_ratio if ratio is None else ratio,
        )
    return state.layout_for(inventories) if overridden else own


def over_capacity(provider: ProviderState, layout: Layout) -> list[Reason]:
    """Per class, why ``layout`` would leave the provider below what it holds."""
    reasons: list[Reason] = []
    for i, rc in enumerate(provider.layout.classes):
        used = provider.held[i] + provider.consumed[i]
        j = layout.index.get(rc)
        capacity = layout.limits[j].capacity if j is not None else 0
        if used > capacity:
            reasons.append(
                Reason(
                    Code.INVENTORY_IN_USE,
                    provider.provider_id,
                    rc,
                    used,
                    capacity,
                    detail="new capacity is below what is held and consumed",
                )
            )
    return reasons


def relayout(state: PartitionState, provider: ProviderState, layout: Layout) -> None:
    """Give ``provider`` ``layout``, of the same classes as the one it has."""
    if layout is not provider.layout:
        provider.layout = layout
        state.reshaped.add(provider.provider_id)


def aggregate_defined(state: PartitionState, event: AggregateDefined, out: Emitter) -> None:
    """Keep this partition's copy of the aggregate, and apply its ratios to
    the members here. Capacity follows the ratios even below what a member
    holds (as Placement lets an allocation ratio fall): no claim fits there
    until enough is released, and the outcome names each such member."""
    aid = event.aggregate_id
    state.aggregates[aid] = dict(event.metadata)
    state.aggregates_touched.add(aid)
    reasons: list[Reason] = []
    for pid in sorted(state.providers):
        provider = state.providers[pid]
        if aid not in provider.aggregates:
            continue
        layout = effective_layout(state, provider, provider.own)
        reasons.extend(over_capacity(provider, layout))
        relayout(state, provider, layout)
    out.emit(Kind.APPLIED, aid, tuple(reasons))


def member_event(
    state: PartitionState, event: AggregateMemberAdded | AggregateMemberRemoved, out: Emitter
) -> None:
    """A provider joins or leaves an aggregate; refused, as an inventory
    change is, if the ratios it would then have leave it below what it holds."""
    pid, aid = event.provider_id, event.aggregate_id
    provider = state.providers.get(pid)
    if provider is None:
        out.emit(Kind.REJECTED, pid, (missing_provider(state, pid),))
        return
    joining = isinstance(event, AggregateMemberAdded)
    if joining and aid not in state.aggregates:
        detail = f"no definition of aggregate {aid} has reached partition {state.partition}"
        out.emit(Kind.REJECTED, pid, (Reason(Code.AGGREGATE_NOT_FOUND, pid, detail=detail),))
        return
    if joining == (aid in provider.aggregates):
        code = Code.ALREADY_MEMBER if joining else Code.NOT_A_MEMBER
        out.emit(Kind.NOOP, pid, (Reason(code, pid, detail=aid),))
        return
    before = provider.aggregates
    provider.aggregates = before | {aid} if joining else before - {aid}
    layout = effective_layout(state, provider, provider.own)
    reasons = over_capacity(provider, layout)
    if reasons:
        provider.aggregates = before
        out.emit(Kind.REJECTED, pid, tuple(reasons))
        return
    relayout(state, provider, layout)
    state.reshaped.add(pid)
    out.emit(Kind.APPLIED, pid)
