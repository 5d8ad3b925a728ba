"""One live snapshot's refresh from the view after a wave of usage changes.

    python -m bench.live_wave [--providers 100000] [--waves 5] [--per-wave 2000]

A cluster published through the writers (bench.end_to_end's setup: embedded
log, SQLite view, 16 partitions), a live snapshot read whole, then waves: in
each, ``--per-wave`` providers' usage rows and one inventory each changed as
a claim's commit changes them (``updated_offset`` within the partition's new
offsets, ``held`` and ``free``) and every partition's offset moved, and the
live snapshot called once, timed in wall and in the process's CPU time (the
SQLite reads run in it). Last, the snapshot is compared with a full read.
Prints one JSON object."""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from bench.common import note
from consumers.snapshot_source import LiveSnapshot, snapshot_from_view
from scheduling.model import RESOURCE_ARRAYS

_USAGE = (
    "UPDATE provider_usage SET active_reservations = active_reservations + 1, "
    "updated_offset = :offset WHERE provider_id = :pid"
)
_INVENTORY = (
    "UPDATE inventories SET held = held + 1, free = free - 1 "
    "WHERE provider_id = :pid AND resource_class = 'VCPU'"
)
_OFFSET = 'UPDATE partition_offsets SET next_offset = :offset WHERE "partition" = :p'


def _wave(engine: Engine, chosen: list[str], partition_of: dict[str, int]) -> None:
    """Commit a wave's usage changes and move every partition's offset past them."""
    with engine.begin() as conn:
        rows = conn.execute(text('SELECT "partition", next_offset FROM partition_offsets'))
        offsets = {int(row[0]): int(row[1]) for row in rows}
        for pid in chosen:
            conn.execute(text(_USAGE), {"offset": offsets[partition_of[pid]] + 5, "pid": pid})
            conn.execute(text(_INVENTORY), {"pid": pid})
        for p, offset in offsets.items():
            conn.execute(text(_OFFSET), {"offset": offset + 10, "p": p})


def run(providers: int, waves: int, per_wave: int) -> dict[str, Any]:
    from bench.end_to_end import _setup

    with tempfile.TemporaryDirectory(prefix="berth-live-wave-") as tmp:
        note(f"{providers} providers published through the writers ...")
        app = _setup(Path(tmp), providers, partitions=16)
        engine = app.engine
        live = LiveSnapshot(engine)
        live()
        with engine.connect() as conn:
            partition_of = {
                str(row[0]): int(row[1])
                for row in conn.execute(text('SELECT provider_id, "partition" FROM providers'))
            }
        rng = random.Random(5)
        ids = sorted(partition_of)
        wall_ms: list[float] = []
        cpu_ms: list[float] = []
        for _ in range(waves):
            _wave(engine, rng.sample(ids, per_wave), partition_of)
            gc.collect()
            started, cpu = time.perf_counter(), time.process_time()
            snapshot = live()
            wall_ms.append((time.perf_counter() - started) * 1000)
            cpu_ms.append((time.process_time() - cpu) * 1000)
        full = snapshot_from_view(engine, placements=False)
        same = snapshot.providers == full.providers and all(
            (getattr(snapshot, name) == getattr(full, name)).all() for name in RESOURCE_ARRAYS
        )
        app.close()
    return {
        "live_wave_providers": providers,
        "live_wave_per_wave": per_wave,
        "live_wave_wall_ms": [round(x, 1) for x in wall_ms],
        "live_wave_cpu_ms": [round(x, 1) for x in cpu_ms],
        "live_wave_median_cpu_ms": round(statistics.median(cpu_ms), 1),
        "live_wave_equals_full_read": bool(same),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--providers", type=int, default=100_000)
    parser.add_argument("--waves", type=int, default=5)
    parser.add_argument("--per-wave", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps(run(args.providers, args.waves, args.per_wave)))


if __name__ == "__main__":
    main()
