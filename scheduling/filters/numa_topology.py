"""Nova's NUMATopologyFilter: the guest's NUMA cells fitted exactly onto the
provider's host cells.

Each guest cell takes a host cell of its own (Nova tries the permutations
of host cells; since one guest cell's fit on a host cell does not depend on
the others, a bipartite matching finds the same answer without trying them
all). A guest cell fits a host cell when:

- pinned (``hw:cpu_policy=dedicated``; for ``mixed``, the vCPUs of
  ``hw:cpu_dedicated_mask``): no more than the cell has dedicated CPUs,
  never over-subscribed; with ``hw:cpu_thread_policy=require`` the cell
  has hardware thread siblings, with ``isolate`` it has none (Nova's
  documented meaning: hosts with hardware threads required, or forbidden;
  ``prefer``, the default, takes either);
- floating (``shared``, or ``mixed``'s other vCPUs): no more than the cell
  has shared CPUs, and with the floating vCPUs the cell's other guests hold,
  within its shared CPUs times the provider's VCPU allocation ratio;
- with a huge page size: the pages of that size cover its memory
  (``large``: some huge page size does, ``any``: huge or small), never
  over-subscribed; in small pages (no page size, ``small``, or ``any``
  falling back to them): its memory is within the cell's small pages (its
  memory less its huge pages), and with the memory the cell's other guests
  hold there, within them times the MEMORY_MB allocation ratio.

Judged against the snapshot's cells less what earlier claims hold of them
(their pinned CPUs, huge pages, small-page memory and floating vCPUs,
``scheduling.topology.free_in``), with the limits the writer judges by
(``schemas.topology.cell_room_lack``); the provider-wide usage stays the
ResourceFilter's to judge.

The same fitting gives the claim its fit (:func:`numa_fit`): the host cell
of each guest cell, the dedicated CPUs it pins there (the lowest free ones),
the huge pages or the small-page memory it takes and its floating vCPUs,
which the partition's writer holds or refuses (``projections/fitting.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduling.filters.base import Context, HostFilter
from scheduling.model import BoolArray, FloatArray, IntArray, Request
from scheduling.topology import HostCell, codes_of, spread
from schemas.guest_topology import (
    SMALL_PAGE_KB,
    GuestCell,
    GuestTopology,
    PageSize,
    asks_numa,
    guest_topology,
)
from schemas.topology import CellFit, PageCount, cell_limit, cell_room_lack


def _ratio(ctx: Context, row: int, name: str) -> float:
    classes = ctx.snapshot.classes
    return (
        float(ctx.snapshot.allocation_ratio[row, classes.index(name)]) if name in classes else 1.0
    )


def page_choice(host: HostCell, guest: GuestCell, size: PageSize) -> int | str:
    """The page size (KiB) that backs the guest cell's memory on the cell,
    the largest that does for ``large`` and ``any``; or why none does."""
    huge = {kb: pages for kb, pages in host.huge_pages.items() if kb > SMALL_PAGE_KB}
    small_mb = host.small_mb
    sizes: list[int]
    if size == "small":
        sizes = [SMALL_PAGE_KB]
    elif size == "large":
        sizes = sorted(huge, reverse=True)
    elif size == "any":
        sizes = [*sorted(huge, reverse=True), SMALL_PAGE_KB]
    else:
        assert isinstance(size, int)
        sizes = [size]
    for kb in sizes:
        have = small_mb if kb == SMALL_PAGE_KB else huge.get(kb, 0) * kb // 1024
        if guest.memory_mb * 1024 % kb == 0 and guest.memory_mb <= have:
            return kb
    if not sizes:
        return "no huge pages"
    shown = ", ".join(f"{kb} KiB" for kb in sizes)
    return f"not {guest.memory_mb} MB in pages of {shown}"


def threads_lack(host: HostCell, pinned: int, policy: str | None) -> str | None:
    """Why the cell cannot take ``pinned`` vCPUs under the thread policy
    (None: it can). Nova's documented meaning: ``require`` wants a host
    with hardware threads (SMT: the cell has thread siblings), ``isolate``
    forbids one, ``prefer`` (or none) takes either."""
    if pinned == 0 or policy in (None, "prefer"):
        return None
    threaded = host.siblings
    if policy == "require" and not threaded:
        return "no hardware thread siblings (thread policy require)"
    if policy == "isolate" and threaded:
        more = ", ..." if len(threaded) > 3 else ""
        shown = ", ".join("+".join(map(str, sorted(g))) for g in threaded[:3]) + more
        return f"hardware thread siblings {shown} (thread policy isolate)"
    return None


def cell_lack(
    host: HostCell, guest: GuestCell, topology: GuestTopology, cpu_ratio: float, ram_ratio: float
) -> str | None:
    """Why ``guest`` cannot take ``host`` (None: it fits)."""
    pinned = topology.pinned(guest)
    floating = len(guest.cpus) - pinned
    if pinned:
        if pinned > len(host.dedicated):
            said = "" if topology.dedicated else " pinned"
            return f"{len(host.dedicated)} dedicated CPUs, wanted {pinned}{said}"
        threads = threads_lack(host, pinned, topology.thread_policy)
        if threads is not None:
            return threads
    if floating:
        shared = len(host.shared)
        if cell_room_lack(floating, host.vcpus_used, shared, cpu_ratio):
            said = "" if not pinned else " floating"
            return _room(host.vcpus_used, shared, cpu_ratio, "shared vCPUs", floating) + said
    if topology.page_size is not None:
        found = page_choice(host, guest, topology.page_size)
        if isinstance(found, str):
            return found
        if found > SMALL_PAGE_KB:
            return None
    used, small = host.memory_used_mb, host.small_mb
    if cell_room_lack(guest.memory_mb, used, small, ram_ratio):
        return _room(used, small, ram_ratio, "MB of small pages", guest.memory_mb)
    return None


def _room(used: int, have: int, ratio: float, what: str, wanted: int) -> str:
    """What a cell has left of its small pages or shared CPUs."""
    limit = cell_limit(have, ratio)
    if not used:
        return f"{min(have, int(limit))} {what}, wanted {wanted}"
    return f"{used} of {limit:g} {what} held, wanted {wanted}"


def matching(fits: Sequence[Sequence[int]], hosts: int) -> list[int] | None:
    """A host cell for each guest cell, each host cell used once, where
    ``fits[g]`` are the host cells (indexes) guest cell g fits; None if
    there is none (Kuhn's augmenting paths: a handful of cells)."""
    owner: list[int | None] = [None] * hosts

    def place(g: int, seen: set[int]) -> bool:
        for h in fits[g]:
            if h not in seen:
                seen.add(h)
                holder = owner[h]
                if holder is None or place(holder, seen):
                    owner[h] = g
                    return True
        return False

    if not all(place(g, set()) for g in range(len(fits))):
        return None
    chosen = [0] * len(fits)
    for h, g in enumerate(owner):
        if g is not None:
            chosen[g] = h
    return chosen


def cells_fit(
    hosts: Sequence[HostCell], topology: GuestTopology, cpu: float, ram: float
) -> list[int] | str:
    """The host cell (an index into ``hosts``) each guest cell goes on,
    each host cell used once; or why there is none."""
    if len(topology.cells) > len(hosts):
        return f"{len(topology.cells)} guest NUMA cells, provider has {len(hosts)}"
    fits: list[list[int]] = []
    for guest in topology.cells:
        lacks = [cell_lack(host, guest, topology, cpu, ram) for host in hosts]
        if all(lacks):
            said = "; ".join(
                f"host cell {h.cell_id} has {why}" for h, why in zip(hosts, lacks, strict=True)
            )
            return f"guest cell {guest.cell_id} fits no host cell: {said}"
        fits.append([i for i, why in enumerate(lacks) if why is None])
    chosen = matching(fits, len(hosts))
    if chosen is None:
        return "the guest cells fit, but not each on a host cell of its own"
    return chosen


def pinned_cpus(host: HostCell, count: int, thread_policy: str | None = None) -> tuple[int, ...]:
    """The ``count`` dedicated CPUs of ``host`` a guest cell pins: its
    lowest free ones (``host.dedicated`` is what is free); under
    ``hw:cpu_thread_policy=require``, the threads of whole free cores
    first, so the guest's vCPUs share cores as Nova pins them."""
    free = sorted(host.dedicated)
    if thread_policy == "require" and host.siblings:
        whole = [
            cpu
            for group in sorted(host.siblings, key=min)
            if group <= host.dedicated
            for cpu in sorted(group)
        ]
        taken = set(whole)
        free = whole + [cpu for cpu in free if cpu not in taken]
    return tuple(sorted(free[:count]))


def numa_fit(
    hosts: Sequence[HostCell],
    topology: GuestTopology,
    cpu: float,
    ram: float,
    chosen: Sequence[int] | None = None,
) -> tuple[CellFit, ...] | str:
    """The fit a claim carries: per guest cell its host cell (``chosen``,
    indexes into ``hosts``, when the PCI filter's fit chose them, else
    :func:`cells_fit`'s), the CPUs it pins there and the huge pages it
    takes; or why the guest does not fit."""
    if chosen is None:
        found = cells_fit(hosts, topology, cpu, ram)
        if isinstance(found, str):
            return found
        chosen = found
    out = []
    for guest, h in zip(topology.cells, chosen, strict=True):
        host = hosts[h]
        pages: tuple[PageCount, ...] = ()
        if topology.page_size is not None:
            kb = page_choice(host, guest, topology.page_size)
            assert isinstance(kb, int)  # the cell fits
            if kb > SMALL_PAGE_KB:
                pages = (PageCount(size_kb=kb, count=guest.memory_mb * 1024 // kb),)
        pinned = topology.pinned(guest)
        out.append(
            CellFit(
                guest_cell=guest.cell_id,
                host_cell=host.cell_id,
                cpus=pinned_cpus(host, pinned, topology.thread_policy) if pinned else (),
                pages=pages,
                memory_mb=0 if pages else guest.memory_mb,
                vcpus=len(guest.cpus) - pinned,
            )
        )
    return tuple(out)


class NUMATopologyFilter(HostFilter):
    """Providers whose NUMA cells can each take one of the guest's cells
    (``hw:numa_nodes``, ``hw:numa_cpus.N``, ``hw:numa_mem.N``,
    ``hw:cpu_policy``, ``hw:mem_page_size`` and their image properties):
    pinned CPUs and huge pages never over-subscribed, shared CPUs and memory
    per cell by the allocation ratios. A request with no NUMA topology
    passes everywhere."""

    name = "NUMATopologyFilter"
    cost = 20

    def __init__(self) -> None:
        self._memo: tuple[Request, GuestTopology | None] | None = None

    def applies(self, request: Request) -> bool:
        return asks_numa(request.extra_specs, request.image_properties)

    def topology(self, request: Request) -> GuestTopology | None:
        """The request's guest topology (the edge checked it parses)."""
        memo = self._memo
        if memo is not None and memo[0] is request:
            return memo[1]
        res = request.resources
        vcpus = res.get("VCPU", 0) + res.get("PCPU", 0)
        found = guest_topology(
            request.extra_specs, request.image_properties, vcpus, res.get("MEMORY_MB", 0)
        )
        self._memo = (request, found)
        return found

    def reject(self, ctx: Context, row: int) -> str | None:
        topology = self.topology(ctx.request)
        if topology is None:
            return None
        hosts = ctx.snapshot.providers[row].numa_cells
        if len(topology.cells) > len(hosts):
            return f"{len(topology.cells)} guest NUMA cells, provider has {len(hosts)}"
        ratios = _ratio(ctx, row, "VCPU"), _ratio(ctx, row, "MEMORY_MB")
        return self._fit(hosts, topology, *ratios)

    def _fit(
        self, hosts: Sequence[HostCell], topology: GuestTopology, cpu: float, ram: float
    ) -> str | None:
        found = cells_fit(hosts, topology, cpu, ram)
        return found if isinstance(found, str) else None

    def fit(self, ctx: Context, row: int) -> tuple[CellFit, ...] | str | None:
        """What the request takes of the provider's cells (None: it asks
        for no NUMA topology), or why it does not fit."""
        topology = self.topology(ctx.request)
        if topology is None:
            return None
        hosts = ctx.snapshot.providers[row].numa_cells
        ratios = _ratio(ctx, row, "VCPU"), _ratio(ctx, row, "MEMORY_MB")
        return numa_fit(hosts, topology, *ratios)

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        # providers of one hardware model (and with the same CPUs pinned)
        # share their cells' records, so each distinct (cells, ratios) is
        # fitted once per request, and the answers spread with NumPy
        topology = self.topology(ctx.request)
        if topology is None:
            return np.ones(len(rows), dtype=np.bool_)
        codes = codes_of(ctx.snapshot.providers)
        here = codes.cells[rows]
        cpu, ram = (_ratios(ctx, rows, name) for name in ("VCPU", "MEMORY_MB"))
        if _uniform(cpu) and _uniform(ram):
            c, r = (float(a[0]) if len(a) else 1.0 for a in (cpu, ram))
            models = codes.cell_models
            return spread(here, len(models), lambda k: self._fit(models[k], topology, c, r) is None)
        out = np.empty(len(rows), dtype=np.bool_)
        seen: dict[tuple[int, float, float], bool] = {}
        for i, (code, c, r) in enumerate(
            zip(here.tolist(), cpu.tolist(), ram.tolist(), strict=True)
        ):
            key = (code, c, r)
            found = seen.get(key)
            if found is None:
                found = seen[key] = self._fit(codes.cell_models[code], topology, c, r) is None
            out[i] = found
        return out


def _uniform(values: FloatArray) -> bool:
    return len(values) == 0 or bool((values == values[0]).all())


def _ratios(ctx: Context, rows: IntArray, name: str) -> FloatArray:
    classes = ctx.snapshot.classes
    if name not in classes:
        return np.ones(len(rows), dtype=np.float64)
    ratios: FloatArray = ctx.snapshot.allocation_ratio[rows, classes.index(name)]
    return ratios
