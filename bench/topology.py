"""What describing NUMA cells and PCI devices costs (issue 31 part 1).

    python -m bench.topology [--providers 10000] [--partitions 4] [--reads 5]
                             [--plain-only]

A cluster of ``providers`` on the embedded log and a SQLite view, every
provider registered with an inventory; unless ``--plain-only``, each then
described with 2 NUMA cells of 32 CPUs (thread pairs, 4 shared and 28
dedicated, 64 GiB with 1 GiB pages) and a PF with 8 VFs, the issue's
benchmark host. Figures: the writers' rate on the descriptions, the
snapshot's full read (median of ``reads``) and a restarted writer's load of
the view, each with and without the topologies.

``--plain-only`` uses nothing this change added, so the same file runs on
the code before it: alternate the two trees to see what the plain path
pays (the view's two more columns and the snapshot's check of them).

Progress goes to stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.common import dumps, note, provider_events, timed
from berth.app import App, Settings
from consumers.partition_writer import catch_up_all
from consumers.snapshot_source import snapshot_from_view
from ledger.log import Append
from ledger.partitioner import partition_for
from projections.view.loader import load_state


def _cells() -> list[dict[str, Any]]:
    cells = []
    for cell_id in (0, 1):
        cpus = list(range(cell_id * 32, cell_id * 32 + 32))
        cells.append(
            {
                "cell_id": cell_id,
                "cpus": cpus,
                "siblings": [cpus[i : i + 2] for i in range(0, 32, 2)],
                "shared": cpus[:4],
                "dedicated": cpus[4:],
                "memory_mb": 65_536,
                "huge_pages": [{"size_kb": 1_048_576, "total": 16}],
            }
        )
    return cells


def _devices() -> list[dict[str, Any]]:
    pf = "0000:81:00.0"
    devices: list[dict[str, Any]] = [
        {"address": pf, "vendor_id": "8086", "product_id": "1572", "device_type": "type-PF",
         "numa_node": 0, "physical_network": "physnet1"}
    ]  # fmt: skip
    for n in range(8):
        devices.append(
            {"address": f"0000:81:0{2 + n // 8}.{n % 8}", "vendor_id": "8086",
             "product_id": "154c", "device_type": "type-VF", "parent_address": pf,
             "numa_node": 0, "physical_network": "physnet1"}
        )  # fmt: skip
    return devices


def _described(pid: str, ts_ms: int) -> bytes:
    return dumps(
        {
            "type": "provider_described",
            "event_id": f"topology-{pid}",
            "ts_ms": ts_ms,
            "partition_key": pid,
            "provider_id": pid,
            "numa_cells": _cells(),
            "pci_devices": _devices(),
        }
    )


def _append(app: App, partitions: int, values: list[tuple[str, bytes]]) -> None:
    topic = app.settings.topics.events
    batch = [Append(partition_for(pid.encode(), partitions), pid.encode(), v) for pid, v in values]
    for start in range(0, len(batch), 5000):
        app.log.append(topic, batch[start : start + 5000])


def run(providers: int, partitions: int, reads: int, plain_only: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {"providers": providers, "partitions": partitions}
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "data", partitions=partitions)
        pids = [f"n{i:06d}" for i in range(providers)]
        with App(settings) as app:
            _append(app, partitions, [(p, e) for p in pids for e in provider_events(p, 1)])
            writers = app.writers()
            catch_up_all(writers)
            figures["plain"] = _reads(app, partitions, reads)
            if plain_only:
                return figures
            _append(app, partitions, [(p, _described(p, 2)) for p in pids])
            with timed() as took:
                catch_up_all(writers)
            figures["describes_per_s"] = round(providers / took[0])
            figures["described"] = _reads(app, partitions, reads)
    return figures


def _reads(app: App, partitions: int, reads: int) -> dict[str, float]:
    """The snapshot's full read (median of ``reads``) and every partition's load."""
    times = []
    for _ in range(reads):
        with timed() as took:
            snapshot = snapshot_from_view(app.engine, placements=False)
        times.append(took[0])
    assert snapshot.size > 0
    with timed() as loading, app.engine.connect() as conn:
        for partition in range(partitions):
            load_state(conn, partition, partitions)
    note(f"snapshot read median {statistics.median(times):.3f} s")
    return {
        "snapshot_read_ms": round(statistics.median(times) * 1000, 1),
        "load_state_ms": round(loading[0] * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--providers", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--reads", type=int, default=5)
    parser.add_argument("--plain-only", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(args.providers, args.partitions, args.reads, args.plain_only)))


if __name__ == "__main__":
    main()
