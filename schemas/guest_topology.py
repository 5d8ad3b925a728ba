"""What a request asks of NUMA cells, CPU pinning, huge pages and PCI
devices, in Nova's extra-spec and image-property names.

Nova's CPU topologies and PCI passthrough guides define them:
``hw:numa_nodes``, ``hw:numa_cpus.N``, ``hw:numa_mem.N``,
``hw:cpu_policy`` (shared / dedicated / mixed, with ``hw:cpu_dedicated_mask``
naming a mixed guest's pinned vCPUs, or with ``hw:cpu_realtime=yes`` its
``hw:cpu_realtime_mask``), ``hw:cpu_thread_policy`` (prefer /
isolate / require), ``hw:mem_page_size`` (small / large / any / a size),
``pci_passthrough:alias`` (``name:count,...``) and
``hw:pci_numa_affinity_policy``; images say the same with ``hw_`` names
(the dedicated mask is the flavor's only, as in Nova). A request's SR-IOV
ports are ``SriovPort`` records.
Parsed here, below the engine, so that the edge refuses a request that
cannot mean anything (cells that do not cover the vCPUs, a page size that
is not one) before it reaches a scheduler.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

SMALL_PAGE_KB = 4
PageSize = int | str
"""A page size in KiB, or ``"small"``, ``"large"``, ``"any"``."""

FLAVOR_KEYS = (
    "hw:numa_nodes",
    "hw:cpu_policy",
    "hw:mem_page_size",
    "hw:cpu_thread_policy",
    "hw:cpu_dedicated_mask",
    "hw:cpu_realtime",  # and hw:cpu_realtime_mask
)
IMAGE_KEYS = (
    "hw_numa_nodes",
    "hw_cpu_policy",
    "hw_mem_page_size",
    "hw_cpu_thread_policy",
    "hw_cpu_realtime_mask",
)
_YES = ("yes", "true", "1", "on", "y", "t")
_NO = ("no", "false", "0", "off", "n", "f")
CPU_POLICIES = ("shared", "dedicated", "mixed")
THREAD_POLICIES = ("prefer", "isolate", "require")
PCI_ALIAS = "pci_passthrough:alias"
PCI_NUMA_POLICIES = ("required", "legacy", "preferred", "socket")
VNIC_DEVICE_TYPES = {"direct": "type-VF", "macvtap": "type-VF", "direct-physical": "type-PF"}
"""The device a Neutron SR-IOV port of each vnic_type takes."""


@dataclass(frozen=True, slots=True)
class GuestCell:
    """One guest NUMA cell: its vCPU ids and its memory."""

    cell_id: int
    cpus: frozenset[int]
    memory_mb: int


@dataclass(frozen=True, slots=True)
class GuestTopology:
    """The guest's cells, whether its CPUs are pinned (``dedicated``), and
    the page size its memory is backed by (None: not asked). A ``mixed``
    guest pins only the vCPUs of ``dedicated_mask`` and floats the rest;
    ``thread_policy`` says what its pinned vCPUs ask of hardware threads
    (None: not asked, which fits as ``prefer`` does)."""

    cells: tuple[GuestCell, ...]
    dedicated: bool = False
    page_size: PageSize | None = None
    dedicated_mask: frozenset[int] = frozenset()
    thread_policy: str | None = None

    def pinned(self, cell: GuestCell) -> int:
        """How many of ``cell``'s vCPUs are pinned."""
        if self.dedicated:
            return len(cell.cpus)
        return len(cell.cpus & self.dedicated_mask)


def asks_numa(extra_specs: Mapping[str, str], image: Mapping[str, str]) -> bool:
    """Whether the flavor or image says anything that gives the guest a
    NUMA topology (cheap: no parsing)."""
    return any(k.startswith(("hw:numa_", *FLAVOR_KEYS)) for k in extra_specs) or any(
        k.startswith(("hw_numa_", *IMAGE_KEYS)) for k in image
    )


def topology_keys(
    flavor: Mapping[str, str], image: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The flavor's and the image's keys that say anything of NUMA cells,
    pinning, pages or PCI devices (what a move fits again), sorted."""
    mine = (
        "hw:numa_",
        "hw:pci_numa_affinity_policy",
        "hw:emulator_threads_policy",  # what lets every vCPU be real-time
        PCI_ALIAS,
        *FLAVOR_KEYS,
    )
    theirs = ("hw_numa_", "hw_pci_numa_affinity_policy", *IMAGE_KEYS)
    return (
        {k: flavor[k] for k in sorted(flavor) if k.startswith(mine)},
        {k: image[k] for k in sorted(image) if k.startswith(theirs)},
    )


def _both(flavor: Mapping[str, str], image: Mapping[str, str], name: str) -> str | None:
    """Nova's rule for a value both may set: they must agree."""
    mine, theirs = flavor.get(f"hw:{name}"), image.get(f"hw_{name}")
    if mine is not None and theirs is not None and mine != theirs:
        raise ValueError(f"flavor hw:{name}={mine} conflicts with image hw_{name}={theirs}")
    return mine if mine is not None else theirs


def cpu_policy(flavor: Mapping[str, str], image: Mapping[str, str]) -> str:
    """Nova's rule: a flavor's ``dedicated`` wins; a flavor's ``mixed``
    forbids the image ``dedicated``; a flavor's ``shared`` forbids the image
    to pin at all; with none, the image decides."""
    mine, theirs = flavor.get("hw:cpu_policy"), image.get("hw_cpu_policy")
    for where, value in (("flavor hw:cpu_policy", mine), ("image hw_cpu_policy", theirs)):
        if value is not None and value not in CPU_POLICIES:
            raise ValueError(f"{where} is {value!r}, not shared, dedicated or mixed")
    if mine == "shared" and theirs in ("dedicated", "mixed"):
        raise ValueError(f"image hw_cpu_policy={theirs}, but the flavor's policy is shared")
    if mine == "mixed" and theirs == "dedicated":
        raise ValueError("image hw_cpu_policy=dedicated, but the flavor's policy is mixed")
    return mine or theirs or "shared"


def thread_policy(flavor: Mapping[str, str], image: Mapping[str, str], policy: str) -> str | None:
    """``hw:cpu_thread_policy`` or the image's ``hw_cpu_thread_policy``:
    both given, they must agree; only for pinned vCPUs (``dedicated`` or
    ``mixed``), as Nova refuses it for a guest that pins nothing."""
    found = _both(flavor, image, "cpu_thread_policy")
    if found is None:
        return None
    if found not in THREAD_POLICIES:
        raise ValueError(f"hw:cpu_thread_policy is {found!r}, not prefer, isolate or require")
    if policy == "shared":
        raise ValueError(
            "hw:cpu_thread_policy applies to pinned vCPUs: hw:cpu_policy dedicated or mixed"
        )
    return found


def dedicated_mask(
    flavor: Mapping[str, str], policy: str, vcpus: int, realtime: frozenset[int] = frozenset()
) -> frozenset[int]:
    """A ``mixed`` guest's pinned vCPUs, from ``hw:cpu_dedicated_mask``:
    ids and ranges, or only exclusions (``^0-1``: every vCPU but 0 and 1);
    without it, its ``realtime`` vCPUs (Nova: a mixed guest's pinned vCPUs
    are given by one mask or the other, not both). At least one vCPU pinned
    and one floating, each one of the guest's."""
    text = flavor.get("hw:cpu_dedicated_mask")
    if policy != "mixed":
        if text is not None:
            raise ValueError("hw:cpu_dedicated_mask is for hw:cpu_policy=mixed")
        return frozenset()
    if text is None and realtime:
        return realtime
    if text is None:
        raise ValueError(
            "hw:cpu_policy=mixed needs hw:cpu_dedicated_mask (or hw:cpu_realtime_mask),"
            " the pinned vCPUs"
        )
    if realtime:
        raise ValueError(
            "hw:cpu_dedicated_mask and hw:cpu_realtime_mask both name a mixed guest's"
            " pinned vCPUs: give one"
        )
    pinned = _mask(text, vcpus, "hw:cpu_dedicated_mask")
    if not pinned or len(pinned) == vcpus:
        raise ValueError(
            f"hw:cpu_dedicated_mask {text!r} pins {len(pinned)} of {vcpus} vCPUs:"
            " a mixed guest pins some and floats some"
        )
    return pinned


def _mask(text: str, vcpus: int, name: str) -> frozenset[int]:
    """A vCPU mask: ids and ranges, or only exclusions (``^0-1``: every
    vCPU but 0 and 1), each one of the guest's."""
    parts = [p.strip() for p in text.split(",")]
    only_excluded = all(p.startswith("^") for p in parts)
    found = cpu_set(f"0-{vcpus - 1},{text}" if only_excluded and vcpus else text)
    outside = sorted(found - set(range(vcpus)))
    if outside:
        raise ValueError(f"{name} names vCPUs {outside}, beyond 0..{vcpus - 1}")
    return found


def realtime_vcpus(
    flavor: Mapping[str, str], image: Mapping[str, str], policy: str, vcpus: int
) -> frozenset[int]:
    """The guest's real-time vCPUs (empty: not a real-time guest), Nova's
    ``hw:cpu_realtime`` (the flavor's only) with ``hw:cpu_realtime_mask``
    (the flavor's, else the image's ``hw_cpu_realtime_mask``): a mask of
    only exclusions names the vCPUs that are *not* real-time (``^0``), one
    without ``^`` those that are. Only for pinned guests (``dedicated`` or
    ``mixed``); at least one vCPU real-time and, unless
    ``hw:emulator_threads_policy`` gives the emulator threads CPUs of their
    own (then the mask may be left out: all are), one that is not."""
    flag = flavor.get("hw:cpu_realtime")
    text = flavor.get("hw:cpu_realtime_mask", image.get("hw_cpu_realtime_mask"))
    on = _yes(flag) if flag is not None else False
    if not on:
        if text is not None:
            raise ValueError("hw:cpu_realtime_mask is only valid with hw:cpu_realtime=yes")
        return frozenset()
    if policy == "shared":
        raise ValueError("hw:cpu_realtime=yes needs pinned vCPUs: hw:cpu_policy dedicated or mixed")
    emulator = "hw:emulator_threads_policy" in flavor
    if text is None:
        if not emulator:
            raise ValueError(
                "hw:cpu_realtime=yes needs hw:cpu_realtime_mask (at least one vCPU not"
                " real-time), or hw:emulator_threads_policy"
            )
        return frozenset(range(vcpus))
    found = _mask(text, vcpus, "hw:cpu_realtime_mask")
    if not found:
        raise ValueError(f"hw:cpu_realtime_mask {text!r} leaves no vCPU real-time")
    if len(found) == vcpus and not emulator:
        raise ValueError(
            f"hw:cpu_realtime_mask {text!r} makes every vCPU real-time: at least one is not,"
            " unless hw:emulator_threads_policy is set"
        )
    return found


def _yes(text: str) -> bool:
    """A boolean extra spec as Nova reads one."""
    if text.strip().lower() in _YES:
        return True
    if text.strip().lower() in _NO:
        return False
    raise ValueError(f"hw:cpu_realtime is {text!r}, not yes or no")


_UNITS = {"": 1, "k": 1, "kb": 1, "kib": 1, "m": 1024, "mb": 1024, "mib": 1024}
_UNITS |= {"g": 1024**2, "gb": 1024**2, "gib": 1024**2}


def page_size(text: str) -> PageSize:
    """``small``, ``large``, ``any``, or a size: KiB without a unit, as
    Nova reads it (``2048``, ``2MB``, ``1GB``)."""
    if text in ("small", "large", "any"):
        return text
    found = re.fullmatch(r"\s*([0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = _UNITS.get(found.group(2).lower()) if found else None
    if found is None or unit is None:
        raise ValueError(f"{text!r} is not a page size (small, large, any, or e.g. 2MB, 1GB)")
    size = int(found.group(1)) * unit
    if size < SMALL_PAGE_KB or size & (size - 1):
        raise ValueError(f"{text!r} is not a page size: a power of two KiB, at least 4")
    return size


def mem_page_size(flavor: Mapping[str, str], image: Mapping[str, str]) -> PageSize | None:
    """Nova's rule: an image may choose the page size only when the
    flavor allows it with ``large`` or ``any``."""
    mine, theirs = flavor.get("hw:mem_page_size"), image.get("hw_mem_page_size")
    if mine is None:
        if theirs is not None:
            raise ValueError("image hw_mem_page_size needs the flavor's hw:mem_page_size")
        return None
    size = page_size(mine)
    if theirs is None:
        return size
    if size not in ("large", "any"):
        raise ValueError(f"image hw_mem_page_size, but the flavor's page size is {mine}")
    return page_size(theirs)


def cpu_set(text: str) -> frozenset[int]:
    """Nova's CPU spec: ids and ranges, ``^`` excluding (``0-3,^2,5``)."""
    wanted: set[int] = set()
    excluded: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        into = excluded if part.startswith("^") else wanted
        found = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part.lstrip("^"))
        if found is None:
            raise ValueError(f"{text!r} is not a CPU list such as 0-3,^2,5")
        low, high = int(found.group(1)), int(found.group(2) or found.group(1))
        if low > high or high > 4095:
            raise ValueError(f"{part!r} in {text!r} is not a CPU range")
        into.update(range(low, high + 1))
    return frozenset(wanted - excluded)


def _per_node(flavor: Mapping[str, str], image: Mapping[str, str], name: str) -> dict[int, str]:
    """``hw:NAME.N`` of the flavor, else ``hw_NAME.N`` of the image: Nova
    lets an image give them only when the flavor gives none."""
    mine = {k: v for k, v in flavor.items() if k.startswith(f"hw:{name}.")}
    theirs = {k: v for k, v in image.items() if k.startswith(f"hw_{name}.")}
    if mine and theirs:
        raise ValueError(f"image hw_{name}.N, but the flavor sets hw:{name}.N")
    found: dict[int, str] = {}
    for key, value in (mine or theirs).items():
        node = key.rpartition(".")[2]
        if not node.isdigit():
            raise ValueError(f"{key}: the part after the dot is a cell number")
        found[int(node)] = value
    return found


def _cells(
    nodes: int, cpus: dict[int, str], memory: dict[int, str], vcpus: int, memory_mb: int
) -> tuple[GuestCell, ...]:
    """The guest's cells: even shares, unless every cell's CPUs and memory
    are given, in which case they must cover the vCPUs and memory exactly."""
    if not cpus and not memory:
        if vcpus % nodes or memory_mb % nodes:
            raise ValueError(
                f"{vcpus} vCPUs and {memory_mb} MB do not split evenly into {nodes} cells;"
                " give hw:numa_cpus.N and hw:numa_mem.N"
            )
        share, mem = vcpus // nodes, memory_mb // nodes
        return tuple(
            GuestCell(n, frozenset(range(n * share, (n + 1) * share)), mem) for n in range(nodes)
        )
    if set(cpus) != set(range(nodes)) or set(memory) != set(range(nodes)):
        raise ValueError(
            f"hw:numa_cpus.N and hw:numa_mem.N are needed for each cell 0..{nodes - 1}"
        )
    sets = {n: cpu_set(text) for n, text in cpus.items()}
    owner: dict[int, int] = {}
    for n in range(nodes):
        for cpu in sets[n]:
            if cpu in owner:
                raise ValueError(f"vCPU {cpu} is in cells {owner[cpu]} and {n}")
            owner[cpu] = n
    if set(owner) != set(range(vcpus)):
        raise ValueError(f"hw:numa_cpus.N cover vCPUs {sorted(owner)}, not 0..{vcpus - 1}")
    if not all(text.isdigit() for text in memory.values()):
        raise ValueError("hw:numa_mem.N are MB, whole numbers")
    if sum(int(text) for text in memory.values()) != memory_mb:
        raise ValueError(f"hw:numa_mem.N add up to other than the {memory_mb} MB asked")
    return tuple(GuestCell(n, sets[n], int(memory[n])) for n in range(nodes))


def guest_topology(
    flavor: Mapping[str, str], image: Mapping[str, str], vcpus: int, memory_mb: int
) -> GuestTopology | None:
    """The guest's NUMA topology, or None when it asks for none. A pinned
    guest or one with a page size and no ``hw:numa_nodes`` has one cell, as
    in Nova. ValueError says what is wrong."""
    if not asks_numa(flavor, image):
        return None
    policy = cpu_policy(flavor, image)
    size = mem_page_size(flavor, image)
    nodes_text = _both(flavor, image, "numa_nodes")
    if nodes_text is not None and not (nodes_text.isdigit() and int(nodes_text) >= 1):
        raise ValueError(f"hw:numa_nodes is {nodes_text!r}, not a count of cells")
    threads = thread_policy(flavor, image, policy)
    mask = dedicated_mask(flavor, policy, vcpus, realtime_vcpus(flavor, image, policy, vcpus))
    nodes = int(nodes_text) if nodes_text else 1
    cpus, memory = _per_node(flavor, image, "numa_cpus"), _per_node(flavor, image, "numa_mem")
    if nodes_text is None and (cpus or memory):
        raise ValueError("hw:numa_cpus.N and hw:numa_mem.N need hw:numa_nodes")
    if nodes_text is None and policy == "shared" and size is None:
        return None
    if vcpus < nodes:
        raise ValueError(f"{nodes} NUMA cells for {vcpus} vCPUs")
    cells = _cells(nodes, cpus, memory, vcpus, memory_mb)
    return GuestTopology(
        cells,
        dedicated=policy == "dedicated",
        page_size=size,
        dedicated_mask=mask,
        thread_policy=threads,
    )


def pci_asks(flavor: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    """``pci_passthrough:alias`` as (alias, count) pairs: ``a1:2,a2:1``."""
    text = flavor.get(PCI_ALIAS)
    if text is None:
        return ()
    asks: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        name, _, count = part.partition(":")
        if not name or not count.isdigit() or int(count) < 1 or name in asks:
            raise ValueError(f"{PCI_ALIAS} {text!r}: each entry is name:count, names once")
        asks[name] = int(count)
    return tuple(asks.items())


def pci_numa_policy(flavor: Mapping[str, str], image: Mapping[str, str]) -> str | None:
    """``hw:pci_numa_affinity_policy`` or the image's
    ``hw_pci_numa_affinity_policy`` (both set must agree): how near the
    guest's NUMA cells its PCI devices and SR-IOV ports must be, over the
    aliases' own ``numa_policy``. None: not asked."""
    found = _both(flavor, image, "pci_numa_affinity_policy")
    if found is not None and found not in PCI_NUMA_POLICIES:
        raise ValueError(
            f"hw:pci_numa_affinity_policy is {found!r}, not one of {', '.join(PCI_NUMA_POLICIES)}"
        )
    return found


@dataclass(frozen=True, slots=True)
class SriovPort:
    """A Neutron SR-IOV port the instance is to have: a device on
    ``physical_network`` (a VF for vnic_type ``direct`` and ``macvtap``,
    a PF for ``direct-physical``), near the guest's NUMA cells as its own
    ``numa_affinity_policy`` says, else as the request's does."""

    physical_network: str
    vnic_type: str = "direct"
    numa_affinity_policy: str | None = None

    @property
    def device_type(self) -> str:
        return VNIC_DEVICE_TYPES[self.vnic_type]
