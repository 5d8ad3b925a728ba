"""Whether a provider may take a new description of its NUMA cells and PCI
devices, given what it holds.

The description's own consistency (a CPU in two cells, a VF without its PF)
is checked at the edge by ``schemas/topology.py``. What only the writer
knows is checked here: the cells and devices held together with those
given (one may change without the other), and what reservations hold of
them (``ProviderState.topology_use``), which a description may not take
away: a device held stays, with its type, parent and cell; a pinned CPU
stays dedicated in its cell; a cell keeps at least the huge pages held; a
cell whose guests hold memory or floating vCPUs stays described (its
memory or shared CPUs may shrink: over-subscribed, as a lowered allocation
ratio may leave them).
"""

from __future__ import annotations

from collections.abc import Sequence

from projections.state import TopologyUse
from schemas.outcomes import Code, Reason
from schemas.topology import NumaCell, PciDevice, cells_missing


def topology_reasons(
    provider_id: str,
    use: TopologyUse | None,
    held: tuple[Sequence[NumaCell], Sequence[PciDevice]],
    given: tuple[Sequence[NumaCell], Sequence[PciDevice]],
) -> list[Reason]:
    """Why the provider, described with ``held`` cells and devices, cannot
    be described with ``given`` ones (as they would be after the event), in
    order; empty if it can."""
    cells, devices = given
    reasons = [
        Reason(Code.NUMA_CELL_NOT_DESCRIBED, provider_id, detail=line)
        for line in cells_missing(cells, devices)
    ]
    if use is not None:
        reasons.extend(
            Reason(Code.TOPOLOGY_IN_USE, provider_id, detail=line)
            for line in _devices_taken(use, held[1], devices)
            + _cpus_taken(use, held[0], cells)
            + _pages_taken(use, cells)
            + _cells_taken(use, cells)
        )
    return reasons


def _devices_taken(
    use: TopologyUse, held: Sequence[PciDevice], devices: Sequence[PciDevice]
) -> list[str]:
    """A device held must stay the device its holder was given: the same
    type, parent and NUMA cell (its tags or network may change)."""
    before = {d.address: d for d in held}
    after = {d.address: d for d in devices}
    lines = []
    for address, holder in sorted(use.devices.items()):
        now = after.get(address)
        if now is None:
            lines.append(f"device {address} is held by {holder}: it cannot be removed")
        elif address in before and _identity(before[address]) != _identity(now):
            lines.append(
                f"device {address} is held by {holder}: its type, parent and cell cannot change"
            )
    return lines


def _identity(device: PciDevice) -> tuple[str, str | None, int | None]:
    return (device.device_type, device.parent_address, device.numa_node)


def _cpus_taken(use: TopologyUse, held: Sequence[NumaCell], cells: Sequence[NumaCell]) -> list[str]:
    """A pinned CPU must stay dedicated, in the cell it was pinned in."""
    was = {cpu: cell.cell_id for cell in held for cpu in cell.cpus}
    dedicated = {cpu: cell.cell_id for cell in cells for cpu in cell.dedicated}
    return [
        f"CPU {cpu} is pinned by {holder}: it must stay dedicated in cell {was.get(cpu)}"
        for cpu, holder in sorted(use.cpus.items())
        if cpu not in dedicated or dedicated[cpu] != was.get(cpu, dedicated[cpu])
    ]


def _pages_taken(use: TopologyUse, cells: Sequence[NumaCell]) -> list[str]:
    """A cell keeps at least the huge pages of each size held."""
    totals = {(c.cell_id, p.size_kb): p.total for c in cells for p in c.huge_pages}
    lines = []
    for (cell_id, size_kb), count in sorted(use.pages.items()):
        total = totals.get((cell_id, size_kb), 0)
        if count > total:
            lines.append(
                f"cell {cell_id} has {count} pages of {size_kb} KiB held: it cannot have {total}"
            )
    return lines


def _cells_taken(use: TopologyUse, cells: Sequence[NumaCell]) -> list[str]:
    """A cell whose guests hold memory or floating vCPUs stays described."""
    known = {c.cell_id for c in cells}
    held = sorted(set(use.memory) | set(use.vcpus))
    return [
        f"cell {cell_id} holds {use.memory.get(cell_id, 0)} MB and "
        f"{use.vcpus.get(cell_id, 0)} floating vCPUs of guests: it cannot be removed"
        for cell_id in held
        if cell_id not in known
    ]
