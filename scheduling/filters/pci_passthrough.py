"""Nova's PciPassthroughFilter: providers with the PCI devices a flavor's
``pci_passthrough:alias`` asks for.

The aliases are the operator's, in the filter's options, as Nova's
``[pci] alias``: each a name with the vendor_id and product_id it matches,
and optionally a device_type (type-PCI, type-PF, type-VF) and numa_policy
(required, legacy, preferred, socket). Several entries may share a name:
the alias then matches any of their devices.

Judged against the snapshot's description of the devices: which devices
earlier claims hold is not tracked until the claim carries the fit (issue
31 part 4), so every described device counts as free. The NUMA policy is
kept with the alias but not yet judged (it ties devices to the guest's
cells, the NUMA filter's fit).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduling.filters.base import Context, HostFilter
from scheduling.model import BoolArray, IntArray, Request
from scheduling.topology import HostDevice
from schemas.guest_topology import PCI_ALIAS, pci_asks

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
            self.aliases.setdefault(entry.name, []).append(entry)

    def applies(self, request: Request) -> bool:
        return PCI_ALIAS in request.extra_specs

    def refuses(self, request: Request) -> str | None:
        if PCI_ALIAS not in request.extra_specs:
            return None
        unknown = [n for n, _ in pci_asks(request.extra_specs) if n not in self.aliases]
        if not unknown:
            return None
        known = ", ".join(sorted(self.aliases)) or "none"
        return f"PCI alias {', '.join(unknown)} not configured (configured: {known})"

    def reject(self, ctx: Context, row: int) -> str | None:
        asks = pci_asks(ctx.request.extra_specs)
        free = list(ctx.snapshot.providers[row].pci_devices)
        for name, count in asks:
            entries = self.aliases.get(name)
            if entries is None:
                return f"PCI alias {name!r} is not configured"
            found = [d for d in free if any(e.matches(d) for e in entries)]
            if len(found) < count:
                wanted = " or ".join(f"{e.vendor_id}:{e.product_id}" for e in entries)
                return f"PCI alias {name} wanted {count} of {wanted}, provider has {len(found)}"
            taken = {d.address for d in found[:count]}
            free = [d for d in free if d.address not in taken]
        return None

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        # providers of one hardware model share their devices' records, so
        # each distinct list is judged once per request
        providers = ctx.snapshot.providers
        seen: dict[int, bool] = {}
        out = np.empty(len(rows), dtype=np.bool_)
        for i, row in enumerate(rows.tolist()):
            key = id(providers[row].pci_devices)
            fits = seen.get(key)
            if fits is None:
                fits = seen[key] = self.reject(ctx, row) is None
            out[i] = fits
        return out
