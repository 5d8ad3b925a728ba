"""Pinned CPUs and devices claimed as the fit the scheduler chose (issue 31
part 4): what a decision costs, how many placements a second the writers
take, and a race that must never pin a CPU twice nor give a device twice.

    python -m bench.numa [--providers 10000] [--partitions 4] [--decisions 400]
                         [--requests 4000] [--rounds 3] [--wave 500]

``providers`` hosts on the embedded log and a SQLite view, each with 2 NUMA
cells of 32 CPUs (4 shared, 28 dedicated, 64 GiB) and a PF with 8 VFs
(4 a cell), 8 VCPU x 4.0, 56 PCPU, 128 GiB. The mix: 50% plain (1 VCPU,
2 GiB), 30% pinned over 2 cells (8 PCPU, 8 GiB), 20% pinned with a VF.

- ``decision_p50_ms``, ``decision_p99_ms``: the engine's placement of one
  request of the mix on a snapshot of the view, and the fit its claim
  carries (``scheduling.fit.claim_fit``), interleaved as the mix has them;
  ``decision_cpu_p99_ms`` the same in the thread's CPU time.
- ``placements_per_s``: the mix through the scheduler, the ledger and the
  writers (in a thread beside it), only accepted claims counted; and
  ``plain_placements_per_s``, the same number of plain requests on the same
  cluster, ``rounds`` of each alternated (after one uncounted run of
  each), medians.
- ``race_*``: 8 schedulers (threads) place pinned requests, 40% of them
  with a VF, on 20 small hosts (2 cells of 4 dedicated CPUs, 2 VFs) with
  two ``berth projector`` processes deciding: how many were placed, and
  from the view how many CPUs are pinned by two reservations and devices
  held by two (both must be 0).

Progress goes to stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from bench.common import dumps, note, timed
from bench.end_to_end import _caught_up, _projecting, _projectors
from berth.app import App, Settings, tune_gc
from berth.client import Publisher
from consumers.partition_writer import PartitionWriter, catch_up_all
from consumers.scheduler import OutcomeFollower, Scheduled, Scheduler
from consumers.snapshot_source import LiveSnapshot
from ledger.log import Append
from ledger.partitioner import partition_for
from projections.view.tables import providers, reservations
from scheduling.config import SchedulerConfig
from scheduling.engine import Engine
from scheduling.fit import claim_fit
from scheduling.model import Request
from scheduling.registry import DEFAULT_FILTERS
from schemas.requests import PlacementRequest

NOW_MS = 10**12
VF_ALIAS = {"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}
PF = "0000:81:00.0"
PINNED = {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}
MIX: dict[str, tuple[dict[str, int], dict[str, str]]] = {
    "plain": ({"VCPU": 1, "MEMORY_MB": 2048}, {}),
    "pinned": ({"PCPU": 8, "MEMORY_MB": 8192}, PINNED),
    "pinned_vf": ({"PCPU": 8, "MEMORY_MB": 8192}, {**PINNED, "pci_passthrough:alias": "vf:1"}),
}
ORDER = ("plain", "pinned", "plain", "pinned_vf", "plain", "pinned", "plain", "pinned_vf", "plain",
         "pinned")  # fmt: skip
"""Ten requests of the mix: 5 plain, 3 pinned, 2 pinned with a VF."""


def _engine() -> Engine:
    enabled = [*DEFAULT_FILTERS, "NUMATopologyFilter", "PciPassthroughFilter"]
    return SchedulerConfig.from_mapping(
        {"filters": {"enabled": enabled, "PciPassthroughFilter": {"alias": [VF_ALIAS]}}}
    ).engine()


def _cells(cpus: int, shared: int, memory_mb: int) -> list[dict[str, Any]]:
    cells = []
    for c in (0, 1):
        ids = list(range(c * cpus, (c + 1) * cpus))
        cells.append(
            {
                "cell_id": c,
                "cpus": ids,
                "shared": ids[:shared],
                "dedicated": ids[shared:],
                "memory_mb": memory_mb,
            }
        )
    return cells


def _devices(vfs: int) -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = [
        {"address": PF, "vendor_id": "8086", "product_id": "1572", "device_type": "type-PF",
         "numa_node": 0}
    ]  # fmt: skip
    for n in range(vfs):
        devices.append(
            {"address": f"0000:81:0{2 + n // 8}.{n % 8}", "vendor_id": "8086",
             "product_id": "154c", "device_type": "type-VF", "parent_address": PF,
             "numa_node": n % 2}
        )  # fmt: skip
    return devices


def _host(pid: str, inventory: dict[str, Any], cells: list[Any], vfs: int) -> list[bytes]:
    common = {"ts_ms": 1, "partition_key": pid, "provider_id": pid}
    return [
        dumps({"type": "provider_registered", "event_id": f"reg-{pid}", "name": pid, **common}),
        dumps(
            {"type": "inventory_set", "event_id": f"inv-{pid}", "inventories": inventory, **common}
        ),
        dumps(
            {
                "type": "provider_described",
                "event_id": f"topo-{pid}",
                "numa_cells": cells,
                "pci_devices": _devices(vfs),
                **common,
            }
        ),
    ]


def _cluster(app: App, pids: list[str], inventory: dict[str, Any], cells: Any, vfs: int) -> None:
    partitions = app.settings.partitions
    batch = [
        Append(partition_for(pid.encode(), partitions), pid.encode(), raw)
        for pid in pids
        for raw in _host(pid, inventory, cells, vfs)
    ]
    for start in range(0, len(batch), 5000):
        app.log.append(app.settings.topics.events, batch[start : start + 5000])


def _request(k: int, kind: str, prefix: str, lease_ms: int = 600_000) -> PlacementRequest:
    resources, specs = MIX[kind]
    return PlacementRequest(
        request_id=f"{prefix}{k}",
        ts_ms=NOW_MS,
        project_id="bench",
        resources=resources,
        extra_specs=specs,
        lease_ms=lease_ms,
    )


def _p99(ordered: list[float]) -> float:
    return ordered[max(0, int(len(ordered) * 0.99) - 1)]


def decisions(app: App, count: int) -> dict[str, Any]:
    """The engine's pick and the claim's fit, per request of the mix."""
    engine = _engine()
    snapshot = LiveSnapshot(app.engine)()
    requests = {
        kind: Request(kind, resources, extra_specs=specs)
        for kind, (resources, specs) in MIX.items()
    }
    for request in requests.values():  # warm
        engine.place(snapshot, request)
    times: dict[str, list[float]] = {kind: [] for kind in MIX}
    cpu: list[float] = []
    for k in range(count):
        kind = ORDER[k % len(ORDER)]
        request = requests[kind]
        start, start_cpu = time.perf_counter(), time.thread_time()
        placement = engine.place(snapshot, request)
        fit = claim_fit(engine, snapshot, snapshot.row_of[placement.providers[0]], request)
        times[kind].append((time.perf_counter() - start) * 1000.0)
        cpu.append((time.thread_time() - start_cpu) * 1000.0)
        assert (fit is None) == (kind == "plain"), fit
    every = sorted(t for ts in times.values() for t in ts)
    cpu.sort()
    figures: dict[str, Any] = {
        "decision_p50_ms": round(statistics.median(every), 3),
        "decision_p99_ms": round(_p99(every), 3),
        # the thread's CPU time: what the wall clock says less the waits for
        # a core on a shared machine
        "decision_cpu_p99_ms": round(_p99(cpu), 3),
    }
    for kind, ts in times.items():
        figures[f"{kind}_decision_p50_ms"] = round(statistics.median(ts), 3)
    return figures


def _placing(
    app: App, writers: list[PartitionWriter], stream: list[PlacementRequest], wave: int
) -> tuple[float, int]:
    """Placements a second of ``stream``, with the writers in a thread."""
    scheduler = Scheduler(
        Publisher(app.log, clock_ms=lambda: NOW_MS),
        _engine(),
        LiveSnapshot(app.engine),
        OutcomeFollower(app.log, app.settings.topics.outcomes),
        poll_interval_s=0.0005,
        wave=wave,
    )
    stop = threading.Event()
    projector = threading.Thread(target=_projecting, args=(writers, stop))
    projector.start()
    try:
        with timed() as took:
            results = scheduler.schedule(stream)
    finally:
        stop.set()
        projector.join()
        catch_up_all(writers)
    placed = sum(r.placed for r in results)
    return placed / took[0], placed


def throughput(
    app: App, writers: list[PartitionWriter], requests: int, rounds: int, wave: int
) -> dict[str, Any]:
    rates: dict[str, list[float]] = {"plain": [], "mix": []}
    # a first run of each, not counted: the first pays for warming caches
    for name in ("plain", "mix"):
        warm = [_request(k, ORDER[k % len(ORDER)], f"warm-{name}-") for k in range(requests // 8)]
        _placing(app, writers, warm, wave)
    for r in range(rounds):
        for name in ("plain", "mix") if r % 2 == 0 else ("mix", "plain"):
            stream = [
                _request(k, "plain" if name == "plain" else ORDER[k % len(ORDER)], f"{name}{r}-")
                for k in range(requests)
            ]
            rate, placed = _placing(app, writers, stream, wave)
            note(f"round {r} {name}: {placed} placed, {rate:.0f}/s")
            rates[name].append(rate)
    mix, plain = statistics.median(rates["mix"]), statistics.median(rates["plain"])
    return {
        "placements_per_s": round(mix, 1),
        "plain_placements_per_s": round(plain, 1),
        "mix_to_plain": round(mix / plain, 3),
    }


def _described(app: App, count: int, timeout_s: float = 120) -> None:
    """Wait until the view holds ``count`` described providers."""
    deadline = time.monotonic() + timeout_s
    while True:
        with app.engine.connect() as conn:
            found = conn.execute(
                select(func.count()).where(providers.c.numa_cells != "[]")
            ).scalar_one()
        if int(found) >= count:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the projector processes did not decide the hosts")
        time.sleep(0.05)


def race(schedulers: int = 8, hosts: int = 20, each: int = 20) -> dict[str, Any]:
    """Pinned requests from ``schedulers`` threads on ``hosts`` small hosts,
    two projector processes deciding."""
    with tempfile.TemporaryDirectory(prefix="berth-numa-race-") as tmp:
        settings = Settings(data_dir=Path(tmp) / "data", partitions=4)
        with App(settings):
            pass  # the topics, before the projectors start
        projectors = _projectors(settings, 2)
        app = App(settings)
        try:
            inventory = {"PCPU": {"total": 16}, "MEMORY_MB": {"total": 65536}}
            _cluster(app, [f"h{n}" for n in range(hosts)], inventory, _cells(4, 0, 8192), 2)
            results: list[Scheduled] = []
            lock = threading.Lock()

            def scheduling(k: int) -> None:
                own = Scheduler(
                    Publisher(app.log, clock_ms=lambda: NOW_MS),
                    _engine(),
                    LiveSnapshot(app.engine),
                    OutcomeFollower(app.log, settings.topics.outcomes),
                    max_attempts=40,
                )
                for i in range(each):
                    specs = {"hw:cpu_policy": "dedicated"}
                    if i % 5 < 2:
                        specs["pci_passthrough:alias"] = "vf:1"
                    request = PlacementRequest(
                        request_id=f"s{k}-{i}",
                        ts_ms=NOW_MS,
                        project_id="bench",
                        resources={"PCPU": 2, "MEMORY_MB": 1024},
                        extra_specs=specs,
                        lease_ms=10**8,
                    )
                    done = own.schedule([request])
                    with lock:
                        results.extend(done)

            _described(app, hosts)
            threads = [threading.Thread(target=scheduling, args=(k,)) for k in range(schedulers)]
            with timed() as took:
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
        finally:
            _caught_up(app, projectors)
        with app.engine.connect() as conn:
            rows = conn.execute(
                select(reservations.c["items"]).where(reservations.c.status == "held")
            ).scalars()
            cpus: Counter[tuple[str, int]] = Counter()
            devices: Counter[tuple[str, str]] = Counter()
            for (item,) in rows:
                fit = item.get("fit", {})
                for part in fit.get("cells", ()):
                    cpus.update((item["provider_id"], cpu) for cpu in part.get("cpus", ()))
                devices.update((item["provider_id"], d) for d in fit.get("devices", ()))
        app.close()
    placed = sum(r.placed for r in results)
    return {
        "race_requests": len(results),
        "race_placed": placed,
        "race_attempts": sum(r.attempts for r in results),
        "race_s": round(took[0], 2),
        "race_cpus_pinned_twice": sum(1 for n in cpus.values() if n > 1),
        "race_devices_given_twice": sum(1 for n in devices.values() if n > 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.numa")
    parser.add_argument("--providers", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--decisions", type=int, default=400)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wave", type=int, default=500)
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {"providers": args.providers}
    with tempfile.TemporaryDirectory(prefix="berth-numa-") as tmp:
        settings = Settings(data_dir=Path(tmp) / "data", partitions=args.partitions)
        with App(settings) as app:
            inventory = {
                "VCPU": {"total": 8, "allocation_ratio": 4.0},
                "PCPU": {"total": 56},
                "MEMORY_MB": {"total": 131072},
            }
            pids = [f"n{i:06d}" for i in range(args.providers)]
            _cluster(app, pids, inventory, _cells(32, 4, 65536), 8)
            writers = app.writers()
            with timed() as setup:
                catch_up_all(writers)
            note(f"{args.providers} providers described in {setup[0]:.1f} s")
            tune_gc()  # as the berth commands do
            figures.update(decisions(app, args.decisions))
            note(f"decisions: {figures}")
            figures.update(throughput(app, writers, args.requests, args.rounds, args.wave))
    figures.update(race())
    sys.stdout.buffer.write(dumps(figures) + b"\n")


if __name__ == "__main__":
    main()
