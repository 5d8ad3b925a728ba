"""Placements through the scheduler and the embedded ledger, end to end.

    python -m bench.end_to_end [--providers 10000] [--requests 20000] [--sample 10] [--wave 2000]
    python -m bench.end_to_end --scenario race [--kafka auto|HOST:PORT]

The sustained scenario publishes the cluster, then places a stream of
requests in waves (one view snapshot per wave, completed with the claims
proposed since) with explain off and then on, the writers deciding in their
own thread; only placements the writers accepted count; the race scenario
is 600 requests from 8 concurrent publishers for 50 providers that hold
exactly 400 instances: threads on the embedded ledger, or, with --kafka,
processes with a projector process on Kafka and the view on PostgreSQL.
Progress goes to stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from bench.common import note, timed
from berth.app import App, Settings, tune_gc
from berth.client import Publisher
from consumers.partition_writer import PartitionWriter
from consumers.scheduler import OutcomeFollower, Scheduled, Scheduler
from consumers.snapshot_source import LiveSnapshot, snapshot_from_view
from placement.config import SchedulerConfig
from placement.engine import Sampling
from projections.view.tables import inventories, partition_offsets
from schemas.events import Event, Inventory, InventorySet, ProviderRegistered
from schemas.requests import PlacementRequest

NOW_MS = 1_700_000_000_000
FLAVORS = (
    {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20},
    {"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 40},
    {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 80},
)
SIZES = ((64, 262_144, 2_000), (32, 131_072, 1_000), (16, 65_536, 500))


def _cluster(count: int, sizes: Any = None, seed: int = 3) -> list[Event]:
    rng = random.Random(seed)
    events: list[Event] = []
    for n in range(count):
        pid = f"node-{n:06d}"
        vcpus, memory_mb, disk_gb = sizes or rng.choice(SIZES)
        events.append(
            ProviderRegistered(
                event_id=f"reg-{pid}", ts_ms=1, partition_key=pid, provider_id=pid, name=pid
            )
        )
        events.append(
            InventorySet(
                event_id=f"inv-{pid}",
                ts_ms=1,
                partition_key=pid,
                provider_id=pid,
                inventories={
                    "VCPU": Inventory(total=vcpus, allocation_ratio=4.0),
                    "MEMORY_MB": Inventory(total=memory_mb),
                    "DISK_GB": Inventory(total=disk_gb),
                },
            )
        )
    return events


def _overcommitted(app: App) -> int:
    with app.engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).where(
                    inventories.c.held + inventories.c.consumed > inventories.c.capacity
                )
            ).scalar_one()
        )


def _setup(directory: Path, providers: int, partitions: int, sizes: Any = None) -> App:
    app = App(Settings(data_dir=directory, partitions=partitions))
    publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
    events = _cluster(providers, sizes)
    for start in range(0, len(events), 5000):
        publisher.publish(events[start : start + 5000])
    for writer in app.writers():
        writer.catch_up()
    return app


def _projecting(writers: list[PartitionWriter], stop: threading.Event) -> None:
    """The writers' loop, as a projector process runs it: decide what has
    arrived, or wait a moment when nothing has."""
    while not stop.is_set():
        if all(w.step() is None for w in writers):
            stop.wait(0.0005)


def sustained(
    providers: int, requests: int, sample: float, explain: bool, wave: int = 2000
) -> dict[str, Any]:
    """The writers run in their own thread, as beside a scheduler process: the
    scheduler ranks its next wave (one snapshot each) while they decide the
    previous one, and only their decisions count as placements."""
    with tempfile.TemporaryDirectory(prefix="berth-e2e-") as tmp:
        app = _setup(Path(tmp), providers, partitions=16)
        writers = app.writers()
        config = SchedulerConfig.default()
        engine = config.engine()
        engine.sampling = Sampling(percentage=sample, minimum=100)
        snapshots = LiveSnapshot(app.engine)
        snapshots()  # a running scheduler read the whole view once, when it started
        scheduler = Scheduler(
            Publisher(app.log, clock_ms=lambda: NOW_MS),
            engine,
            snapshots,
            OutcomeFollower(app.log, app.settings.topics.outcomes),
            max_attempts=config.max_attempts,
            poll_interval_s=0.0005,
            wave=wave,
        )
        stop = threading.Event()
        projector = threading.Thread(target=_projecting, args=(writers, stop))
        projector.start()
        try:
            with timed() as t:
                stream = [
                    PlacementRequest(
                        request_id=f"r{k}",
                        ts_ms=NOW_MS,
                        project_id="bench",
                        resources=FLAVORS[k % len(FLAVORS)],
                        explain=explain,
                    )
                    for k in range(requests)
                ]
                results = scheduler.schedule(stream)
        finally:
            stop.set()
            projector.join()
        for writer in writers:
            writer.catch_up()
        placed = sum(r.placed for r in results)
        failed = len(results) - placed
        attempts = sum(r.attempts for r in results)
        overcommitted = _overcommitted(app)
        app.close()
    return {
        "placements_per_s": round(placed / t[0], 1),
        "placed": placed,
        "failed": failed,
        "attempts": attempts,
        "overcommitted_providers": overcommitted,
    }


def _race_figures(
    results: list[Scheduled], overcommitted: int, elapsed_s: float, publishers: str
) -> dict[str, Any]:
    failed = Counter(r.reason.split(";")[0] for r in results if not r.placed)
    return {
        "race_placed": sum(r.placed for r in results),
        "race_failed": sum(failed.values()),
        "race_failed_reasons": dict(failed),
        "race_attempts": sum(r.attempts for r in results),
        "race_overcommitted_providers": overcommitted,
        "race_s": round(elapsed_s, 2),
        "race_publishers": publishers,
    }


def race(publishers: int = 8, providers: int = 50, requests: int = 600) -> dict[str, Any]:
    """Threads, not processes: the embedded log belongs to one process."""
    with tempfile.TemporaryDirectory(prefix="berth-race-") as tmp:
        app = _setup(Path(tmp), providers, partitions=8, sizes=(4, 32_768, 160))
        writers = app.writers()
        stop = threading.Event()
        results: list[Scheduled] = []
        lock = threading.Lock()

        def projector() -> None:
            while not stop.is_set():
                if all(w.step() is None for w in writers):
                    stop.wait(0.001)

        def publisher(k: int) -> None:
            scheduler = Scheduler(
                Publisher(app.log, clock_ms=lambda: NOW_MS),
                SchedulerConfig.default().engine(),
                lambda: snapshot_from_view(app.engine, placements=False),
                OutcomeFollower(app.log, app.settings.topics.outcomes),
                max_attempts=10,
                poll_interval_s=0.001,
            )
            for i in range(k, requests, publishers):
                request = PlacementRequest(
                    request_id=f"race-{i}",
                    ts_ms=NOW_MS,
                    project_id="ci",
                    resources={"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 20},
                )
                done = scheduler.schedule([request])
                with lock:
                    results.extend(done)

        applying = threading.Thread(target=projector)
        applying.start()
        threads = [threading.Thread(target=publisher, args=(k,)) for k in range(publishers)]
        with timed() as t:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        stop.set()
        applying.join()
        for writer in writers:
            writer.catch_up()
        overcommitted = _overcommitted(app)
        app.close()
    return _race_figures(results, overcommitted, t[0], f"{publishers} threads")


def race_processes(kafka: str, publishers: int = 8, providers: int = 50) -> dict[str, Any]:
    """The race as the issue states it: publisher processes and a projector
    process on a Kafka-protocol broker, the view on PostgreSQL."""
    import subprocess
    import sys
    import time
    from contextlib import ExitStack

    from tests.kafka_broker import running_tansu
    from tests.postgres import scratch_database

    with ExitStack() as stack:
        bootstrap = stack.enter_context(running_tansu()) if kafka == "auto" else kafka
        db = stack.enter_context(scratch_database())
        log_url = f"kafka://{bootstrap}"
        settings = Settings(log_url=log_url, db_url=db, partitions=8)
        with App(settings) as app:
            edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
            edge.publish(_cluster(providers, (4, 32_768, 160)))
        berth = [sys.executable, "-m", "berth.cli"]
        projector = subprocess.Popen(
            [*berth, "projector", "--log", log_url, "--db", db, "--idle-wait-s", "0.002"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        stack.callback(projector.kill)
        started = time.perf_counter()
        runs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.race_publisher",
                    "--log",
                    log_url,
                    "--db",
                    db,
                    "--index",
                    str(k),
                    "--of",
                    str(publishers),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            for k in range(publishers)
        ]
        outputs = [run.communicate(timeout=600)[0] for run in runs]
        elapsed = time.perf_counter() - started
        results = [Scheduled.from_dict(r) for out in outputs for r in json.loads(out)]
        deadline = time.monotonic() + 60
        with App(settings) as app:
            while time.monotonic() < deadline:  # let the projector finish the releases
                ends = [app.log.end_offset(settings.topics.events, p) for p in range(8)]
                with app.engine.connect() as conn:
                    query = select(partition_offsets.c.partition, partition_offsets.c.next_offset)
                    done = {int(p): int(o) for p, o in conn.execute(query)}
                if all(done.get(p, 0) >= end for p, end in enumerate(ends)):
                    break
                time.sleep(0.05)
            overcommitted = _overcommitted(app)
    how = f"{publishers} processes, Kafka (tansu) + PostgreSQL"
    return _race_figures(results, overcommitted, elapsed, how)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--providers", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument(
        "--sample", type=float, default=10.0, help="percentage of providers examined per decision"
    )
    parser.add_argument(
        "--wave", type=int, default=2000, help="requests ranked on one snapshot (sustained)"
    )
    parser.add_argument("--scenario", choices=("sustained", "race"), default="sustained")
    parser.add_argument(
        "--kafka", default="", help="race on Kafka + PostgreSQL: auto (start tansu) or HOST:PORT"
    )
    args = parser.parse_args()
    tune_gc()
    if args.scenario == "race" and args.kafka:
        note("race: 600 requests, 8 publisher processes, Kafka + PostgreSQL ...")
        print(json.dumps(race_processes(args.kafka)))
        return
    if args.scenario == "race":
        note("race: 600 requests, 8 publishers, 50 providers ...")
        print(json.dumps(race()))
        return
    figures: dict[str, Any] = {
        "providers": args.providers,
        "requests": args.requests,
        "sample_percentage": args.sample,
        "wave": args.wave,
    }
    for explain in (False, True):
        note(f"sustained, explain {'on' if explain else 'off'} ...")
        result = sustained(args.providers, args.requests, args.sample, explain, args.wave)
        suffix = "explain_on" if explain else "explain_off"
        figures.update({f"{k}_{suffix}": v for k, v in result.items()})
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
