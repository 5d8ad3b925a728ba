"""A provider's NUMA cells and PCI devices, as its description gives them.

The fields follow Nova's host NUMA topology (a cell's CPUs, their thread
siblings, ``cpu_dedicated_set`` and ``cpu_shared_set``, memory and huge pages
by size) and its PCI device pool (address, vendor and product, ``type-PF`` /
``type-VF`` / ``type-PCI``, a VF's parent PF, NUMA node, physical network
and the device spec's tags). Every check that needs only the description
itself is here, so the edge refuses a bad one before it is appended; what
needs the provider's state (a device in use) is the writer's
(``projections/topology.py``).

Sets are held as sorted tuples: the same description always encodes, and is
written to the view, the same way.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_CELLS = 64
MAX_CPUS_PER_CELL = 4096
MAX_DEVICES = 1024
MAX_CPU_ID = 65_535

CpuId = Annotated[int, Field(ge=0, le=MAX_CPU_ID)]
CellId = Annotated[int, Field(ge=0, le=MAX_CELLS - 1)]
Hex4 = Annotated[str, Field(pattern=r"^[0-9a-fA-F]{4}$")]
PciAddress = Annotated[
    str,
    # domain:bus:slot.function, with Nova's limits (0xFFFF, 0xFF, 0x1F, 0x7)
    Field(pattern=r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[01][0-9a-fA-F]\.[0-7]$"),
]
DeviceType = Literal["type-PCI", "type-PF", "type-VF"]
TagName = Annotated[str, Field(min_length=1, max_length=255)]
TagValue = Annotated[str, Field(max_length=255)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


def _sorted_set(ids: Sequence[int], what: str) -> tuple[int, ...]:
    """The ids sorted; ValueError naming one given twice."""
    ordered = tuple(sorted(ids))
    for a, b in itertools.pairwise(ordered):
        if a == b:
            raise ValueError(f"{what}: CPU {a} listed twice")
    return ordered


def _ints(value: object) -> bool:
    """A list of ints: what the canonical form sorts (anything else is left
    for the field's own validation to refuse)."""
    return isinstance(value, list | tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    )


def _canonical_set(value: object, what: str) -> object:
    """A list of CPU ids as a sorted tuple (a list of anything else as a
    tuple, for the field's own validation to refuse, item by item)."""
    if not isinstance(value, list | tuple):
        return value
    return _sorted_set(value, what) if _ints(value) else tuple(value)


def _cpu_list(cpus: Sequence[int]) -> str:
    """``CPU 3`` or ``CPUs 3,4``."""
    return ("CPU " if len(cpus) == 1 else "CPUs ") + ",".join(str(cpu) for cpu in cpus)


def _power_of_two_kib(size_kb: int) -> int:
    """A page size's validator: NUMA cells and claims both name page sizes."""
    if size_kb & (size_kb - 1):
        raise ValueError(f"a page size is a power of two KiB, not {size_kb}")
    return size_kb


class HugePages(_Frozen):
    """The pages of one size a cell has (Nova's ``mempages`` entry)."""

    size_kb: int = Field(ge=4, le=16 * 1024 * 1024)
    total: int = Field(ge=0, le=2**40)

    _a_power_of_two = field_validator("size_kb")(_power_of_two_kib)


class NumaCell(_Frozen):
    """One host NUMA cell. ``cpus`` are all its CPU ids; ``dedicated`` (for
    pinned guests) and ``shared`` (for floating ones) are disjoint subsets of
    them, and a CPU in neither is the host's own. ``siblings`` are the
    hardware threads that share a core. ``huge_pages`` are within
    ``memory_mb``. ``socket``, when known, is the CPU socket the cell is on
    (what the ``socket`` PCI NUMA affinity policy reads)."""

    cell_id: CellId
    cpus: tuple[CpuId, ...] = Field(max_length=MAX_CPUS_PER_CELL)
    siblings: tuple[tuple[CpuId, ...], ...] = Field(default=(), max_length=MAX_CPUS_PER_CELL)
    dedicated: tuple[CpuId, ...] = Field(default=(), max_length=MAX_CPUS_PER_CELL)
    shared: tuple[CpuId, ...] = Field(default=(), max_length=MAX_CPUS_PER_CELL)
    memory_mb: int = Field(ge=0, le=2**40)
    huge_pages: tuple[HugePages, ...] = Field(default=(), max_length=16)
    socket: int | None = Field(default=None, ge=0, le=4095)

    @model_validator(mode="before")
    @classmethod
    def _canonical(cls, data: object) -> object:
        """Sets sorted, whatever order they were given in (before the fields
        are frozen into tuples)."""
        if not isinstance(data, dict):
            return data
        where = f"cell {data.get('cell_id')}"
        out = dict(data)
        for name in ("cpus", "dedicated", "shared"):
            if name in out:
                out[name] = _canonical_set(out[name], f"{where} {name}")
        groups = out.get("siblings")
        if isinstance(groups, list | tuple):
            groups = tuple(_canonical_set(g, f"{where} siblings") for g in groups)
            out["siblings"] = tuple(sorted(groups)) if all(_ints(g) for g in groups) else groups
        pages = out.get("huge_pages")
        if isinstance(pages, list | tuple):
            if all(isinstance(p, dict) and _ints([p.get("size_kb")]) for p in pages):
                pages = sorted(pages, key=lambda p: int(p["size_kb"]))
            out["huge_pages"] = tuple(pages)
        return out

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        where = f"cell {self.cell_id}"
        cpus = set(self.cpus)
        for name, subset in (("dedicated", self.dedicated), ("shared", self.shared)):
            stray = sorted(set(subset) - cpus)
            if stray:
                raise ValueError(f"{where}: {name} {_cpu_list(stray)} not among its cpus")
        both = sorted(set(self.dedicated) & set(self.shared))
        if both:
            raise ValueError(f"{where}: {_cpu_list(both)} both dedicated and shared")
        _check_siblings(where, cpus, self.siblings)
        sizes = [p.size_kb for p in self.huge_pages]
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"{where}: a page size is listed twice")
        paged_kb = sum(p.size_kb * p.total for p in self.huge_pages)
        if paged_kb > self.memory_mb * 1024:
            raise ValueError(
                f"{where}: huge pages take {paged_kb // 1024} MiB, "
                f"more than its {self.memory_mb} MiB of memory"
            )
        return self


def _check_siblings(where: str, cpus: set[int], siblings: Sequence[Sequence[int]]) -> None:
    seen: set[int] = set()
    for group in siblings:
        if len(group) < 2:
            raise ValueError(f"{where}: a sibling group has at least 2 threads, not {list(group)}")
        stray = sorted(set(group) - cpus)
        if stray:
            raise ValueError(f"{where}: sibling {_cpu_list(stray)} not among its cpus")
        again = sorted(seen & set(group))
        if again:
            raise ValueError(f"{where}: {_cpu_list(again)} in two sibling groups")
        seen.update(group)


class PciDevice(_Frozen):
    """One device the provider can pass through. A VF names its parent PF,
    which the same provider describes; a PF or plain device names none.
    ``numa_node`` None: the device's locality is not known."""

    address: PciAddress
    vendor_id: Hex4
    product_id: Hex4
    device_type: DeviceType = "type-PCI"
    parent_address: PciAddress | None = None
    numa_node: CellId | None = None
    physical_network: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    tags: dict[TagName, TagValue] = Field(default_factory=dict, max_length=32)

    @field_validator("address", "vendor_id", "product_id", "parent_address")
    @classmethod
    def _lower_case(cls, text: str | None) -> str | None:
        # 0000:0A:00.1 and 0000:0a:00.1 are one device
        return None if text is None else text.lower()

    @model_validator(mode="after")
    def _parent_of_a_vf_only(self) -> Self:
        if self.device_type == "type-VF" and self.parent_address is None:
            raise ValueError(f"device {self.address}: a VF names its parent_address")
        if self.device_type != "type-VF" and self.parent_address is not None:
            raise ValueError(
                f"device {self.address}: only a VF has a parent_address, not a {self.device_type}"
            )
        return self


def check_cells(cells: Sequence[NumaCell]) -> None:
    """ValueError if two cells share an id or a CPU."""
    owner: dict[int, int] = {}
    ids: set[int] = set()
    for cell in cells:
        if cell.cell_id in ids:
            raise ValueError(f"cell {cell.cell_id} is described twice")
        ids.add(cell.cell_id)
        for cpu in cell.cpus:
            other = owner.setdefault(cpu, cell.cell_id)
            if other != cell.cell_id:
                raise ValueError(f"CPU {cpu} is in cell {other} and in cell {cell.cell_id}")


def check_devices(devices: Sequence[PciDevice]) -> None:
    """ValueError if an address is described twice or a VF's parent is not
    one of the PFs described."""
    by_address: dict[str, PciDevice] = {}
    for device in devices:
        if device.address in by_address:
            raise ValueError(f"device {device.address} is described twice")
        by_address[device.address] = device
    for device in devices:
        if device.parent_address is None:
            continue
        parent = by_address.get(device.parent_address)
        if parent is None or parent.device_type != "type-PF":
            what = "not described" if parent is None else f"a {parent.device_type}"
            raise ValueError(
                f"VF {device.address}: its parent {device.parent_address} is {what}, "
                "not a PF of this provider"
            )


def cells_missing(cells: Sequence[NumaCell], devices: Sequence[PciDevice]) -> list[str]:
    """Why devices that name a NUMA cell the cells do not have cannot be
    taken, one line each (none when no cells are described at all: then a
    device's node is only informative)."""
    if not cells:
        return []
    known = {cell.cell_id for cell in cells}
    return [
        f"device {d.address} is on NUMA cell {d.numa_node}, which is not described"
        for d in devices
        if d.numa_node is not None and d.numa_node not in known
    ]


def view_json(items: Sequence[NumaCell] | Sequence[PciDevice]) -> str:
    """Cells or devices as the view's JSON column holds them: each in its
    event's form, defaults included, so a reader needs no defaults of its
    own (``json.dumps``' default form, as SQLAlchemy's JSON type writes).
    A cell's ``socket`` is left out when not known, so a description
    without one keeps the text it had before cells could say it."""
    if not items:
        return "[]"
    return json.dumps([_view_form(item) for item in items])


def _view_form(item: NumaCell | PciDevice) -> dict[str, Any]:
    form = item.model_dump(mode="json")
    if isinstance(item, NumaCell) and item.socket is None:
        del form["socket"]
    return form


def small_memory_mb(memory_mb: int, huge_pages: Iterable[tuple[int, int]]) -> int:
    """A cell's memory in small pages: its memory less all its huge pages
    (``(size_kb, total)`` pairs), held or not: what a guest cell that no
    huge page backs takes its memory from."""
    return memory_mb - sum(kb * total for kb, total in huge_pages) // 1024


def cell_limit(have: int, ratio: float) -> float:
    """How much of a cell's small-page memory or shared CPUs (``have``)
    the guest cells on it may take together, over-subscribed by the
    provider's allocation ratio (Nova's NUMATopologyFilter limits: usage
    plus the new cell within ``have * ratio``); one guest cell alone never
    takes more than ``have``. The engine's filter and the writer both
    judge with it."""
    return have * ratio


def cell_room_lack(wanted: int, used: int, have: int, ratio: float) -> bool:
    """Whether ``wanted`` more does not fit a cell that has ``have``, of
    which guest cells hold ``used``, under ``ratio``."""
    return wanted > have or used + wanted > cell_limit(have, ratio)


# --- what a claim takes of them ---------------------------------------------


class PageCount(_Frozen):
    """Huge pages of one size a guest cell takes from its host cell. Small
    pages are not counted here: they are the provider's MEMORY_MB."""

    size_kb: int = Field(gt=4, le=16 * 1024 * 1024)
    count: int = Field(ge=1, le=2**40)

    _a_power_of_two = field_validator("size_kb")(_power_of_two_kib)


class CellFit(_Frozen):
    """Where one guest NUMA cell goes: its host cell, the dedicated CPU ids
    pinned to it there (none for a floating guest), the huge pages it takes
    there, the memory it takes of the cell's small pages (``memory_mb``:
    its memory when no huge pages back it) and its floating vCPUs on the
    cell's shared CPUs (``vcpus``). The last two are over-subscribable by
    the provider's allocation ratios (:func:`cell_limit`); a claim
    recorded before they were counted names neither (0)."""

    guest_cell: CellId
    host_cell: CellId
    cpus: tuple[CpuId, ...] = Field(default=(), max_length=MAX_CPUS_PER_CELL)
    pages: tuple[PageCount, ...] = Field(default=(), max_length=16)
    memory_mb: int = Field(default=0, ge=0, le=2**40)
    vcpus: int = Field(default=0, ge=0, le=MAX_CPUS_PER_CELL)

    @field_validator("cpus")
    @classmethod
    def _sorted_cpus(cls, cpus: tuple[int, ...]) -> tuple[int, ...]:
        return _sorted_set(cpus, "a cell's fit")

    @field_validator("pages")
    @classmethod
    def _sorted_pages(cls, pages: tuple[PageCount, ...]) -> tuple[PageCount, ...]:
        return tuple(sorted(pages, key=lambda p: p.size_kb)) if len(pages) > 1 else pages

    @model_validator(mode="after")
    def _sizes_once(self) -> Self:
        sizes = [p.size_kb for p in self.pages]
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"guest cell {self.guest_cell} fit: a page size is listed twice")
        return self


class TopologyFit(_Frozen):
    """What a claim takes of its provider's NUMA cells and PCI devices: the
    fit the scheduler chose. The partition's writer holds exactly these, or
    refuses the claim if any is not free (``projections/fitting.py``).
    Checked here: nothing is named twice; whether the provider has them is
    the writer's to say."""

    cells: tuple[CellFit, ...] = Field(default=(), max_length=MAX_CELLS)
    devices: tuple[PciAddress, ...] = Field(default=(), max_length=MAX_DEVICES)

    @field_validator("devices", mode="before")
    @classmethod
    def _lower_case(cls, value: object) -> object:
        if isinstance(value, list | tuple):
            lowered = [v.lower() if isinstance(v, str) else v for v in value]
            if all(isinstance(v, str) for v in lowered):
                lowered.sort()
            return tuple(lowered)
        return value

    @model_validator(mode="after")
    def _nothing_twice(self) -> Self:
        for what, ids in (
            ("guest cell", [c.guest_cell for c in self.cells]),
            ("host cell", [c.host_cell for c in self.cells]),
            ("CPU", [cpu for c in self.cells for cpu in c.cpus]),
            ("device", list(self.devices)),
        ):
            seen: set[object] = set()
            for one in ids:
                if one in seen:
                    raise ValueError(f"the fit names {what} {one} twice")
                seen.add(one)
        if not self.cells and not self.devices:
            raise ValueError("a fit names at least one cell or device")
        return self
