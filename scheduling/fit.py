"""The fit a claim carries: what a request takes of the NUMA cells and PCI
devices of the provider the engine picked.

The engine's NUMATopologyFilter and PciPassthroughFilter judged that the
request fits the provider's free cells and devices; here the same fitting
(``numa_fit``, ``device_fit``) names what it takes: the host cell of each
guest cell, the CPUs it pins, the huge pages and the device addresses. The
scheduler puts it in the claim (``schemas.topology.TopologyFit``) and the
partition's writer holds exactly that or refuses the claim.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduling.engine import Engine
from scheduling.filters.base import HostFilter
from scheduling.filters.numa_topology import NUMATopologyFilter, numa_fit
from scheduling.filters.pci_passthrough import PciPassthroughFilter, choose, near_fit
from scheduling.model import Request, Snapshot
from scheduling.topology import HostCell, HostDevice, without
from schemas.topology import CellFit, TopologyFit


def _filters(engine: Engine) -> list[HostFilter]:
    return [*engine.once, *engine.each_pick]


def fits_topology(engine: Engine) -> bool:
    """Whether the engine fits NUMA cells or PCI devices at all."""
    return any(isinstance(f, NUMATopologyFilter | PciPassthroughFilter) for f in _filters(engine))


def _ratio(snapshot: Snapshot, row: int, name: str) -> float:
    classes = snapshot.classes
    if name not in classes:
        return 1.0
    return float(snapshot.allocation_ratio[row, classes.index(name)])


def claim_fit(
    engine: Engine,
    snapshot: Snapshot,
    row: int,
    request: Request,
    also: Sequence[TopologyFit] = (),
) -> TopologyFit | str | None:
    """What ``request`` takes of the provider at ``row`` (None: nothing,
    it asks for no NUMA topology and no device), or why it no longer fits
    once the fits in ``also`` (the caller's own claims the snapshot does
    not show yet) are taken too. Devices that must be near the guest's
    cells (a PCI NUMA affinity policy) are chosen with the host cells
    (``near_fit``), and the guest's cells go on those cells."""
    numa: NUMATopologyFilter | None = None
    pci: PciPassthroughFilter | None = None
    for f in _filters(engine):
        if isinstance(f, NUMATopologyFilter):
            numa = f
        elif isinstance(f, PciPassthroughFilter):
            pci = f
    topology = numa.topology(request) if numa is not None and numa.applies(request) else None
    wants, near = pci.wants(request) if pci is not None and pci.applies(request) else ([], None)
    if topology is None and not wants:
        return None
    provider = snapshot.providers[row]
    cells, devices = taken(provider.numa_cells, provider.pci_devices, also)
    ratios = _ratio(snapshot, row, "VCPU"), _ratio(snapshot, row, "MEMORY_MB")
    chosen: list[int] | None = None
    addresses: tuple[str, ...] = ()
    if wants:
        if near is not None and len(near.cells) <= len(cells):
            found = near_fit(wants, devices, cells, near, ratios)
            if found is None:
                return "the guest's cells fit no set of host cells"
            if isinstance(found, str):
                return found
            placed, addresses = found
            if topology is not None and topology == near:
                chosen = placed
        else:
            picked = choose(wants, devices, None)
            if isinstance(picked, str):
                return picked
            addresses = picked
    cell_part: tuple[CellFit, ...] = ()
    if topology is not None:
        fitted = numa_fit(cells, topology, *ratios, chosen=chosen)
        if isinstance(fitted, str):
            return fitted
        cell_part = fitted
    if not cell_part and not addresses:
        return None
    return TopologyFit(cells=cell_part, devices=tuple(sorted(addresses)))


def taken(
    cells: tuple[HostCell, ...], devices: tuple[HostDevice, ...], fits: Sequence[TopologyFit]
) -> tuple[tuple[HostCell, ...], tuple[HostDevice, ...]]:
    """``cells`` and ``devices`` once ``fits`` hold what they name."""
    if not fits:
        return cells, devices
    return without(
        cells,
        devices,
        {cpu for fit in fits for c in fit.cells for cpu in c.cpus},
        _pages(fits),
        {address for fit in fits for address in fit.devices},
        _cell_use(fits),
    )


def _cell_use(fits: Sequence[TopologyFit]) -> tuple[dict[int, int], dict[int, int]]:
    """The small-page memory and floating vCPUs ``fits`` hold, by host cell."""
    memory: dict[int, int] = {}
    vcpus: dict[int, int] = {}
    for fit in fits:
        for c in fit.cells:
            if c.memory_mb:
                memory[c.host_cell] = memory.get(c.host_cell, 0) + c.memory_mb
            if c.vcpus:
                vcpus[c.host_cell] = vcpus.get(c.host_cell, 0) + c.vcpus
    return memory, vcpus


def _pages(fits: Sequence[TopologyFit]) -> dict[tuple[int, int], int]:
    pages: dict[tuple[int, int], int] = {}
    for fit in fits:
        for c in fit.cells:
            for p in c.pages:
                key = (c.host_cell, p.size_kb)
                pages[key] = pages.get(key, 0) + p.count
    return pages
