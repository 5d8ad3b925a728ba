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
