"""Nova's SimpleCIDRAffinityFilter: build near an address."""

from __future__ import annotations

import ipaddress

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Request

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class SimpleCIDRAffinityFilter(HostFilter):
    """With a ``build_near_host_ip`` hint, a provider passes only if its
    ``host_ip`` lies in that address's network of prefix ``cidr`` (default
    ``/24``, the same default for IPv6, as in Nova). Host bits in the hint are
    allowed: ``10.1.2.3`` with ``/24`` means ``10.1.2.0/24``. ``cidr`` may be
    written with or without the slash; an empty one means the address alone.
    An address of the other IP version is never inside the network.

    A provider without a (valid) ``host_ip`` fails; a malformed hint fails
    every provider with the parse error as the reason, where Nova would error
    out the whole request.
    """

    name = "SimpleCIDRAffinityFilter"
    cost = 4

    def applies(self, request: Request) -> bool:
        return request.hints.build_near_host_ip is not None

    def reject(self, ctx: Context, row: int) -> str | None:
        hints = ctx.request.hints
        if not hints.build_near_host_ip:
            return None
        try:
            network = _network(hints.build_near_host_ip, hints.cidr)
        except ValueError as exc:
            return f"invalid build_near_host_ip/cidr hint: {exc}"
        host_ip = ctx.snapshot.providers[row].host_ip
        if not host_ip:
            return f"has no host_ip to compare with {network}"
        try:
            address = ipaddress.ip_address(host_ip)
        except ValueError:
            return f"host_ip {host_ip!r} is not an IP address"
        if address in network:
            return None
        return f"host_ip {host_ip} is outside {network}"


def _network(near: str, cidr: str) -> IPNetwork:
    prefix = cidr.strip().lstrip("/")
    text = f"{near.strip()}/{prefix}" if prefix else near.strip()
    return ipaddress.ip_network(text, strict=False)
