"""Helpers shared by the benchmarks: synthetic events as JSON bytes, timing."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

INVENTORY = {
    "VCPU": {"total": 64, "allocation_ratio": 4.0},
    "MEMORY_MB": {"total": 262_144, "reserved": 512},
    "DISK_GB": {"total": 2_000},
}
SUSTAINED_WAVE = 2000
"""Requests the sustained scenario's scheduler ranks on one snapshot."""
SUSTAINED_DEPTH = 2
"""Its waves in flight: the next ranked while the writers, in a process of
their own, decide the last. At 100,000 providers, 8,000 requests, it placed
6,230 a second at the median against 5,574 with 1 on a quiet machine
(three alternated pairs), at the same CPU a placement and with no claim
lost; each wave waits about twice as long for its decisions
(docs/performance.md)."""

FLAVOR = {"VCPU": 2, "MEMORY_MB": 4_096, "DISK_GB": 20}


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def timed() -> Iterator[list[float]]:
    """Yields a one-item list that holds the elapsed seconds afterwards."""
    box = [0.0]
    started = time.perf_counter()
    try:
        yield box
    finally:
        box[0] = time.perf_counter() - started


def dumps(data: dict[str, object]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def provider_events(pid: str, ts_ms: int) -> list[bytes]:
    return [
        dumps(
            {
                "type": "provider_registered",
                "event_id": f"reg-{pid}",
                "ts_ms": ts_ms,
                "partition_key": pid,
                "provider_id": pid,
                "name": pid,
            }
        ),
        dumps(
            {
                "type": "inventory_set",
                "event_id": f"inv-{pid}",
                "ts_ms": ts_ms,
                "partition_key": pid,
                "provider_id": pid,
                "inventories": INVENTORY,
            }
        ),
    ]


def claim(rid: str, pid: str, ts_ms: int, lease_ms: int = 600_000) -> bytes:
    return dumps(
        {
            "type": "claim",
            "event_id": f"e-{rid}",
            "ts_ms": ts_ms,
            "partition_key": pid,
            "reservation_id": rid,
            "consumer_id": f"vm-{rid}",
            "project_id": "bench",
            "items": [{"provider_id": pid, "resources": FLAVOR}],
            "lease_ms": lease_ms,
        }
    )


def lifecycle(kind: str, rid: str, pid: str, ts_ms: int) -> bytes:
    return dumps(
        {
            "type": kind,
            "event_id": f"{kind}-{rid}",
            "ts_ms": ts_ms,
            "partition_key": pid,
            "reservation_id": rid,
        }
    )


ZONES = ("az1", "az2", "az3")


def description(pid: str, n: int, ts_ms: int) -> bytes:
    """A provider's description: a zone, an address, a hypervisor, a rack."""
    return dumps(
        {
            "type": "provider_described",
            "event_id": f"desc-{pid}",
            "ts_ms": ts_ms,
            "partition_key": pid,
            "provider_id": pid,
            "availability_zone": ZONES[n % len(ZONES)],
            "host_ip": f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}",
            "capabilities": {
                "hypervisor_type": "QEMU",
                "hypervisor_version": 8002000 + n % 3,
                "supported_instances": [["x86_64", "qemu", "hvm"]],
                "cpu_info": {"arch": "x86_64", "vendor": "Intel"},
            },
            "metadata": {"rack": f"r{n % 40}"},
        }
    )


AGGREGATES = 20
"""The described workload's aggregates: provider n is a member of ``agg-(n % 20)``."""


def aggregate_metadata(a: int) -> dict[str, str]:
    """An aggregate's metadata: allocation ratios equal to the inventories'
    (so they change no capacity, yet every member's is computed through
    them), a weigher's multiplier and a key for AggregateInstanceExtraSpecs."""
    return {
        "cpu_allocation_ratio": "4.0",
        "ram_allocation_ratio": "1.0",
        "ram_weight_multiplier": "1.0",
        "ssd": "true" if a % 2 else "false",
    }


def aggregate_definitions(partition_keys: tuple[str, ...], ts_ms: int) -> list[tuple[int, bytes]]:
    """Every aggregate's definition, a copy to each partition (as the edge
    appends one): (partition, raw) pairs, keyed by ``partition_keys[p]``."""
    return [
        (
            p,
            dumps(
                {
                    "type": "aggregate_defined",
                    "event_id": f"agg-{a}-{p}",
                    "ts_ms": ts_ms,
                    "partition_key": key,
                    "aggregate_id": f"agg-{a}",
                    "metadata": aggregate_metadata(a),
                }
            ),
        )
        for a in range(AGGREGATES)
        for p, key in enumerate(partition_keys)
    ]


def aggregate_member(pid: str, n: int, ts_ms: int) -> bytes:
    """Provider ``pid`` (the n-th) joins its aggregate."""
    return dumps(
        {
            "type": "aggregate_member_added",
            "event_id": f"join-{pid}",
            "ts_ms": ts_ms,
            "partition_key": pid,
            "provider_id": pid,
            "aggregate_id": f"agg-{n % AGGREGATES}",
        }
    )


def metrics_report(pid: str, n: int, ts_ms: int) -> bytes:
    """A provider's metrics report as of ``ts_ms`` (Nova's compute monitors' names)."""
    load = (n * 7 + ts_ms // 1000) % 100
    return dumps(
        {
            "type": "metrics_reported",
            "event_id": f"m-{pid}-{ts_ms}",
            "ts_ms": ts_ms,
            "partition_key": pid,
            "provider_id": pid,
            "metrics": {
                "cpu.percent": float(load),
                "cpu.iowait.percent": float(load % 7),
                "cpu.frequency": 2400.0,
            },
            "num_io_ops": load % 5,
        }
    )
