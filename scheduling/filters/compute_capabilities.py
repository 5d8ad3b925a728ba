"""Nova's ComputeCapabilitiesFilter: flavor extra specs against the host's
state and capabilities."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from scheduling.extra_specs import (
    CAPABILITIES_SCOPE,
    address_bits_short,
    capability_value,
    matches,
    spec_applies,
)
from scheduling.filters.base import Context, HostFilter, frozen
from scheduling.model import Aggregate, Provider, Request

HOST_STATE = frozenset(
    {
        "free_ram_mb",
        "free_disk_mb",
        "host",
        "num_instances",
        "num_io_ops",
        "vcpus_total",
        "vcpus_used",
    }
)
"""The attributes of Nova's host state a spec may name beside the reported
capabilities (``hypervisor_type``, ``hypervisor_version``, ``cpu_info``,
``supported_instances`` and ``stats`` are among those): usage and the host's
name, which no group of providers shares, so a request naming one is
placed by a full scan."""

MAXPHYSADDR = "hw:maxphysaddr_bits"


class ComputeCapabilitiesFilter(HostFilter):
    """Every extra spec scoped ``capabilities:`` must name something of the
    host's state (:data:`HOST_STATE`) or of its reported capabilities whose
    text satisfies the spec's requirement. An unscoped spec is checked the
    same way, but only if the host has it (Nova's rule for flavors written
    before scopes); specs in any other scope are for other filters, except
    ``hw:maxphysaddr_bits``, which needs as many physical address bits in
    the host CPU's ``cpu_info`` (``maxphysaddr.bits``)."""

    name = "ComputeCapabilitiesFilter"
    cost = 5
    static = True

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return frozen(provider.capabilities)

    def applies(self, request: Request) -> bool:
        # a key in another scope (hw:, pci_passthrough:, ...) is never read:
        # a request with only those asks nothing of this filter
        return any(_read(key) for key in request.extra_specs)

    def scans(self, request: Request) -> bool:
        return any(_first_segment(key) in HOST_STATE for key in request.extra_specs)

    def reject(self, ctx: Context, row: int) -> str | None:
        provider = ctx.snapshot.providers[row]
        specs = ctx.request.extra_specs
        state: Mapping[str, Any] = provider.capabilities
        if any(_first_segment(key) in HOST_STATE for key in specs):
            # the host's state first, as Nova reads its attributes before stats
            state = {**provider.capabilities, **host_state(ctx, row)}
        for key, requirement in sorted(specs.items()):
            if key == MAXPHYSADDR:
                why = address_bits_short(provider.capabilities, requirement, key)
                if why is not None:
                    return why
                continue
            if not spec_applies(state, key):
                continue
            value = capability_value(state, key)
            if value is None:
                return f"{key} not reported"
            # Nova compares the capability's str(), lists and all
            text = str(value)
            if not matches(text, requirement):
                return f"{key} is {text!r}, wanted {requirement!r}"
        return None


def _read(key: str) -> bool:
    """Whether the filter reads extra spec ``key`` at all (``spec_applies``
    can be true for it on some host)."""
    scope, colon, _ = key.partition(":")
    return not colon or scope == CAPABILITIES_SCOPE or key == MAXPHYSADDR


def _first_segment(key: str) -> str:
    scope, colon, rest = key.partition(":")
    if not colon:
        return key
    return rest.partition(":")[0] if scope == CAPABILITIES_SCOPE else ""


def host_state(ctx: Context, row: int) -> dict[str, Any]:
    """Nova's host state attributes for ``row``, with what the request's
    earlier picks took counted as used."""
    snapshot = ctx.snapshot
    provider = snapshot.providers[row]

    def amounts(rc: str) -> tuple[int, int]:
        column = snapshot.column(rc)
        if column is None:
            return 0, 0
        total = int(snapshot.total[row, column])
        used = int(ctx.used[row, column]) + int(snapshot.reserved[row, column])
        return total, used

    ram_total, ram_used = amounts("MEMORY_MB")
    disk_total, disk_used = amounts("DISK_GB")
    vcpus_total, vcpus_used = amounts("VCPU")
    return {
        "free_ram_mb": ram_total - ram_used,
        "free_disk_mb": (disk_total - disk_used) * 1024,
        "host": provider.host or provider.provider_id,
        "num_instances": len(provider.instances),
        "num_io_ops": provider.num_io_ops,
        "vcpus_total": vcpus_total,
        "vcpus_used": vcpus_used,
    }
