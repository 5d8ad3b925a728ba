"""The identifiers a pool kind can hold, as integers.

Every pool is an integer range less some excluded identifiers: IPv4 and IPv6
addresses are their integer values, VNIs and VLAN IDs are themselves, and the
members of a named set are their positions in the set's sorted order. The
projector keeps only integers (in an interval structure); this module turns
them back into the strings a client sees.
"""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

VNI_RANGE = (1, 16_777_215)
VLAN_RANGE = (1, 4094)
MAX_SPAN = 2**64 - 1
"""The largest ``last - first`` of a pool: an IPv6 /64 is the widest."""


class PoolDefinition(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def cidr(self) -> str | None: ...
    @property
    def first(self) -> int | None: ...
    @property
    def last(self) -> int | None: ...
    @property
    def members(self) -> tuple[str, ...]: ...
    @property
    def excluded(self) -> frozenset[str]: ...


@dataclass(frozen=True, slots=True)
class PoolSpace:
    """A pool kind's range ``[first, last]`` and the identifiers never handed out."""

    kind: str
    first: int
    last: int
    excluded: tuple[int, ...]
    members: tuple[str, ...] = ()
    """Sorted members of a ``set`` pool; empty for the other kinds."""

    @property
    def size(self) -> int:
        return self.last - self.first + 1 - len(self.excluded)

    @classmethod
    def of(cls, definition: PoolDefinition) -> PoolSpace:
        """The space a definition describes; ValueError says what is wrong."""
        kind = definition.kind
        if kind in ("ipv4", "ipv6"):
            return _network(definition)
        if definition.cidr is not None:
            raise ValueError(f"cidr applies to ipv4 and ipv6 pools, not {kind}")
        if kind == "set":
            if definition.first is not None or definition.last is not None:
                raise ValueError("a set pool takes members, not first/last")
            members = tuple(sorted(set(definition.members)))
            if not members:
                raise ValueError("a set pool needs at least one member")
            space = cls(kind, 0, len(members) - 1, (), members)
            return space.excluding(definition.excluded)
        if definition.members:
            raise ValueError(f"members apply to set pools, not {kind}")
        bounds = {"vni": VNI_RANGE, "vlan": VLAN_RANGE}.get(kind)
        if bounds is None:  # range
            if definition.first is None or definition.last is None:
                raise ValueError("a range pool needs first and last")
            first, last = definition.first, definition.last
        else:
            low, high = bounds
            first = low if definition.first is None else definition.first
            last = high if definition.last is None else definition.last
            if not low <= first <= last <= high:
                raise ValueError(f"a {kind} pool lies within {low}..{high}, not {first}..{last}")
        if first > last:
            raise ValueError(f"first ({first}) exceeds last ({last})")
        return cls(kind, first, last, ()).excluding(definition.excluded)

    def excluding(self, excluded: Iterable[str]) -> PoolSpace:
        values = set(self.excluded)
        for text in excluded:
            value = self.to_int(text)
            if value is None:
                raise ValueError(f"excluded identifier {text!r} is not in the pool")
            values.add(value)
        return PoolSpace(self.kind, self.first, self.last, tuple(sorted(values)), self.members)

    def to_int(self, text: str) -> int | None:
        """The integer of identifier ``text``, or None if it cannot be in this pool."""
        try:
            if self.kind == "ipv4":
                value = int(ipaddress.IPv4Address(text))
            elif self.kind == "ipv6":
                value = int(ipaddress.IPv6Address(text))
            elif self.kind == "set":
                return _position(self.members, text)
            else:
                if not text.isdigit():
                    return None
                value = int(text)
        except ValueError:
            return None
        return value if self.first <= value <= self.last else None

    def to_str(self, value: int) -> str:
        if self.kind == "ipv4":
            return str(ipaddress.IPv4Address(value))
        if self.kind == "ipv6":
            return str(ipaddress.IPv6Address(value))
        if self.kind == "set":
            return self.members[value]
        return str(value)


def _network(definition: PoolDefinition) -> PoolSpace:
    if definition.cidr is None:
        raise ValueError(f"an {definition.kind} pool needs cidr")
    if definition.first is not None or definition.last is not None or definition.members:
        raise ValueError(f"an {definition.kind} pool takes cidr only, not first/last/members")
    try:
        network = ipaddress.ip_network(definition.cidr, strict=True)
    except ValueError as error:
        raise ValueError(f"cidr {definition.cidr!r}: {error}") from None
    if f"ipv{network.version}" != definition.kind:
        raise ValueError(f"cidr {definition.cidr} is not an {definition.kind} network")
    first = int(network.network_address)
    last = int(network.broadcast_address)
    reserved: list[int] = []
    if network.num_addresses > 2:
        # the network address (IPv6: the subnet-router anycast) and IPv4's
        # broadcast are never a host's; /31, /32, /127 and /128 have neither
        reserved.append(first)
        if network.version == 4:
            reserved.append(last)
    if last - first > MAX_SPAN:
        raise ValueError(f"cidr {definition.cidr}: a pool holds at most a /64")
    space = PoolSpace(definition.kind, first, last, tuple(reserved))
    return space.excluding(definition.excluded)


def _position(members: tuple[str, ...], text: str) -> int | None:
    i = bisect.bisect_left(members, text)
    return i if i < len(members) and members[i] == text else None
