"""What the NUMA and PCI filters cost a decision (issue 31 part 3), on the
engine alone (no log, no view: the snapshot is built in memory).

    python -m bench.numa_filters [--providers 10000] [--decisions 300]

``providers`` hosts of 64 VCPU and 128 GiB, each with 2 NUMA
cells of 32 CPUs (4 shared, 28 dedicated, 64 GiB) and 8 VFs, their records
shared as the snapshot shares those of one hardware model. Decisions of
three kinds, by the default filters plus NUMATopologyFilter and
PciPassthroughFilter: plain (1 VCPU), pinned over 2 cells (8 vCPUs), and
pinned with a VF; and plain ones by the default filters alone, for what
enabling the two costs a request that asks nothing of them. p50 and p99
per kind, in ms, the kinds interleaved.

Progress goes to stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.common import dumps, note
from scheduling.config import SchedulerConfig
from scheduling.model import Provider, Request, Snapshot
from scheduling.registry import DEFAULT_FILTERS
from scheduling.topology import HostCell, HostDevice

VF_ALIAS = {"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}


def _snapshot(n: int) -> Snapshot:
    cells = tuple(
        HostCell(
            c,
            frozenset(range(c * 32, c * 32 + 32)),
            dedicated=frozenset(range(c * 32 + 4, c * 32 + 32)),
            shared=frozenset(range(c * 32, c * 32 + 4)),
            memory_mb=65536,
        )
        for c in (0, 1)
    )
    vfs = tuple(
        HostDevice(f"0000:81:00.{i}", "8086", "154c", "type-VF", numa_node=i % 2) for i in range(8)
    )
    providers = [Provider(f"n{i}", numa_cells=cells, pci_devices=vfs) for i in range(n)]
    inventory: dict[str, dict[str, Any]] = {
        "VCPU": {"total": 64, "allocation_ratio": 4.0},
        "MEMORY_MB": {"total": 131072},
    }
    return Snapshot.build(providers, {p.provider_id: inventory for p in providers})


def _requests() -> dict[str, Request]:
    pinned = {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}
    return {
        "plain": Request("plain", {"VCPU": 1, "MEMORY_MB": 2048}),
        "pinned": Request("pinned", {"VCPU": 8, "MEMORY_MB": 8192}, extra_specs=pinned),
        "pinned_vf": Request(
            "vf",
            {"VCPU": 8, "MEMORY_MB": 8192},
            extra_specs={**pinned, "pci_passthrough:alias": "vf:1"},
        ),
    }


def _timer(place: Callable[[], object]) -> float:
    start = time.perf_counter()
    place()
    return (time.perf_counter() - start) * 1000.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.numa_filters")
    parser.add_argument("--providers", type=int, default=10_000)
    parser.add_argument("--decisions", type=int, default=300)
    args = parser.parse_args(argv)
    snapshot = _snapshot(args.providers)
    enabled = [*DEFAULT_FILTERS, "NUMATopologyFilter", "PciPassthroughFilter"]
    with_them = SchedulerConfig.from_mapping(
        {"filters": {"enabled": enabled, "PciPassthroughFilter": {"alias": [VF_ALIAS]}}}
    ).engine()
    without = SchedulerConfig.from_mapping({"filters": {"enabled": list(DEFAULT_FILTERS)}}).engine()
    requests = _requests()
    runs: dict[str, tuple[Callable[[], object], list[float]]] = {
        kind: (functools.partial(with_them.place, snapshot, r), []) for kind, r in requests.items()
    }
    runs["plain_without_them"] = (functools.partial(without.place, snapshot, requests["plain"]), [])
    for place, _ in runs.values():
        place()  # warm
    note(f"{args.providers} providers, {args.decisions} decisions of each kind, interleaved")
    for _ in range(args.decisions):
        for place, times in runs.values():
            times.append(_timer(place))
    figures: dict[str, object] = {"providers": args.providers, "decisions": args.decisions}
    for kind, (_, times) in runs.items():
        times.sort()
        figures[f"{kind}_p50_ms"] = round(statistics.median(times), 3)
        figures[f"{kind}_p99_ms"] = round(times[int(len(times) * 0.99) - 1], 3)
    sys.stdout.buffer.write(dumps(figures) + b"\n")


if __name__ == "__main__":
    main()
