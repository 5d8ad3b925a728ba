"""Terse builders for events, and helpers to run them through the projector.

Every builder numbers its event ids automatically (``e1``, ``e2``, ...) unless
``event_id`` is given; the numbering is global to the process, which is all a
test needs (ids only have to be unique within one run).

Inventories are given per resource class as keyword arguments::

    inventory("n1", VCPU=(8, 2.0), MEMORY_MB=4096, DISK_GB={"total": 100, "reserved": 10})

an ``int`` is a total, a ``(total, allocation_ratio)`` or ``(total,
allocation_ratio, reserved)`` tuple the usual shorthand, and a ``dict`` (or an
:class:`Inventory`) anything else.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from projections.projector import apply
from projections.state import PartitionState
from schemas.codec import validate_event
from schemas.events import (
    AggregatesSet,
    Claim,
    ClaimItem,
    Consume,
    Event,
    Inventory,
    InventorySet,
    MetricsReported,
    ProviderDescribed,
    ProviderRegistered,
    ProviderRetired,
    ProviderStateName,
    ProviderStateSet,
    Release,
    Renew,
    Tick,
    TraitsSet,
)
from schemas.outcomes import Outcome

LEASE_MS = 1000
"""The builders' default lease (shorter than the schema's, to keep tests terse)."""

InventorySpec = int | tuple[int, float] | tuple[int, float, int] | Mapping[str, Any] | Inventory

_ids = itertools.count(1)


def next_id() -> str:
    """A fresh event id."""
    return f"e{next(_ids)}"


def _eid(event_id: str | None) -> str:
    return event_id if event_id is not None else next_id()


def inv(spec: InventorySpec) -> Inventory:
    """One :class:`Inventory` from the shorthand described in the module docstring."""
    if isinstance(spec, Inventory):
        return spec
    if isinstance(spec, int):
        return Inventory(total=spec)
    if isinstance(spec, tuple):
        if len(spec) == 2:
            total, ratio = spec
            return Inventory(total=total, allocation_ratio=float(ratio))
        total, ratio, reserved = spec
        return Inventory(total=total, allocation_ratio=float(ratio), reserved=reserved)
    data = dict(spec)
    if "allocation_ratio" in data:
        data["allocation_ratio"] = float(data["allocation_ratio"])
    return Inventory(**data)


# --- provider events -------------------------------------------------------


def register(
    pid: str, name: str | None = None, *, ts: int = 0, event_id: str | None = None
) -> ProviderRegistered:
    return ProviderRegistered(
        event_id=_eid(event_id),
        ts_ms=ts,
        partition_key=pid,
        provider_id=pid,
        name=name if name is not None else pid,
    )


def retire(pid: str, *, ts: int = 0, event_id: str | None = None) -> ProviderRetired:
    return ProviderRetired(event_id=_eid(event_id), ts_ms=ts, partition_key=pid, provider_id=pid)


def inventory(
    pid: str,
    inventories: Mapping[str, InventorySpec] | None = None,
    *,
    ts: int = 0,
    event_id: str | None = None,
    **classes: InventorySpec,
) -> InventorySet:
    """The provider's whole inventory, from a mapping and/or keyword arguments."""
    specs: dict[str, InventorySpec] = dict(inventories or {})
    specs.update(classes)
    return InventorySet(
        event_id=_eid(event_id),
        ts_ms=ts,
        partition_key=pid,
        provider_id=pid,
        inventories={rc: inv(spec) for rc, spec in specs.items()},
    )


def set_state(
    pid: str, state: ProviderStateName, *, ts: int = 0, event_id: str | None = None
) -> ProviderStateSet:
    return ProviderStateSet(
        event_id=_eid(event_id), ts_ms=ts, partition_key=pid, provider_id=pid, state=state
    )


def traits(pid: str, *names: str, ts: int = 0, event_id: str | None = None) -> TraitsSet:
    return TraitsSet(
        event_id=_eid(event_id),
        ts_ms=ts,
        partition_key=pid,
        provider_id=pid,
        traits=frozenset(names),
    )


def aggregates(pid: str, *names: str, ts: int = 0, event_id: str | None = None) -> AggregatesSet:
    return AggregatesSet(
        event_id=_eid(event_id),
        ts_ms=ts,
        partition_key=pid,
        provider_id=pid,
        aggregates=frozenset(names),
    )


def describe(
    pid: str, *, ts: int = 0, event_id: str | None = None, **fields: Any
) -> ProviderDescribed:
    """``describe("n1", availability_zone="az1", capabilities={...}, unset=["host"])``."""
    if "unset" in fields:
        fields["unset"] = frozenset(fields["unset"])
    return ProviderDescribed(
        event_id=_eid(event_id), ts_ms=ts, partition_key=pid, provider_id=pid, **fields
    )


def topology(
    pid: str, *, ts: int = 0, event_id: str | None = None, **fields: Any
) -> ProviderDescribed:
    """A description as a client gives it, lists and mappings validated as
    the edge does: ``topology("n1", numa_cells=[{"cell_id": 0, ...}])``."""
    event = validate_event(
        {
            "type": "provider_described",
            "event_id": _eid(event_id),
            "ts_ms": ts,
            "partition_key": pid,
            "provider_id": pid,
            **fields,
        }
    )
    assert isinstance(event, ProviderDescribed)
    return event


def report(
    pid: str,
    metrics: Mapping[str, float] | None = None,
    *,
    ts: int = 0,
    io_ops: int | None = None,
    build_failures: int | None = None,
    event_id: str | None = None,
) -> MetricsReported:
    """A metrics report as of ``ts``: ``report("n1", {"cpu.percent": 12.5}, ts=10)``."""
    return MetricsReported(
        event_id=_eid(event_id),
        ts_ms=ts,
        partition_key=pid,
        provider_id=pid,
        metrics=None if metrics is None else dict(metrics),
        num_io_ops=io_ops,
        build_failures=build_failures,
    )


def provider(
    pid: str,
    inventories: Mapping[str, InventorySpec] | None = None,
    *,
    ts: int = 0,
    **classes: InventorySpec,
) -> list[Event]:
    """Register a provider and set its inventory: two events."""
    specs: dict[str, InventorySpec] = dict(inventories or {})
    specs.update(classes)
    return [register(pid, ts=ts), inventory(pid, specs, ts=ts)]


# --- reservation events ----------------------------------------------------


def claim_items(
    rid: str,
    items: Mapping[str, Mapping[str, int]] | Sequence[tuple[str, Mapping[str, int]]],
    *,
    ts: int = 0,
    lease_ms: int = LEASE_MS,
    group: str | None = None,
    tags: Iterable[str] = (),
    with_tags: Iterable[str] = (),
    without_tags: Iterable[str] = (),
    consumer: str | None = None,
    project: str = "proj",
    event_id: str | None = None,
) -> Claim:
    """A claim of several items: ``{provider_id: {resource_class: amount}}``."""
    pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
    claim_list = tuple(
        ClaimItem(provider_id=pid, resources=dict(resources)) for pid, resources in pairs
    )
    return Claim(
        event_id=_eid(event_id),
        ts_ms=ts,
        partition_key=claim_list[0].provider_id,
        reservation_id=rid,
        consumer_id=consumer if consumer is not None else f"c-{rid}",
        project_id=project,
        items=claim_list,
        lease_ms=lease_ms,
        anti_affinity_group=group,
        tags=frozenset(tags),
        require_with_tags=frozenset(with_tags),
        require_without_tags=frozenset(without_tags),
    )


def claim(
    rid: str,
    pid: str,
    *,
    ts: int = 0,
    lease_ms: int = LEASE_MS,
    group: str | None = None,
    tags: Iterable[str] = (),
    with_tags: Iterable[str] = (),
    without_tags: Iterable[str] = (),
    consumer: str | None = None,
    project: str = "proj",
    event_id: str | None = None,
    **resources: int,
) -> Claim:
    """A single-item claim: ``claim("r1", "n1", ts=5, VCPU=2, MEMORY_MB=512)``."""
    return claim_items(
        rid,
        {pid: resources},
        ts=ts,
        lease_ms=lease_ms,
        group=group,
        tags=tags,
        with_tags=with_tags,
        without_tags=without_tags,
        consumer=consumer,
        project=project,
        event_id=event_id,
    )


def consume(rid: str, *, ts: int = 0, event_id: str | None = None) -> Consume:
    return Consume(event_id=_eid(event_id), ts_ms=ts, partition_key=rid, reservation_id=rid)


def release(rid: str, *, ts: int = 0, event_id: str | None = None) -> Release:
    return Release(event_id=_eid(event_id), ts_ms=ts, partition_key=rid, reservation_id=rid)


def renew(rid: str, lease_ms: int = LEASE_MS, *, ts: int = 0, event_id: str | None = None) -> Renew:
    return Renew(
        event_id=_eid(event_id),
        ts_ms=ts,
        partition_key=rid,
        reservation_id=rid,
        lease_ms=lease_ms,
    )


def tick(ts: int, *, event_id: str | None = None) -> Tick:
    return Tick(event_id=_eid(event_id), ts_ms=ts, partition_key="tick")


def with_ts(event: Event, ts: int, event_id: str | None = None) -> Event:
    """A copy of ``event`` at another time, under a fresh event id."""
    copy: Event = event.model_copy(update={"ts_ms": ts, "event_id": _eid(event_id)})
    return copy


# --- running ---------------------------------------------------------------


def fresh_state(partition: int = 0, partitions: int = 1) -> PartitionState:
    return PartitionState(partition, partitions)


def run(
    events: Iterable[Event], state: PartitionState | None = None, first_offset: int = 0
) -> list[list[Outcome]]:
    """Apply ``events`` at consecutive offsets; the outcomes of each record."""
    target = state if state is not None else fresh_state()
    return [apply(target, first_offset + n, event) for n, event in enumerate(events)]


def run_flat(events: Iterable[Event], state: PartitionState | None = None) -> list[Outcome]:
    return [outcome for outcomes in run(events, state) for outcome in outcomes]


def brief(outcome: Outcome) -> str:
    """One outcome in one line: ``kind subject [until T] [CODE@CLASS=requested/available]``,
    e.g. ``accepted r1 until 1000`` or ``rejected r2 INSUFFICIENT_CAPACITY@VCPU=5/4``."""
    words = [outcome.kind, outcome.subject]
    if outcome.expires_at_ms is not None:
        words.append(f"until {outcome.expires_at_ms}")
    for reason in outcome.reasons:
        word = reason.code.name
        if reason.resource_class is not None:
            word += f"@{reason.resource_class}"
        if reason.requested is not None:
            word += f"={reason.requested}/{reason.available}"
        words.append(word)
    return " ".join(words)


def briefs(outcomes: Iterable[Outcome]) -> str:
    """A record's outcomes as ``brief`` lines joined by ``" | "``."""
    return " | ".join(brief(outcome) for outcome in outcomes)
