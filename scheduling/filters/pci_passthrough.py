"""Nova's PciPassthroughFilter: providers with the PCI devices a flavor's
``pci_passthrough:alias`` asks for.

The aliases are the operator's, in the filter's options, as Nova's
``[pci] alias``: each a name with the vendor_id and product_id it matches,
and optionally a device_type (type-PCI, type-PF, type-VF) and numa_policy
(required, legacy, preferred, socket). Several entries may share a name:
the alias then matches any of their devices.

A request's SR-IOV ports (``sriov_ports``: Nova's PCI requests by
physical network, from Neutron ports) each want a device on the port's
physical network: a VF for vnic_type ``direct`` and ``macvtap``, a PF for
``direct-physical``.

For a guest with a NUMA topology, each device must be near the host cells
its guest cells take, by the NUMA affinity policy (the request's
``hw:pci_numa_affinity_policy`` or image ``hw_pci_numa_affinity_policy``
over the alias's ``numa_policy``; a port's own policy over both; else
``legacy``), as Nova's PCI passthrough guide defines them: ``required``,
on one of those cells; ``legacy``, on one of them or on no known cell;
``socket``, on a cell of the same CPU socket as one of them (cells say
their ``socket``); ``preferred``, anywhere. The filter tries each set of
host cells the guest's cells fit on (NUMATopologyFilter's fit, with the
same allocation ratios) and passes the provider if one set has every
device near it. Without a NUMA topology there are no cells to be near and
any device will do.

Judged against the snapshot's devices less those earlier claims hold (and
the VFs of a PF held, the PF of a VF held: ``scheduling.topology.free_in``).
The same choice (:func:`choose`, :func:`near_fit`) gives the claim the
addresses it takes (``scheduling/fit.py``), which the partition's writer
holds or refuses (``projections/fitting.py``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduling.filters.base import Context, HostFilter
from scheduling.filters.numa_topology import cell_lack, matching
from scheduling.model import BoolArray, FloatArray, IntArray, Request
from scheduling.topology import HostCell, HostDevice, codes_of
from schemas.guest_topology import (
    PCI_ALIAS,
    GuestTopology,
    guest_topology,
    pci_asks,
    pci_numa_policy,
)

DEVICE_TYPES = ("type-PCI", "type-PF", "type-VF")
NUMA_POLICIES = ("required", "legacy", "preferred", "socket")


@dataclass(frozen=True, slots=True)
class Alias:
    """One entry of an alias: the devices it matches."""

    name: str
    vendor_id: str
    product_id: str
    device_type: str | None = None
    numa_policy: str = "legacy"

    def matches(self, device: HostDevice) -> bool:
        return (
            device.vendor_id == self.vendor_id
            and device.product_id == self.product_id
            and self.device_type in (None, device.device_type)
        )


def alias_of(entry: Mapping[str, Any]) -> Alias:
    """One configured alias entry, checked (ValueError says what is wrong)."""
    unknown = set(entry) - {"name", "vendor_id", "product_id", "device_type", "numa_policy"}
    if unknown:
        raise ValueError(f"PCI alias options {sorted(unknown)} are not known")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("a PCI alias needs a name")
    ids = [str(entry.get(k, "")).lower() for k in ("vendor_id", "product_id")]
    if not all(re.fullmatch(r"[0-9a-f]{4}", i) for i in ids):
        raise ValueError(f"PCI alias {name}: vendor_id and product_id are 4 hex digits")
    kind, policy = entry.get("device_type"), entry.get("numa_policy", "legacy")
    if kind is not None and kind not in DEVICE_TYPES:
        raise ValueError(f"PCI alias {name}: device_type is one of {', '.join(DEVICE_TYPES)}")
    if policy not in NUMA_POLICIES:
        raise ValueError(f"PCI alias {name}: numa_policy is one of {', '.join(NUMA_POLICIES)}")
    return Alias(name, ids[0], ids[1], kind, policy)


@dataclass(frozen=True, slots=True)
class Want:
    """``count`` devices one instance takes: of an alias (``entries``; None
    when the alias is not configured) or for SR-IOV ports, with the NUMA
    affinity policy they are taken under."""

    label: str
    count: int
    wanted: str
    matches: Callable[[HostDevice], bool]
    policy: str
    entries: Sequence[Alias] | None = ()


def wants_of(request: Request, aliases: Mapping[str, Sequence[Alias]]) -> list[Want]:
    """What each instance of ``request`` takes, aliases first, then ports
    (of one physical network, vnic_type and policy, counted together)."""
    overall = pci_numa_policy(request.extra_specs, request.image_properties)
    found: list[Want] = []
    for name, count in pci_asks(request.extra_specs):
        entries = aliases.get(name)
        if entries is None:
            found.append(Want(f"PCI alias {name!r}", count, "", _nothing, "legacy", None))
            continue
        wanted = " or ".join(f"{e.vendor_id}:{e.product_id}" for e in entries)
        policy = overall or entries[0].numa_policy
        found.append(Want(f"PCI alias {name}", count, wanted, _any_of(entries), policy, entries))
    ports: dict[tuple[str, str, str], int] = {}
    for port in request.sriov_ports:
        key = (
            port.physical_network,
            port.device_type,
            port.numa_affinity_policy or overall or "legacy",
        )
        ports[key] = ports.get(key, 0) + 1
    for (network, kind, policy), count in ports.items():
        wanted = f"{kind} on physical network {network}"
        found.append(Want("SR-IOV ports", count, wanted, _on_network(network, kind), policy))
    return found


def _nothing(device: HostDevice) -> bool:
    return False


def _any_of(entries: Sequence[Alias]) -> Callable[[HostDevice], bool]:
    return lambda device: any(e.matches(device) for e in entries)


def _on_network(network: str, kind: str) -> Callable[[HostDevice], bool]:
    return lambda d: d.physical_network == network and d.device_type == kind


Near = Callable[[Want, HostDevice], bool]


def choose(
    wants: Sequence[Want], devices: Sequence[HostDevice], near: Near | None
) -> tuple[str, ...] | str:
    """The addresses of the devices each want takes, want by want, each
    device once and never a PF with one of its VFs (as Nova's PCI tracker
    has it); or why the devices cannot give every want its count. ``near``
    says which a want may take (None: any). Each want takes the first
    devices it may, in turn; when that leaves a later want short, wants
    that share devices are fitted exactly (a matching of wanted devices to
    devices) before saying no."""
    free = list(devices)
    chosen: list[str] = []
    for want in wants:
        if want.entries is None:
            return f"{want.label} is not configured"
        found = [d for d in free if want.matches(d) and (near is None or near(want, d))]
        taken = _apart(found, want.count)
        if len(taken) < want.count:
            exact = _exactly(wants, devices, near) if want is not wants[0] else None
            if exact is not None:
                return exact
            return f"{want.label} wanted {want.count} of {want.wanted}, provider has {len(taken)}"
        chosen.extend(d.address for d in taken)
        free = [d for d in free if not any(_related(d, t) for t in taken)]
    return tuple(chosen)


def _related(a: HostDevice, b: HostDevice) -> bool:
    """One device, or a PF and one of its VFs: never both given."""
    return a.address == b.address or a.parent_address == b.address or b.parent_address == a.address


def _apart(found: Sequence[HostDevice], count: int) -> list[HostDevice]:
    """Up to ``count`` of ``found``, none related to another: VFs and plain
    devices first (a PF given takes its VFs with it), then in order."""
    taken: list[HostDevice] = []
    for device in sorted(found, key=lambda d: d.device_type == "type-PF"):
        if len(taken) == count:
            break
        if not any(_related(device, t) for t in taken):
            taken.append(device)
    return taken


def take(wants: Sequence[Want], devices: Sequence[HostDevice], near: Near | None) -> str | None:
    """Why :func:`choose` finds no devices for the wants (None: it does)."""
    found = choose(wants, devices, near)
    return found if isinstance(found, str) else None


def _exactly(
    wants: Sequence[Want], devices: Sequence[HostDevice], near: Near | None
) -> tuple[str, ...] | None:
    """The addresses every want takes, each device once, from a matching
    of each wanted device to a device it may take; None if there is none."""
    slots = [
        [i for i, d in enumerate(devices) if want.matches(d) and (near is None or near(want, d))]
        for want in wants
        for _ in range(want.count)
    ]
    found = matching(slots, len(devices))
    if found is None:
        return None
    given = [devices[i] for i in found]
    if any(_related(a, b) for a, b in itertools.combinations(given, 2)):
        return None  # a PF with its VF: no matching says that cannot be; say no
    return tuple(d.address for d in given)


def near_cells(cells: Sequence[HostCell], all_cells: Sequence[HostCell]) -> Near:
    """Which devices a want may take when the guest's cells are on
    ``cells``, by its policy (Nova's PCI NUMA affinity policies)."""
    ids = {c.cell_id for c in cells}
    sockets = {c.socket for c in cells if c.socket is not None}
    socket_of = {c.cell_id: c.socket for c in all_cells}

    def near(want: Want, device: HostDevice) -> bool:
        node = device.numa_node
        if want.policy == "preferred":
            return True
        if want.policy == "legacy":
            return node is None or node in ids
        if want.policy == "required":
            return node in ids
        return node is not None and socket_of.get(node) in sockets  # socket

    return near


def _ratio(ctx: Context, row: int, name: str) -> float:
    classes = ctx.snapshot.classes
    if name not in classes:
        return 1.0
    return float(ctx.snapshot.allocation_ratio[row, classes.index(name)])


def near_fit(
    wants: Sequence[Want],
    devices: Sequence[HostDevice],
    hosts: Sequence[HostCell],
    topology: GuestTopology,
    ratios: tuple[float, float],
) -> tuple[list[int], tuple[str, ...]] | str | None:
    """A host cell (an index into ``hosts``) for each guest cell, each
    used once, with every device near them, and the devices' addresses;
    or why no set of host cells the guest's cells fit on has every device
    near it; None when the guest fits no set at all (NUMATopologyFilter's
    to report, not this filter's). The sets are tried in order of host
    cells, as Nova tries its permutations."""
    guests = topology.cells
    fits = [
        [i for i, h in enumerate(hosts) if cell_lack(h, g, topology, *ratios) is None]
        for g in guests
    ]
    first: list[HostCell] | None = None
    for chosen in itertools.combinations(range(len(hosts)), len(guests)):
        within = [[h for h in fit if h in chosen] for fit in fits]
        placed = matching(within, len(hosts))
        if placed is None:
            continue
        cells = [hosts[i] for i in chosen]
        found = choose(wants, devices, near_cells(cells, hosts))
        if not isinstance(found, str):
            return placed, found
        first = first or cells
    if first is None:
        return None
    return _said(wants, devices, hosts, first)


def affinity_lack(
    wants: Sequence[Want],
    devices: Sequence[HostDevice],
    hosts: Sequence[HostCell],
    topology: GuestTopology,
    ratios: tuple[float, float],
) -> str | None:
    """Why :func:`near_fit` finds no host cells with the devices near
    them (None: it does, or the guest fits none, which is not this
    filter's to say)."""
    found = near_fit(wants, devices, hosts, topology, ratios)
    return found if isinstance(found, str) else None


def _said(
    wants: Sequence[Want],
    devices: Sequence[HostDevice],
    hosts: Sequence[HostCell],
    cells: Sequence[HostCell],
) -> str:
    """Which want lacks devices near the guest's cells, and where the
    provider's are, cell by cell."""
    near = near_cells(cells, hosts)
    want = next(w for w in wants if take([w], devices, near) is not None)
    matching_devices = [d for d in devices if want.matches(d)]
    by_cell = [
        f"host cell {h.cell_id}"
        + (f" (socket {h.socket})" if want.policy == "socket" else "")
        + f" has {sum(d.numa_node == h.cell_id for d in matching_devices)}"
        for h in hosts
    ]
    unknown = sum(d.numa_node is None for d in matching_devices)
    if unknown:
        by_cell.append(f"{unknown} on no known cell")
    where = ", ".join(str(c.cell_id) for c in cells)
    return (
        f"{want.label} wanted {want.count} of {want.wanted} near the guest's host cell(s)"
        f" {where} (NUMA policy {want.policy}): {'; '.join(by_cell)}"
    )


class PciPassthroughFilter(HostFilter):
    """Providers that have, for every ``name:count`` of the flavor's
    ``pci_passthrough:alias``, ``count`` devices the alias matches (by
    vendor_id, product_id and device_type), no device counted twice."""

    name = "PciPassthroughFilter"
    cost = 8

    def __init__(self, alias: Sequence[Mapping[str, Any]] = ()) -> None:
        entries = [alias_of(entry) for entry in alias]
        self.aliases: dict[str, list[Alias]] = {}
        for entry in entries:
            same = self.aliases.setdefault(entry.name, [])
            if same and same[0].numa_policy != entry.numa_policy:
                raise ValueError(
                    f"PCI alias {entry.name}: its entries give different numa_policy"
                    f" ({same[0].numa_policy}, {entry.numa_policy}), as Nova refuses"
                )
            same.append(entry)
        self._memo: tuple[Request, list[Want], GuestTopology | None] | None = None
        self._identities: tuple[Sequence[Any], FloatArray] | None = None
        """(a snapshot's providers, each one's (devices, cells) record ids)."""

    def applies(self, request: Request) -> bool:
        return PCI_ALIAS in request.extra_specs or bool(request.sriov_ports)

    def _wants(self, request: Request) -> tuple[list[Want], GuestTopology | None]:
        """The request's wants, and its guest topology when a want's policy
        ties devices to the guest's cells (None otherwise)."""
        memo = self._memo
        if memo is not None and memo[0] is request:
            return memo[1], memo[2]
        wants = wants_of(request, self.aliases)
        topology = None
        if any(w.policy != "preferred" for w in wants):
            res = request.resources
            topology = guest_topology(
                request.extra_specs,
                request.image_properties,
                res.get("VCPU", 0) + res.get("PCPU", 0),
                res.get("MEMORY_MB", 0),
            )
        self._memo = (request, wants, topology)
        return wants, topology

    def wants(self, request: Request) -> tuple[list[Want], GuestTopology | None]:
        """What each instance of the request takes, and its guest topology
        when a want's NUMA affinity policy ties devices to its cells."""
        return self._wants(request)

    def refuses(self, request: Request) -> str | None:
        if PCI_ALIAS not in request.extra_specs:
            return None
        unknown = [n for n, _ in pci_asks(request.extra_specs) if n not in self.aliases]
        if not unknown:
            return None
        known = ", ".join(sorted(self.aliases)) or "none"
        return f"PCI alias {', '.join(unknown)} not configured (configured: {known})"

    def reject(self, ctx: Context, row: int) -> str | None:
        wants, topology = self._wants(ctx.request)
        provider = ctx.snapshot.providers[row]
        why = take(wants, provider.pci_devices, None)
        if why is not None or topology is None:
            return why
        hosts = provider.numa_cells
        if len(topology.cells) > len(hosts):
            return None  # NUMATopologyFilter's to say
        ratios = _ratio(ctx, row, "VCPU"), _ratio(ctx, row, "MEMORY_MB")
        return affinity_lack(wants, provider.pci_devices, hosts, topology, ratios)

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        # providers of one hardware model share their devices' (and cells')
        # records, so each distinct list is judged once per request
        providers = ctx.snapshot.providers
        _, topology = self._wants(ctx.request)
        if topology is not None:
            return self._mask_near_cells(ctx, rows)
        seen: dict[int, bool] = {}
        out = np.empty(len(rows), dtype=np.bool_)
        for i, row in enumerate(rows.tolist()):
            key = id(providers[row].pci_devices)
            fits = seen.get(key)
            if fits is None:
                fits = seen[key] = self.reject(ctx, row) is None
            out[i] = fits
        return out

    def _mask_near_cells(self, ctx: Context, rows: IntArray) -> BoolArray:
        """``mask`` when devices must be near the guest's cells: judged once
        per distinct (devices, cells, VCPU and MEMORY_MB ratios), found by
        NumPy rather than a dictionary lookup per row."""
        if len(rows) == 0:
            return np.ones(0, dtype=np.bool_)
        snapshot = ctx.snapshot
        ratios = [
            snapshot.allocation_ratio[rows, snapshot.classes.index(name)]
            for name in ("VCPU", "MEMORY_MB")
            if name in snapshot.classes
        ]
        if all(len(r) == 0 or bool((r == r[0]).all()) for r in ratios):
            # the common case, one ratio each: a code per (devices, cells)
            # pair of records (scheduling.topology.codes_of), each pair
            # judged once at the first row that has it
            codes = codes_of(snapshot.providers)
            pairs = codes.devices[rows] * len(codes.cell_models) + codes.cells[rows]
            _, at, spread = np.unique(pairs, return_index=True, return_inverse=True)
            judged = [self.reject(ctx, int(rows[i])) is None for i in at.tolist()]
            found: BoolArray = np.array(judged, dtype=np.bool_)[spread.reshape(-1)]
            return found
        memo = self._identities
        if memo is None or memo[0] is not snapshot.providers:
            # ids are addresses, below 2**53: exact as float64
            ids = np.array(
                [(id(p.pci_devices), id(p.numa_cells)) for p in snapshot.providers],
                dtype=np.float64,
            ).reshape(-1, 2)
            memo = self._identities = (snapshot.providers, ids)
        columns = [memo[1][rows]]
        for name in ("VCPU", "MEMORY_MB"):
            if name in snapshot.classes:
                ratio = snapshot.allocation_ratio[rows, snapshot.classes.index(name)]
                columns.append(ratio.reshape(-1, 1))
        table = np.hstack(columns)
        _, first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
        fits = np.array([self.reject(ctx, int(rows[i])) is None for i in first], dtype=np.bool_)
        out: BoolArray = fits[inverse.reshape(-1)]
        return out
