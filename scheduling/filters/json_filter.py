"""Nova's JsonFilter: a request-supplied query over each provider's attributes.

The query (``request.hints.query``, grammar in :mod:`scheduling.json_query`)
reads the attributes built by :func:`host_attributes`, named like Nova's
HostState ones where Berth has the same fact:

* ``$host``, ``$nodename``: ``provider.host``; ``$uuid``: ``provider.provider_id``
* ``$free_ram_mb``: MEMORY_MB total - reserved - used; ``$total_usable_ram_mb``:
  MEMORY_MB total; ``$ram_allocation_ratio``
* ``$free_disk_mb``: (DISK_GB total - reserved - used) x 1024;
  ``$total_usable_disk_gb``: DISK_GB total; ``$disk_mb_used``: DISK_GB used x 1024;
  ``$disk_allocation_ratio``
* ``$vcpus_total``, ``$vcpus_used``: VCPU total and used; ``$cpu_allocation_ratio``
* ``$num_instances``, ``$num_io_ops``, ``$failed_builds`` (``provider.build_failures``),
  ``$host_ip``, ``$availability_zone``
* ``$service.disabled``: true unless ``provider.state`` is ``enabled``;
  ``$service.state``: ``provider.state``
* ``$hypervisor_type``, ``$hypervisor_version``, ``$cpu_info``,
  ``$supported_instances``: from ``provider.capabilities`` when reported;
  ``$capabilities.<key>``: any reported capability
* ``$metrics.<name>``: ``provider.metrics``; ``$metadata.<key>``:
  ``provider.metadata`` (Berth's own); ``$aggregates``: sorted aggregate names

"Used" includes what earlier picks of the same request consumed, so the
filter runs for every pick, as Nova's does. The free amounts are physical
(no allocation ratio), like Nova's, and can go negative when overcommitted.
Resource attributes are absent (so comparisons on them fail) when the
snapshot has no such class at all.

An invalid query rejects every provider with the parse error as the reason,
so the request fails with the error in its diagnostics instead of crashing
the engine.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from scheduling.filters.base import Context, HostFilter
from scheduling.json_query import InvalidQuery, evaluate
from scheduling.model import Request

_CAPABILITIES = ("hypervisor_type", "hypervisor_version", "cpu_info", "supported_instances")


class JsonFilter(HostFilter):
    """Passes the providers whose attributes satisfy ``request.hints.query``;
    without a query (or an empty one) every provider passes."""

    name = "JsonFilter"
    cost = 20
    per_pick = True

    def applies(self, request: Request) -> bool:
        return bool(request.hints.query)

    def reject(self, ctx: Context, row: int) -> str | None:
        query = ctx.request.hints.query
        if not query:
            return None
        if isinstance(query, str):
            query = _decoded(query)
        try:
            if evaluate(query, host_attributes(ctx, row)):
                return None
        except InvalidQuery as exc:
            return f"invalid JSON query: {exc}"
        return "does not satisfy the JSON query"


@functools.lru_cache(maxsize=64)
def _decoded(text: str) -> str | list[Any]:
    # Decoding once per query text rather than once per provider; anything
    # that is not a list goes back as text so evaluate reports it its way.
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return value if isinstance(value, list) else text


def host_attributes(ctx: Context, row: int) -> dict[str, Any]:
    """The attributes a JsonFilter query can name, for provider ``row``."""
    snapshot = ctx.snapshot
    provider = snapshot.providers[row]
    attributes: dict[str, Any] = {
        "host": provider.host,
        "nodename": provider.host,
        "uuid": provider.provider_id,
        "num_instances": len(provider.instances),
        "num_io_ops": provider.num_io_ops,
        "failed_builds": provider.build_failures,
        "host_ip": provider.host_ip,
        "availability_zone": provider.availability_zone,
        "service": {"disabled": provider.state != "enabled", "state": provider.state},
        "capabilities": dict(provider.capabilities),
        "metrics": dict(provider.metrics),
        "metadata": dict(provider.metadata),
        "aggregates": sorted(provider.aggregates),
    }
    for key in _CAPABILITIES:
        if key in provider.capabilities:
            attributes[key] = provider.capabilities[key]

    def amounts(rc: str) -> tuple[int, int, int, float] | None:
        column = snapshot.column(rc)
        if column is None:
            return None
        return (
            int(snapshot.total[row, column]),
            int(snapshot.reserved[row, column]),
            ctx.used_at(row, column),
            float(snapshot.allocation_ratio[row, column]),
        )

    if (ram := amounts("MEMORY_MB")) is not None:
        total, reserved, used, ratio = ram
        attributes["free_ram_mb"] = total - reserved - used
        attributes["total_usable_ram_mb"] = total
        attributes["ram_allocation_ratio"] = ratio
    if (disk := amounts("DISK_GB")) is not None:
        total, reserved, used, ratio = disk
        attributes["free_disk_mb"] = (total - reserved - used) * 1024
        attributes["total_usable_disk_gb"] = total
        attributes["disk_mb_used"] = used * 1024
        attributes["disk_allocation_ratio"] = ratio
    if (cpu := amounts("VCPU")) is not None:
        total, _reserved, used, ratio = cpu
        attributes["vcpus_total"] = total
        attributes["vcpus_used"] = used
        attributes["cpu_allocation_ratio"] = ratio
    return attributes
