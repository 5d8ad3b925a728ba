"""A claim's fit: the NUMA cells, pinned CPUs, huge pages and PCI devices
of a provider it takes, checked and held by the partition's writer.

The scheduler fits a guest onto a snapshot of the provider
(``scheduling/filters/numa_topology.py``, ``pci_passthrough.py``) and the
claim carries the fit it chose (``schemas.topology.TopologyFit``). Here, in
log order, that fit is checked against the provider's description and what
earlier reservations hold (``ProviderState.topology_use``): every CPU must be
a dedicated CPU of its host cell and pinned by no one, every page size one
the cell has with enough pages left, the memory a guest cell takes of the
cell's small pages and its floating vCPUs within what the cell's other
guests leave of its small pages and shared CPUs times the provider's
allocation ratios (as the engine's NUMATopologyFilter judges them, by
``schemas.topology.cell_room_lack``), every device one the provider
describes and held by no one (nor its PF or one of its VFs). A claim whose
fit does not hold is rejected, naming what: ``TOPOLOGY_NOT_PROVIDED`` for
what the provider does not have, ``TOPOLOGY_TAKEN`` for what another
reservation holds (a race the scheduler lost: it retries).

Held with the reservation, given back exactly when it is released, expires
or is aborted; consuming keeps it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from projections.state import Fits, ProviderState, TopologyUse
from schemas.events import ClaimItem
from schemas.outcomes import Code, Reason
from schemas.topology import (
    CellFit,
    NumaCell,
    TopologyFit,
    cell_limit,
    cell_room_lack,
    small_memory_mb,
)

NO_FITS: Fits = ()


def fit_reasons(provider: ProviderState, fit: TopologyFit) -> list[Reason]:
    """Why ``provider`` cannot give ``fit`` now, in order; empty if it can."""
    pid = provider.provider_id
    use = provider.topology_use
    reasons: list[Reason] = []
    cells = {cell.cell_id: cell for cell in provider.description.numa_cells}
    for part in fit.cells:
        host = cells.get(part.host_cell)
        where = f"guest cell {part.guest_cell} on host cell {part.host_cell}"
        if host is None:
            reasons.append(
                Reason(
                    Code.TOPOLOGY_NOT_PROVIDED,
                    pid,
                    detail=f"{where}: the provider describes no cell {part.host_cell}",
                )
            )
            continue
        dedicated = set(host.dedicated)
        stray = [cpu for cpu in part.cpus if cpu not in dedicated]
        if stray:
            reasons.append(
                Reason(
                    Code.TOPOLOGY_NOT_PROVIDED,
                    pid,
                    detail=f"{where}: {_cpus(stray)} not among the cell's dedicated CPUs",
                )
            )
        if use is not None:
            pinned = [(cpu, use.cpus[cpu]) for cpu in part.cpus if cpu in use.cpus]
            if pinned:
                said = ", ".join(f"{cpu} by {rid}" for cpu, rid in pinned)
                reasons.append(
                    Reason(Code.TOPOLOGY_TAKEN, pid, detail=f"{where}: CPU pinned already: {said}")
                )
        totals = {p.size_kb: p.total for p in host.huge_pages}
        for pages in part.pages:
            total = totals.get(pages.size_kb)
            if total is None:
                reasons.append(
                    Reason(
                        Code.TOPOLOGY_NOT_PROVIDED,
                        pid,
                        detail=f"{where}: the cell has no pages of {pages.size_kb} KiB",
                    )
                )
                continue
            held = use.pages.get((part.host_cell, pages.size_kb), 0) if use is not None else 0
            if pages.count > total - held:
                reasons.append(
                    Reason(
                        Code.TOPOLOGY_TAKEN if pages.count <= total else Code.TOPOLOGY_NOT_PROVIDED,
                        pid,
                        None,
                        pages.count,
                        total - held,
                        f"{where}: {total - held} of its {total} pages of {pages.size_kb} KiB free",
                    )
                )
        if part.memory_mb or part.vcpus:
            reasons.extend(_room_reasons(provider, host, part, where))
    if fit.devices:
        reasons.extend(_device_reasons(provider, fit.devices, use))
    return reasons


def _ratio(provider: ProviderState, resource_class: str) -> float:
    """The provider's allocation ratio of a class, its aggregates' included
    (1.0 without the class), as the engine's snapshot has it."""
    layout = provider.layout
    i = layout.index.get(resource_class)
    return 1.0 if i is None else layout.limits[i].allocation_ratio


def _room_reasons(
    provider: ProviderState, host: NumaCell, part: CellFit, where: str
) -> list[Reason]:
    """Why the host cell's small pages or shared CPUs cannot take the guest
    cell's memory or floating vCPUs beside what its other guests hold."""
    use = provider.topology_use
    small = small_memory_mb(host.memory_mb, ((p.size_kb, p.total) for p in host.huge_pages))
    asks = (
        ("MEMORY_MB", part.memory_mb, small, use.memory if use else {}, "MB of small pages"),
        ("VCPU", part.vcpus, len(host.shared), use.vcpus if use else {}, "shared vCPUs"),
    )
    reasons = []
    for rc, wanted, have, held, what in asks:
        used = held.get(part.host_cell, 0)
        ratio = _ratio(provider, rc)
        if not wanted or not cell_room_lack(wanted, used, have, ratio):
            continue
        limit = cell_limit(have, ratio)
        alone = cell_room_lack(wanted, 0, have, ratio)
        left = max(0, int(limit) - used)
        reasons.append(
            Reason(
                Code.TOPOLOGY_NOT_PROVIDED if alone else Code.TOPOLOGY_TAKEN,
                provider.provider_id,
                rc,
                wanted,
                left,
                f"{where}: {used} of its {limit:g} {what} held, wanted {wanted}",
            )
        )
    return reasons


def _device_reasons(
    provider: ProviderState, addresses: Sequence[str], use: TopologyUse | None
) -> list[Reason]:
    pid = provider.provider_id
    described = {d.address: d for d in provider.description.pci_devices}
    reasons: list[Reason] = []
    named = set(addresses)
    for address in addresses:
        device = described.get(address)
        if device is None:
            reasons.append(
                Reason(
                    Code.TOPOLOGY_NOT_PROVIDED,
                    pid,
                    detail=f"device {address}: the provider describes no such device",
                )
            )
            continue
        if device.parent_address in named:
            reasons.append(
                Reason(
                    Code.TOPOLOGY_NOT_PROVIDED,
                    pid,
                    detail=f"device {address} and its PF {device.parent_address}: not both",
                )
            )
        if use is None:
            continue
        holder = use.devices.get(address)
        why = None
        if holder is not None:
            why = f"device {address} is held by {holder}"
        elif device.parent_address is not None and device.parent_address in use.devices:
            parent = device.parent_address
            why = f"device {address}: its PF {parent} is held by {use.devices[parent]}"
        elif device.device_type == "type-PF":
            vfs = sorted(
                (d.address, use.devices[d.address])
                for d in provider.description.pci_devices
                if d.parent_address == address and d.address in use.devices
            )
            if vfs:
                why = f"device {address}: its VF {vfs[0][0]} is held by {vfs[0][1]}"
        if why is not None:
            reasons.append(Reason(Code.TOPOLOGY_TAKEN, pid, detail=why))
    return reasons


def _cpus(cpus: Sequence[int]) -> str:
    return ("CPU " if len(cpus) == 1 else "CPUs ") + ",".join(str(cpu) for cpu in cpus)


def fits_of(items: Sequence[tuple[ProviderState, object]], specs: Sequence[ClaimItem]) -> Fits:
    """The fits a claim's items carry, with the providers they are on
    (``items`` in the order of ``specs``); empty for the common claim."""
    if len(specs) == 1:
        fit = specs[0].__dict__["fit"]
        return NO_FITS if fit is None else ((items[0][0], fit),)
    return tuple(
        (provider, spec.fit)
        for (provider, _), spec in zip(items, specs, strict=True)
        if spec.fit is not None
    )


def take_fit(provider: ProviderState, fit: TopologyFit, reservation_id: str) -> None:
    """Hold ``fit`` of ``provider`` for the reservation (checked before)."""
    use = provider.topology_use
    if use is None:
        use = provider.topology_use = TopologyUse()
    for part in fit.cells:
        for cpu in part.cpus:
            use.cpus[cpu] = reservation_id
        for pages in part.pages:
            key = (part.host_cell, pages.size_kb)
            use.pages[key] = use.pages.get(key, 0) + pages.count
        cell = part.host_cell
        if part.memory_mb:
            use.memory[cell] = use.memory.get(cell, 0) + part.memory_mb
        if part.vcpus:
            use.vcpus[cell] = use.vcpus.get(cell, 0) + part.vcpus
    for address in fit.devices:
        use.devices[address] = reservation_id


def give_fit(provider: ProviderState, fit: TopologyFit) -> None:
    """Give back exactly what :func:`take_fit` held. The use stays (empty),
    so the provider's row in the view is written empty, not left behind."""
    use = provider.topology_use
    assert use is not None
    for part in fit.cells:
        for cpu in part.cpus:
            del use.cpus[cpu]
        for pages in part.pages:
            key = (part.host_cell, pages.size_kb)
            left = use.pages[key] - pages.count
            if left:
                use.pages[key] = left
            else:
                del use.pages[key]
        _give(use.memory, part.host_cell, part.memory_mb)
        _give(use.vcpus, part.host_cell, part.vcpus)
    for address in fit.devices:
        del use.devices[address]


def _give(held: dict[int, int], cell: int, amount: int) -> None:
    """Give back ``amount`` of what ``held`` counts for ``cell``."""
    if amount:
        left = held[cell] - amount
        if left:
            held[cell] = left
        else:
            del held[cell]


def use_json(use: TopologyUse | None) -> str:
    """What a provider's reservations hold of its topology, as the view's
    ``topology_use`` column holds it: pinned CPUs and held devices with
    their reservation, huge pages held per (cell, size), small-page memory
    and floating vCPUs held per cell, each sorted (the last two left out
    when none are held, so a provider's text is what it was before they
    were counted)."""
    if use is None or not (use.cpus or use.devices or use.pages or use.memory or use.vcpus):
        return "{}"
    out: dict[str, object] = {}
    if use.cpus:
        out["cpus"] = sorted([cpu, rid] for cpu, rid in use.cpus.items())
    if use.devices:
        out["devices"] = sorted([address, rid] for address, rid in use.devices.items())
    if use.pages:
        out["pages"] = sorted([cell, size, count] for (cell, size), count in use.pages.items())
    if use.memory:
        out["memory"] = sorted([cell, mb] for cell, mb in use.memory.items())
    if use.vcpus:
        out["vcpus"] = sorted([cell, n] for cell, n in use.vcpus.items())
    return json.dumps(out)
