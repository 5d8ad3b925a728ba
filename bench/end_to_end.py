"""Placements through the scheduler and the embedded ledger, end to end.

    python -m bench.end_to_end [--providers 10000] [--requests 20000] [--sample 10]
                               [--wave 2000] [--depth 2] [--writer-processes N]
                               [--described]
    python -m bench.end_to_end --scenario race [--kafka auto|HOST:PORT]
    python -m bench.end_to_end --scenario answers [--ranked 10] [--callgrind]

The answers scenario is the scheduler worker's whole path, as ``berth
serve`` runs it in one process: the requests are submitted on the requests
topic beforehand, then the worker reads them (decoded and checked), ranks and
places them, its writers decide the claims, and each answer, with its best
``--ranked`` candidates and their weighers' parts, is encoded and appended
to the placements topic. Its placements per CPU second (the process's, writers
included) and, under ``valgrind --tool=callgrind --instr-atstart=no`` with
``--callgrind``, its instructions an answer (which do not drift with the
machine's load) are what ranked answers cost end to end, the encoding
included, which the sustained scenario (no scheduler worker) leaves out.
Both give the measured part's user and system CPU seconds (every thread's)
and the cyclic collector's runs by generation, which callgrind does not
show.

The sustained scenario publishes the cluster, then places a stream of
requests in waves (one view snapshot per wave, completed with the claims
proposed since) with explain off and then on, the writers deciding in a
thread beside the scheduler or in their own processes; only placements the
writers accepted count. With --described every provider is described
(zone, address, hypervisor, rack), is a member of one of 20 aggregates
(allocation ratios, a weigher's multiplier, a key for extra specs, defined in
every partition) and reports its metrics every 10 s of log time (which
runs with the wall clock) while the requests are placed, each report with
its own timestamp and values, appended by a process of their own
(bench.metrics_agents) as the agents on the compute nodes would. The
race scenario is 600 requests from 8 publisher processes for 50 providers
that hold exactly 400 instances, with a projector process, on the embedded
log and SQLite or, with --kafka, on Kafka and PostgreSQL. Progress goes to
stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from bench.callgrind import Marks, totals
from bench.common import (
    AGGREGATES,
    SUSTAINED_DEPTH,
    SUSTAINED_WAVE,
    aggregate_member,
    aggregate_metadata,
    description,
    note,
    timed,
)
from bench.metrics_agents import LogClock
from berth.app import App, Settings, tune_gc
from berth.client import Publisher
from berth.compile import compiled
from consumers.partition_writer import (
    REPORT_LINGER_S,
    PartitionWriter,
    catch_up_all,
    lingering_until,
    step_all,
)
from consumers.scheduler import OutcomeFollower, Scheduled, Scheduler
from consumers.snapshot_source import LiveSnapshot
from ledger.log import merged
from ledger.partitioner import partition_for
from projections.view.engine import sqlite_url
from projections.view.loader import committed_offsets
from projections.view.tables import inventories
from scheduling.config import SchedulerConfig
from scheduling.engine import Bounded, Sampling
from schemas.codec import decode_event
from schemas.events import Event, Inventory, InventorySet, ProviderRegistered, Tick
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


def _setup(
    directory: Path, providers: int, partitions: int, sizes: Any = None, described: bool = False
) -> App:
    app = App(Settings(data_dir=directory, partitions=partitions))
    publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
    events = _cluster(providers, sizes)
    for start in range(0, len(events), 5000):
        publisher.publish(events[start : start + 5000])
    if described:  # described, and members of aggregates defined in every partition
        for a in range(AGGREGATES):
            publisher.define_aggregate(f"agg-{a}", aggregate_metadata(a), event_id=f"agg-{a}")
        publisher.publish(
            [
                decode_event(raw(f"node-{n:06d}", n, 1))
                for n in range(providers)
                for raw in (description, aggregate_member)
            ]
        )
    catch_up_all(app.writers())
    return app


def _agents(app: App, providers: int) -> subprocess.Popen[str]:
    """The providers' metrics agents (``bench.metrics_agents``), each provider
    reporting every 10 s of log time, in a process of their own, ready."""
    agents = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.metrics_agents",
            "--log",
            str(app.settings.data_dir),
            "--providers",
            str(providers),
            "--origin-ms",
            str(NOW_MS),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert agents.stdout is not None
    if agents.stdout.readline() != "ready\n":
        raise RuntimeError("the metrics agents did not start")
    return agents


def _stop_agents(agents: subprocess.Popen[str]) -> int:
    """Stop the agents; how many reports they appended."""
    out, _ = agents.communicate(timeout=60)
    return int(json.loads(out)["metrics_reports"])


def _projecting(writers: list[PartitionWriter], stop: threading.Event) -> None:
    """The writers' loop, as a projector process runs it: decide what has
    arrived, or wait on the log's doorbell until more does (50 ms at most,
    to see ``stop``, and no later than a lingering batch of metrics reports
    is due), rather than wake every half millisecond for the GIL."""
    while not stop.is_set():
        if step_all(writers):
            continue
        wait_s = 0.05
        if (due := lingering_until(writers)) is not None:
            wait_s = min(wait_s, due - time.monotonic())
        if writers:
            writers[0].log.wait(merged(*(w.watches() for w in writers)), wait_s)
        else:
            stop.wait(wait_s)


def _python(profile: str, name: str) -> list[str]:
    """The interpreter's command line, under cProfile writing ``profile/name.prof``
    when ``profile`` names a directory."""
    if not profile:
        return [sys.executable]
    return [sys.executable, "-m", "cProfile", "-o", str(Path(profile) / f"{name}.prof")]


def _projectors(
    settings: Settings, processes: int, profile: str = "", checkpoints: bool = True
) -> list[subprocess.Popen[bytes]]:
    """``berth projector`` processes sharing the partitions between them;
    without ``checkpoints`` they take none of the view."""
    where = (
        ["--log", settings.log_url] if settings.log_url else ["--data-dir", str(settings.data_dir)]
    )
    if settings.db_url:
        where += ["--db", settings.db_url]
    return [
        subprocess.Popen(
            [
                *_python(profile, f"projector-{k}"),
                "-m",
                "berth.cli",
                "projector",
                *where,
                "--owned",
                ",".join(str(p) for p in range(k, settings.partitions, processes)),
                *([] if checkpoints else ["--checkpoint-every", "0"]),
            ],
            stdout=subprocess.DEVNULL,
        )
        for k in range(processes)
    ]


def _view_holds_log(
    app: App, projectors: list[subprocess.Popen[bytes]], timeout_s: float = 120
) -> None:
    """Wait until the view reflects every record of the events topic so far."""
    settings = app.settings
    deadline = time.monotonic() + timeout_s
    while True:
        ends = [app.log.end_offset(settings.topics.events, p) for p in range(settings.partitions)]
        with app.engine.connect() as conn:
            done = committed_offsets(conn)
        if all(done.get(p, 0) >= end for p, end in enumerate(ends)):
            return
        if time.monotonic() > deadline or any(p.poll() is not None for p in projectors):
            raise RuntimeError("the projector processes did not catch up")
        time.sleep(0.05)


def _ready(app: App, projectors: list[subprocess.Popen[bytes]]) -> None:
    """Wait until the projector processes have loaded their partitions and
    decide: a tick appended to every partition is in the view. A running
    deployment's writers are warm; the placements are timed from here."""
    partitions = app.settings.partitions
    keys: dict[int, str] = {}
    for n in range(10 * partitions):
        keys.setdefault(partition_for(f"warm-{n}".encode(), partitions), f"warm-{n}")
        if len(keys) == partitions:
            break
    Publisher(app.log, clock_ms=lambda: NOW_MS).publish(
        [Tick(event_id=f"ready-{key}", ts_ms=NOW_MS, partition_key=key) for key in keys.values()]
    )
    # a loaded machine's projector may take minutes to load 100,000 providers
    _view_holds_log(app, projectors, timeout_s=900)


def _caught_up(app: App, projectors: list[subprocess.Popen[bytes]], timeout_s: float = 120) -> None:
    """Wait until the view reflects every record of the events topic, then stop
    the projector processes."""
    try:
        _view_holds_log(app, projectors, timeout_s)
    finally:
        for projector in projectors:
            projector.send_signal(signal.SIGTERM)
        for projector in projectors:
            projector.wait(timeout=30)


class _Spent:
    """The process's user and system CPU seconds (every thread's) and the
    cyclic collector's runs by generation, over a ``with`` block: where a
    CPU second goes that callgrind, which counts neither the kernel nor
    the waits on memory, does not show."""

    def __init__(self) -> None:
        self.user_s = self.system_s = 0.0
        self.collections = [0, 0, 0]

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.collections[info["generation"]] += 1

    def __enter__(self) -> _Spent:
        gc.callbacks.append(self._collected)
        self._started = os.times()
        return self

    def __exit__(self, *_: object) -> None:
        ended = os.times()
        gc.callbacks.remove(self._collected)
        self.user_s = ended.user - self._started.user
        self.system_s = ended.system - self._started.system

    def figures(self, prefix: str) -> dict[str, Any]:
        return {
            f"{prefix}_user_s": round(self.user_s, 2),
            f"{prefix}_system_s": round(self.system_s, 2),
            f"{prefix}_gc_collections": self.collections,
        }


class _Waited(Scheduler):
    """The scheduler, noting each wave's decision wait: from its claims
    published (the wave ranked) to the writers' decisions on all of them
    seen by the scheduler, in ms."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.published: dict[int, float] = {}
        self.waits_ms: list[float] = []

    def _propose(self, wave: list[Any]) -> list[str]:
        proposed = super()._propose(wave)
        self.published[id(proposed)] = time.perf_counter()
        return proposed

    def _land(self, flight: Any, ready: Any) -> Any:
        still = super()._land(flight, ready)
        now = time.perf_counter()
        kept = {id(proposed) for _, proposed in still}
        for _, proposed in flight:
            if id(proposed) not in kept:
                self.waits_ms.append((now - self.published.pop(id(proposed))) * 1e3)
        return still


def sustained(
    providers: int,
    requests: int,
    sample: float,
    explain: bool,
    wave: int = SUSTAINED_WAVE,
    writer_processes: int = 0,
    described: bool = False,
    bounded: Bounded | None = None,
    ranked: int = 10,
    depth: int = SUSTAINED_DEPTH,
) -> dict[str, Any]:
    """The scheduler ranks its next wave (one snapshot each) while the writers
    decide the previous one, and only their decisions count as placements.
    The writers run in a thread of this process, or with ``writer_processes``
    in that many ``berth projector`` processes on the same embedded log."""
    with tempfile.TemporaryDirectory(prefix="berth-e2e-") as tmp:
        app = _setup(Path(tmp), providers, partitions=16, described=described)
        if writer_processes:
            app.close()  # the projector processes own the partitions
            app = App(app.settings)
        # the writers as a projector process runs them (berth projector)
        writers = [] if writer_processes else app.writers(linger_s=REPORT_LINGER_S)
        config = SchedulerConfig.default()
        engine = config.engine()
        engine.sampling = Sampling(percentage=sample, minimum=100)
        engine.bounded = bounded or Bounded("full")
        engine.ranked = ranked
        snapshots = LiveSnapshot(app.engine)
        clock = LogClock(NOW_MS)
        with timed() as startup:
            first = snapshots()  # a running scheduler read the whole view once, when it started
            if engine.bounded.applies(first.size):
                engine.index(first)
        scheduler = _Waited(
            Publisher(app.log, clock_ms=clock),
            engine,
            snapshots,
            OutcomeFollower(app.log, app.settings.topics.outcomes),
            max_attempts=config.max_attempts,
            poll_interval_s=0.0005,
            wave=wave,
            depth=depth,
        )
        stop = threading.Event()
        projector = threading.Thread(target=_projecting, args=(writers, stop))
        # no checkpoints: started on a log of which none was taken, they
        # would copy the view at once, mid-run (a deployment's last one is
        # at most --checkpoint-every records old)
        projectors = (
            _projectors(app.settings, writer_processes, checkpoints=False)
            if writer_processes
            else []
        )
        if not projectors:
            projector.start()
        agents = _agents(app, providers) if described else None
        reports = 0
        try:
            if projectors:
                _ready(app, projectors)
            started = clock.start()
            if agents is not None:
                assert agents.stdin is not None
                agents.stdin.write(f"{started!r}\n")
                agents.stdin.flush()
            projectors_cpu = [_cpu_s(p.pid) for p in projectors]
            cpu_started = time.process_time()
            with timed() as t, _Spent() as spent:
                results = scheduler.schedule(_stream(requests, explain))
            cpu_s = time.process_time() - cpu_started
            projectors_cpu = [
                _cpu_s(p.pid) - s for p, s in zip(projectors, projectors_cpu, strict=True)
            ]
        finally:
            stop.set()
            if agents is not None:
                reports = _stop_agents(agents)
            if projectors:
                _caught_up(app, projectors)
            else:
                projector.join()
                catch_up_all(writers)
        placed = sum(r.placed for r in results)
        failed = len(results) - placed
        attempts = sum(r.attempts for r in results)
        overcommitted = _overcommitted(app)
        app.close()
    return {
        **({"metrics_reports": reports} if described else {}),
        **({"projectors_cpu_s": round(sum(projectors_cpu), 3)} if projectors else {}),
        "cpu_s": round(cpu_s, 3),
        "startup_s": round(startup[0], 2),
        "placements_per_s": round(placed / t[0], 1),
        "placements_per_cpu_s": round(placed / (cpu_s + sum(projectors_cpu)), 1),
        "placed": placed,
        "failed": failed,
        "attempts": attempts,
        "overcommitted_providers": overcommitted,
        "index_builds": engine.index_builds,
        "waves": len(scheduler.waits_ms),
        "wave_decided_ms": _percentiles(scheduler.waits_ms),
        **spent.figures("placements"),
    }


def _percentiles(samples: list[float]) -> dict[str, float]:
    """p50, p99 (nearest rank) and max of ``samples``, in their unit, to 0.1."""
    if not samples:
        return {}
    ordered = sorted(samples)

    def rank(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"p50": rank(0.5), "p99": rank(0.99), "max": round(ordered[-1], 1)}


def _stream(requests: int, explain: bool = False) -> list[PlacementRequest]:
    return [
        PlacementRequest(
            request_id=f"r{k}",
            ts_ms=NOW_MS,
            project_id="bench",
            resources=FLAVORS[k % len(FLAVORS)],
            explain=explain,
        )
        for k in range(requests)
    ]


def answers(
    providers: int, requests: int, sample: float, ranked: int, callgrind: bool = False
) -> dict[str, Any]:
    """The scheduler worker answering ``requests`` submitted beforehand, its
    writers pumped in its own thread as ``berth serve`` does: placements
    per CPU second, the mean answer's size, and with ``callgrind`` (under
    valgrind) the instructions an answer of the steps that answered them."""
    with tempfile.TemporaryDirectory(prefix="berth-e2e-") as tmp:
        app = _setup(Path(tmp), providers, partitions=16)
        writers = app.writers()
        config = SchedulerConfig.default()
        config.sampling = Sampling(percentage=sample, minimum=100)
        config.bounded = Bounded("full")
        config.ranked = ranked
        worker = app.scheduler_worker(config, lambda: catch_up_all(writers))
        Publisher(app.log, clock_ms=lambda: NOW_MS).submit(_stream(requests))
        marks = Marks() if callgrind else None
        if marks is not None:
            marks.start()
        cpu_started = time.process_time()
        with timed() as t, _Spent() as spent:
            while worker.step():
                pass
        cpu_s = time.process_time() - cpu_started
        if marks is not None:
            marks.dump("answers")
            marks.stop()
        catch_up_all(writers)
        topic = app.settings.topics.placements
        written = [
            r.value
            for p in range(app.settings.partitions)
            for r in app.log.read(topic, p, 0, 10**6)
        ]
        app.close()
    placed = sum(b'"placed": true' in value for value in written)
    figures: dict[str, Any] = {
        "answers_placements_per_s": round(placed / t[0], 1),
        "answers_placements_per_cpu_s": round(placed / cpu_s, 1),
        "answers_placed": placed,
        "answers_failed": len(written) - placed,
        "answer_bytes_mean": round(sum(map(len, written)) / max(len(written), 1)),
        **spent.figures("answers"),
    }
    if marks is not None and marks.running:
        figures["answers_instructions_each"] = round(
            totals(os.getpid())["answers"] / max(len(written), 1)
        )
    return figures


def _cpu_s(pid: int) -> float:
    """The CPU time a running process has used so far (Linux's /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _race_figures(
    results: list[Scheduled],
    overcommitted: int,
    elapsed_s: float,
    startup_s: float,
    publishers: str,
) -> dict[str, Any]:
    failed = Counter(r.reason.split(";")[0] for r in results if not r.placed)
    placed = sum(r.placed for r in results)
    return {
        "race_placed": placed,
        "race_failed": sum(failed.values()),
        "race_failed_reasons": dict(failed),
        "race_attempts": sum(r.attempts for r in results),
        "race_overcommitted_providers": overcommitted,
        "race_s": round(elapsed_s, 3),
        "race_placements_per_s": round(placed / elapsed_s, 1),
        "race_startup_s": round(startup_s, 2),
        "race_publishers": publishers,
    }


def race(
    kafka: str = "",
    publishers: int = 8,
    providers: int = 50,
    window: int = 1,
    profile: str = "",
    waves: int = 2,
) -> dict[str, Any]:
    """The race as the issue states it: publisher processes, each with its own
    scheduler, and a projector process, on the embedded log and SQLite, or
    with ``kafka`` on a Kafka-protocol broker and PostgreSQL. With ``profile``
    (a directory) every process runs under cProfile and leaves its
    ``.prof`` file there."""
    from contextlib import ExitStack

    from tests.kafka_broker import running_tansu
    from tests.postgres import scratch_database

    flight = f"window {window} in {min(waves, window)} waves"
    with ExitStack() as stack:
        if kafka:
            bootstrap = stack.enter_context(running_tansu()) if kafka == "auto" else kafka
            db = stack.enter_context(scratch_database())
            settings = Settings(log_url=f"kafka://{bootstrap}", db_url=db, partitions=8)
            how = f"{publishers} processes ({flight}), Kafka (tansu) + PostgreSQL"
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="berth-race-")))
            settings = Settings(
                log_url=f"embedded:{tmp}", db_url=sqlite_url(str(tmp / "view.db")), partitions=8
            )
            how = f"{publishers} processes ({flight}), embedded log + SQLite"
        app = stack.enter_context(App(settings))
        Publisher(app.log, clock_ms=lambda: NOW_MS).publish(_cluster(providers, (4, 32_768, 160)))
        projectors = _projectors(settings, 1, profile)
        spawned = time.perf_counter()
        # the publishers' schedulers start on a view that holds the cluster
        # (on a loaded machine the projector may take seconds to start)
        _view_holds_log(app, projectors)
        runs = [
            subprocess.Popen(
                [
                    *_python(profile, f"publisher-{k}"),
                    "-m",
                    "bench.race_publisher",
                    "--log",
                    settings.log_url,
                    "--db",
                    settings.db_url,
                    "--index",
                    str(k),
                    "--of",
                    str(publishers),
                    "--window",
                    str(window),
                    "--waves",
                    str(waves),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            for k in range(publishers)
        ]
        for run in runs:  # a barrier: the race starts once every publisher is ready
            assert run.stdout is not None and run.stdout.readline() == b"ready\n"
        projector_cpu = _cpu_s(projectors[0].pid)
        started = time.perf_counter()
        for run in runs:
            assert run.stdin is not None
            run.stdin.write(b"go\n")
            run.stdin.close()
        # the race ends with each publisher's line of results (its process's
        # exit, which may take a loaded machine a quarter of a second, is not timed)
        outputs = [json.loads(run.stdout.readline()) for run in runs if run.stdout is not None]
        elapsed = time.perf_counter() - started
        projector_cpu = _cpu_s(projectors[0].pid) - projector_cpu
        for run in runs:
            run.wait(timeout=60)
        results = [Scheduled.from_dict(r) for out in outputs for r in out["results"]]
        cpu = {
            "publishers": round(sum(out["cpu_s"] for out in outputs), 3),
            "projector": round(projector_cpu, 3),
        }
        _caught_up(app, projectors)  # the releases of the losers' claims, too
        overcommitted = _overcommitted(app)
    return {
        **_race_figures(results, overcommitted, elapsed, started - spawned, how),
        "race_cpu_s": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--providers", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument(
        "--sample", type=float, default=10.0, help="percentage of providers examined per decision"
    )
    parser.add_argument(
        "--wave",
        type=int,
        default=SUSTAINED_WAVE,
        help="requests ranked on one snapshot (sustained)",
    )
    parser.add_argument(
        "--depth",
        type=int,
        default=SUSTAINED_DEPTH,
        help="sustained: waves in flight (the next ranked while the writers decide the last)",
    )
    parser.add_argument(
        "--writer-processes",
        type=int,
        default=0,
        help="run the writers in N berth projector processes (default: a thread of this one)",
    )
    parser.add_argument(
        "--described",
        action="store_true",
        help="providers described, each reporting its metrics every 10 s during the run",
    )
    parser.add_argument(
        "--ranked",
        type=int,
        default=10,
        help="best candidates each answer records, with their weighers' parts (0: none)",
    )
    parser.add_argument(
        "--explain", choices=("off", "on", "both"), default="both", help="sustained runs to make"
    )
    parser.add_argument("--scenario", choices=("sustained", "race", "answers"), default="sustained")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="answers: under valgrind --tool=callgrind --instr-atstart=no, count "
        "the instructions an answer",
    )
    parser.add_argument(
        "--kafka", default="", help="race on Kafka + PostgreSQL: auto (start tansu) or HOST:PORT"
    )
    parser.add_argument("--publishers", type=int, default=8, help="race: publisher processes")
    parser.add_argument(
        "--window",
        type=int,
        default=1,
        help="race: requests each publisher's scheduler keeps in flight",
    )
    parser.add_argument(
        "--waves",
        type=int,
        default=2,
        help="race: waves a publisher's window is ranked in (each one snapshot, one append)",
    )
    parser.add_argument(
        "--profile",
        default="",
        help="race: a directory where every process leaves its cProfile figures",
    )
    args = parser.parse_args()
    tune_gc()
    if args.scenario == "race":
        on = "Kafka + PostgreSQL" if args.kafka else "the embedded log + SQLite"
        note(
            f"race: 600 requests, {args.publishers} publisher processes "
            f"(window {args.window}), 50 providers, {on} ..."
        )
        print(
            json.dumps(
                race(
                    args.kafka,
                    args.publishers,
                    window=args.window,
                    profile=args.profile,
                    waves=args.waves,
                )
            )
        )
        return
    if args.scenario == "answers":
        note(f"answers through the scheduler worker, ranked {args.ranked} ...")
        found = answers(args.providers, args.requests, args.sample, args.ranked, args.callgrind)
        common = {"providers": args.providers, "requests": args.requests, "ranked": args.ranked}
        print(json.dumps({**common, "sample_percentage": args.sample, **found}))
        return
    figures: dict[str, Any] = {
        "providers": args.providers,
        "requests": args.requests,
        "sample_percentage": args.sample,
        "wave": args.wave,
        "depth": args.depth,
        "writer_processes": args.writer_processes,
        "described": args.described,
        "compiled": compiled(),
        "ranked": args.ranked,
    }
    runs = {"off": (False,), "on": (True,), "both": (False, True)}[args.explain]
    for explain in runs:
        note(f"sustained, explain {'on' if explain else 'off'} ...")
        result = sustained(
            args.providers,
            args.requests,
            args.sample,
            explain,
            args.wave,
            args.writer_processes,
            args.described,
            ranked=args.ranked,
            depth=args.depth,
        )
        suffix = "explain_on" if explain else "explain_off"
        figures.update({f"{k}_{suffix}": v for k, v in result.items()})
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
