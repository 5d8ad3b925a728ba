"""A provider's NUMA cells and PCI devices as the engine reads them.

Slim frozen records made from the view's JSON columns (written by the
partition's writer from events ``schemas/topology.py`` validated), so a
snapshot of thousands of providers builds them without validating again.
Providers of one hardware model have the same text in those columns: each
distinct text is parsed once and its records shared (``cells_in``,
``devices_in``). CPU sets are frozensets, for the fitting the NUMA filter
does.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from schemas.topology import small_memory_mb


@dataclass(frozen=True, slots=True)
class HostCell:
    """One host NUMA cell: its CPUs, those for pinned guests (``dedicated``)
    and for floating ones (``shared``), its hardware-thread siblings, its
    memory, its huge pages (page size in KiB -> pages), the CPU socket
    it is on (None: not known), and what its guest cells hold of its small
    pages (``memory_used_mb``) and of its shared CPUs (``vcpus_used``)."""

    cell_id: int
    cpus: frozenset[int]
    dedicated: frozenset[int] = frozenset()
    shared: frozenset[int] = frozenset()
    siblings: tuple[frozenset[int], ...] = ()
    memory_mb: int = 0
    huge_pages: Mapping[int, int] = field(default_factory=dict)
    socket: int | None = None
    memory_used_mb: int = 0
    vcpus_used: int = 0

    @property
    def small_mb(self) -> int:
        """Its memory in small pages (less every huge page, held or not)."""
        return small_memory_mb(self.memory_mb, self.huge_pages.items())


@dataclass(frozen=True, slots=True)
class HostDevice:
    """One PCI device the provider can pass through."""

    address: str
    vendor_id: str
    product_id: str
    device_type: str = "type-PCI"  # type-PCI | type-PF | type-VF
    parent_address: str | None = None
    numa_node: int | None = None
    physical_network: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)


def cells_of(rows: Sequence[Mapping[str, Any]]) -> tuple[HostCell, ...]:
    """The view's ``numa_cells`` column as records."""
    return tuple(
        HostCell(
            cell_id=row["cell_id"],
            cpus=frozenset(row["cpus"]),
            dedicated=frozenset(row["dedicated"]),
            shared=frozenset(row["shared"]),
            siblings=tuple(frozenset(group) for group in row["siblings"]),
            memory_mb=row["memory_mb"],
            huge_pages={p["size_kb"]: p["total"] for p in row["huge_pages"]},
            socket=row.get("socket"),
        )
        for row in rows
    )


def devices_of(rows: Sequence[Mapping[str, Any]]) -> tuple[HostDevice, ...]:
    """The view's ``pci_devices`` column as records."""
    return tuple(
        HostDevice(
            address=row["address"],
            vendor_id=row["vendor_id"],
            product_id=row["product_id"],
            device_type=row["device_type"],
            parent_address=row["parent_address"],
            numa_node=row["numa_node"],
            physical_network=row["physical_network"],
            tags=row["tags"],
        )
        for row in rows
    )


_DISTINCT = 4096
"""Distinct topologies kept parsed: far more than a cloud's hardware models."""


@functools.lru_cache(maxsize=_DISTINCT)
def cells_in(text: str) -> tuple[HostCell, ...]:
    """The records of a ``numa_cells`` column's text, shared by every
    provider with the same text."""
    return cells_of(json.loads(text)) if text != "[]" else ()


@functools.lru_cache(maxsize=_DISTINCT)
def devices_in(text: str) -> tuple[HostDevice, ...]:
    """The records of a ``pci_devices`` column's text, shared likewise."""
    return devices_of(json.loads(text)) if text != "[]" else ()


NO_CELL_USE: tuple[Mapping[int, int], Mapping[int, int]] = ({}, {})


def without(
    cells: tuple[HostCell, ...],
    devices: tuple[HostDevice, ...],
    cpus: frozenset[int] | set[int],
    pages: Mapping[tuple[int, int], int],
    addresses: frozenset[str] | set[str],
    cell_use: tuple[Mapping[int, int], Mapping[int, int]] = NO_CELL_USE,
) -> tuple[tuple[HostCell, ...], tuple[HostDevice, ...]]:
    """The cells and devices as a new guest may have them, once ``cpus``
    are pinned, ``pages`` (by (cell id, size in KiB)) held, the small-page
    memory and floating vCPUs of ``cell_use`` (each by cell id) held and
    the devices at ``addresses`` given: a pinned CPU is no longer among its
    cell's dedicated ones, a cell counts only its free huge pages and adds
    the memory and vCPUs held to its ``memory_used_mb`` and ``vcpus_used``,
    and a device held is gone, with the VFs of a PF held and the PF of a VF
    held (as Nova's PCI tracker has it). The memory of the pages held goes
    with them, so the cell's small pages stay what they were."""
    memory, vcpus = cell_use
    if cpus or pages or memory or vcpus:
        cells = tuple(
            dataclasses.replace(
                c,
                dedicated=c.dedicated - cpus,
                memory_mb=c.memory_mb
                - sum(kb * pages.get((c.cell_id, kb), 0) for kb in c.huge_pages) // 1024,
                huge_pages={
                    kb: total - pages.get((c.cell_id, kb), 0) for kb, total in c.huge_pages.items()
                },
                memory_used_mb=c.memory_used_mb + memory.get(c.cell_id, 0),
                vcpus_used=c.vcpus_used + vcpus.get(c.cell_id, 0),
            )
            for c in cells
        )
    if addresses:
        parents = {d.parent_address for d in devices if d.address in addresses}
        devices = tuple(
            d
            for d in devices
            if d.address not in addresses
            and d.address not in parents
            and d.parent_address not in addresses
        )
    return cells, devices


@functools.lru_cache(maxsize=_DISTINCT)
def free_in(
    cells_text: str, devices_text: str, use_text: str
) -> tuple[tuple[HostCell, ...], tuple[HostDevice, ...]]:
    """A provider's cells and devices from the view's columns, less what
    its reservations hold (the ``topology_use`` column's text): what the
    filters fit a new guest on."""
    cells, devices = cells_in(cells_text), devices_in(devices_text)
    if use_text == "{}":
        return cells, devices
    use = json.loads(use_text)
    free_cells, free_devices = without(
        cells,
        devices,
        {cpu for cpu, _ in use.get("cpus", ())},
        {(cell, kb): count for cell, kb, count in use.get("pages", ())},
        {address for address, _ in use.get("devices", ())},
        (dict(use.get("memory", ())), dict(use.get("vcpus", ()))),
    )
    return _interned(free_cells, free_devices)


_SAME: dict[tuple[object, ...], tuple[tuple[HostCell, ...], tuple[HostDevice, ...]]] = {}


def _interned(
    cells: tuple[HostCell, ...], devices: tuple[HostDevice, ...]
) -> tuple[tuple[HostCell, ...], tuple[HostDevice, ...]]:
    """The same records for the same free cells and devices: providers of
    one model whose claims pinned the same CPUs (the scheduler pins the
    lowest free ones) share them, so the filters judge them once."""
    key = (
        tuple(
            (
                c.cell_id,
                c.cpus,
                c.dedicated,
                c.shared,
                c.siblings,
                c.memory_mb,
                tuple(sorted(c.huge_pages.items())),
                c.socket,
                c.memory_used_mb,
                c.vcpus_used,
            )
            for c in cells
        ),
        tuple(id(d) for d in devices),
    )
    found = _SAME.get(key)
    if found is None:
        if len(_SAME) >= 4 * _DISTINCT:
            _SAME.clear()
        found = _SAME[key] = (cells, devices)
    return found


@dataclass(frozen=True, slots=True)
class Codes:
    """A snapshot's providers by topology: ``cells[row]`` numbers the
    provider's cells records among the distinct ones (``cell_models``),
    ``devices[row]`` likewise, so a filter judges each distinct topology
    once per request and spreads the answer with NumPy."""

    cells: npt.NDArray[np.int64]
    devices: npt.NDArray[np.int64]
    cell_models: tuple[tuple[HostCell, ...], ...]
    device_models: tuple[tuple[HostDevice, ...], ...]


_CODES: list[tuple[Sequence[Any], Codes]] = []


def codes_of(providers: Sequence[Any]) -> Codes:
    """The :class:`Codes` of a snapshot's providers (``numa_cells`` and
    ``pci_devices`` read from each), computed once per providers sequence
    (a snapshot and its working twins share theirs)."""
    for seen, known in _CODES:
        if seen is providers:
            return known
    cells: dict[int, int] = {}
    devices: dict[int, int] = {}
    cell_models: list[tuple[HostCell, ...]] = []
    device_models: list[tuple[HostDevice, ...]] = []
    cell_codes = np.empty(len(providers), dtype=np.int64)
    device_codes = np.empty(len(providers), dtype=np.int64)
    for row, p in enumerate(providers):
        have_cells = p.numa_cells
        code = cells.get(id(have_cells))
        if code is None:
            code = cells[id(have_cells)] = len(cell_models)
            cell_models.append(have_cells)
        cell_codes[row] = code
        have_devices = p.pci_devices
        code = devices.get(id(have_devices))
        if code is None:
            code = devices[id(have_devices)] = len(device_models)
            device_models.append(have_devices)
        device_codes[row] = code
    codes = Codes(cell_codes, device_codes, tuple(cell_models), tuple(device_models))
    _CODES.insert(0, (providers, codes))
    del _CODES[4:]  # a snapshot and the next, and their twins
    return codes


def spread(
    codes: npt.NDArray[np.int64], models: int, fits: Callable[[int], bool]
) -> npt.NDArray[np.bool_]:
    """``fits(k)`` for each distinct code among ``codes`` (each below
    ``models``), asked once each, as a mask over ``codes``."""
    present = np.zeros(models, dtype=np.bool_)
    present[codes] = True
    table = np.zeros(models, dtype=np.bool_)
    for k in np.flatnonzero(present).tolist():
        table[k] = fits(k)
    out: npt.NDArray[np.bool_] = table[codes]
    return out
