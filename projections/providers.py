"""Provider events: registration, retirement, inventory, state and metadata,
descriptions and metrics reports."""

from __future__ import annotations

from typing import TypeVar

from ledger.partitioner import partition_for
from projections.aggregates import effective_layout, over_capacity, relayout
from projections.emitter import Emitter, missing_provider
from projections.state import EMPTY_LAYOUT, Description, Metrics, PartitionState, ProviderState
from projections.topology import topology_reasons
from schemas.events import (
    AggregatesSet,
    InventorySet,
    MetricsReported,
    ProviderDescribed,
    ProviderRegistered,
    ProviderRetired,
    ProviderStateSet,
    TraitsSet,
)
from schemas.outcomes import Code, Kind, Reason


def provider_event(
    state: PartitionState,
    event: ProviderRegistered
    | ProviderRetired
    | InventorySet
    | ProviderStateSet
    | TraitsSet
    | AggregatesSet,
    out: Emitter,
) -> None:
    pid = event.provider_id
    provider = state.providers.get(pid)
    if isinstance(event, ProviderRegistered):
        _register(state, event, provider, out)
        return
    if provider is None:
        out.emit(Kind.REJECTED, pid, (missing_provider(state, pid),))
        return
    if isinstance(event, ProviderRetired):
        if provider.active:
            reason = Reason(
                Code.PROVIDER_IN_USE, pid, detail=f"{provider.active} active reservations"
            )
            out.emit(Kind.REJECTED, pid, (reason,))
            return
        del state.providers[pid]
    elif isinstance(event, InventorySet):
        if not _set_inventory(state, provider, event, out):
            return
    elif isinstance(event, ProviderStateSet):
        provider.state = event.state
    elif isinstance(event, TraitsSet):
        provider.traits = event.traits
    elif not _set_aggregates(state, provider, event, out):
        return
    state.reshaped.add(pid)
    out.emit(Kind.APPLIED, pid)


def described(state: PartitionState, event: ProviderDescribed, out: Emitter) -> None:
    """Change the fields the description gives or unsets; an unknown
    provider's is a no-op that says so (its agent may run before it is
    registered, or after it retired)."""
    pid = event.provider_id
    provider = state.providers.get(pid)
    if provider is None:
        out.emit(Kind.NOOP, pid, (missing_provider(state, pid),))
        return
    held = provider.description
    unset = event.unset
    cells = _field(event.numa_cells, held.numa_cells, "numa_cells" in unset) or ()
    devices = _field(event.pci_devices, held.pci_devices, "pci_devices" in unset) or ()
    texts: tuple[str, str] | None = (held.numa_cells_json, held.pci_devices_json)
    if cells is not held.numa_cells or devices is not held.pci_devices:
        reasons = topology_reasons(
            pid, provider.topology_use, (held.numa_cells, held.pci_devices), (cells, devices)
        )
        if reasons:
            out.emit(Kind.REJECTED, pid, tuple(reasons))
            return
        texts = None  # made anew from the cells and devices
    provider.description = Description(
        _field(event.availability_zone, held.availability_zone, "availability_zone" in unset),
        _field(event.host, held.host, "host" in unset),
        _field(event.host_ip, held.host_ip, "host_ip" in unset),
        _field(event.capabilities, held.capabilities, "capabilities" in unset),
        _field(event.metadata, held.metadata, "metadata" in unset),
        cells,
        devices,
        texts,
    )
    state.reshaped.add(pid)
    out.emit(Kind.APPLIED, pid)


_T = TypeVar("_T")


def _field(given: _T | None, held: _T | None, unset: bool) -> _T | None:
    """A description's field after an event that gives it, unsets it, or neither."""
    if unset:
        return None
    return held if given is None else given


def metrics_reported(state: PartitionState, event: MetricsReported, out: Emitter) -> None:
    """Take a provider's report unless the metrics held are from a later one.
    Only the provider's metrics row changes in the view (``metered``)."""
    pid = event.provider_id
    provider = state.providers.get(pid)
    if provider is None:
        out.emit(Kind.NOOP, pid, (missing_provider(state, pid),))
        return
    held = provider.metrics
    at_ms = event.ts_ms
    if held.at_ms is not None and at_ms < held.at_ms:
        reason = Reason(Code.OLDER_REPORT, pid, detail=f"metrics held are from {held.at_ms}")
        out.emit(Kind.NOOP, pid, (reason,))
        return
    values = event.metrics
    io_ops = event.num_io_ops
    failures = event.build_failures
    provider.metrics = Metrics(
        held.values if values is None else values,
        at_ms,
        held.num_io_ops if io_ops is None else io_ops,
        held.build_failures if failures is None else failures,
    )
    state.metered.add(pid)
    out.emit(Kind.APPLIED, pid)


def _register(
    state: PartitionState,
    event: ProviderRegistered,
    provider: ProviderState | None,
    out: Emitter,
) -> None:
    pid = event.provider_id
    if provider is not None:
        if provider.name == event.name:
            out.emit(Kind.NOOP, pid, (Reason(Code.ALREADY_REGISTERED, pid),))
            return
        provider.name = event.name
        state.reshaped.add(pid)
    else:
        home = partition_for(pid.encode(), state.partitions)
        if home != state.partition:
            out.emit(Kind.REJECTED, pid, (missing_provider(state, pid),))
            return
        state.providers[pid] = ProviderState(pid, event.name, layout=EMPTY_LAYOUT)
        state.reshaped.add(pid)
    out.emit(Kind.APPLIED, pid)


def _set_aggregates(
    state: PartitionState, provider: ProviderState, event: AggregatesSet, out: Emitter
) -> bool:
    """Replace the provider's aggregates, unless the allocation ratios they
    set would leave it below what it holds."""
    before = provider.aggregates
    provider.aggregates = event.aggregates
    layout = effective_layout(state, provider, provider.own)
    reasons = over_capacity(provider, layout)
    if reasons:
        provider.aggregates = before
        out.emit(Kind.REJECTED, provider.provider_id, tuple(reasons))
        return False
    relayout(state, provider, layout)
    return True


def _set_inventory(
    state: PartitionState, provider: ProviderState, event: InventorySet, out: Emitter
) -> bool:
    own = state.layout_for(event.inventories)
    layout = effective_layout(state, provider, own)
    old = provider.layout
    reasons = over_capacity(provider, layout)
    if reasons:
        out.emit(Kind.REJECTED, provider.provider_id, tuple(reasons))
        return False
    held = [0] * len(layout.classes)
    consumed = [0] * len(layout.classes)
    for i, rc in enumerate(old.classes):
        j = layout.index.get(rc)
        if j is not None:
            held[j] = provider.held[i]
            consumed[j] = provider.consumed[i]
    provider.own = own
    provider.layout = layout
    provider.held = held
    provider.consumed = consumed
    return True
