"""A million providers: bounded placement against the full scan.

    python -m bench.scale [--sizes 100000,1000000] [--decisions 2000]
                          [--full-every 20] [--quality-providers 1000] [--rounds 1]
                          [--startup-providers 100000]
                          [--writers-providers 100000] [--writers-requests 20000]
                          [--writers-modes full,bounded] [--writers-processes 0,1]
                          [--callgrind FIRST:END]

For each size, a realistic cluster (five node types, four zones, traits,
hardware-generation, overcommit and tenant aggregates, 2% disabled, each
provider 0-100% full, 65% on average) is built as a snapshot, and a stream
of mixed requests (seven shapes, a quarter asking a zone, some SSD or GPU)
is placed in bounded mode, each pick applied to the snapshot as the
scheduler applies it (a twin that says which row changed). Every
``full-every``-th request is also placed by the full scan on the same
snapshot, alternated in the same run, and the bounded pick is scored
against the full scan's best (regret: the score lost, as a share of the
spread between the full scan's best and worst feasible provider). Each
latency is given in wall time and in the thread's CPU time: on a machine
shared with other work the wall time's tail is mostly waiting for a core.
``bounded_cpu_steady`` leaves out the bounded decisions straight after a
full scan (which has swept the caches; a scheduler in bounded mode runs
none).

The quality replay then drives a smaller cluster, empty at first, into
saturation with a synthetic trace (Poisson arrivals of the shape mix,
lognormal lifetimes offering 1.2 times what the cluster holds), in
full and in bounded mode alternately, spreading (the default weighers) and
packing (the RAM, CPU and disk weighers negated): regret, stranded capacity
(free capacity on providers that no shape of the mix fits any more, as a
share of all capacity) and false "no valid host" (a bounded failure that a
full scan on the same state places).

Start-up: a cluster published through the writers (bench.end_to_end's
setup: embedded log, SQLite view), then a bounded scheduler's first
snapshot and index made from the view, and made from a replay of the log
in memory (every partition's records decided again, as explain's states
are), alternately; in wall and CPU seconds, with what the first from the
view holds resident (snapshot and index) and the view's file, a provider.
``--startup-data-dir DIR`` keeps the published cluster in DIR, or starts
from the one DIR holds (a million providers take ten minutes and more to
publish).

Last, sustained placements through the real writers (bench.end_to_end's
scenario: embedded log, SQLite view, the scheduler on a live snapshot), full
and bounded alternately, each with the writers in a thread of the
scheduler's process (``one_process``: the whole placement path under one
GIL, on one core) and in a ``berth projector`` process of their own
(``two_processes``, as deployed: the scheduler's live snapshot reads what
they committed from the view), alternately.

Progress goes to stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import math
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from bench.callgrind import Marks, totals
from bench.common import SUSTAINED_DEPTH, SUSTAINED_WAVE, note, timed
from berth.app import App, tune_gc
from berth.compile import compiled
from ledger.log import Log
from scheduling.config import SchedulerConfig
from scheduling.engine import Bounded, Engine, Placement, demand_row
from scheduling.filters.base import Context
from scheduling.model import Aggregate, IntArray, Provider, Request, Snapshot
from scheduling.weighers.combine import weigh_all

CLASSES = ("DISK_GB", "MEMORY_MB", "VCPU")
NODE_TYPES = (
    # name, share, VCPU, MEMORY_MB, DISK_GB, traits
    ("general", 0.45, 64, 262_144, 2_000, ("AVX2",)),
    ("compute", 0.20, 96, 196_608, 1_000, ("AVX2", "AVX512")),
    ("memory", 0.15, 48, 786_432, 2_000, ("AVX2",)),
    ("small", 0.15, 16, 65_536, 500, ()),
    ("gpu", 0.05, 32, 393_216, 4_000, ("AVX2", "HW_GPU")),
)
ZONES = ("az1", "az2", "az3", "az4")
AGGREGATES = {
    "gen-2019": Aggregate("gen-2019"),
    "gen-2021": Aggregate("gen-2021"),
    "gen-2023": Aggregate("gen-2023"),
    "overcommit": Aggregate("overcommit", {"cpu_allocation_ratio": "8.0"}),
    "tenant-blue": Aggregate("tenant-blue", {"filter_tenant_id": "blue"}),
}
SHAPES = (
    # share, VCPU, MEMORY_MB, DISK_GB
    (0.30, 1, 2_048, 20),
    (0.25, 2, 4_096, 40),
    (0.20, 4, 8_192, 80),
    (0.12, 8, 16_384, 160),
    (0.08, 16, 65_536, 320),
    (0.04, 32, 131_072, 640),
    (0.01, 8, 65_536, 200),  # with a GPU
)


def cluster(n: int, seed: int = 7) -> Snapshot:
    """``n`` providers of the realistic mix, built straight into arrays."""
    rng = np.random.default_rng(seed)
    kinds = rng.choice(len(NODE_TYPES), size=n, p=[t[1] for t in NODE_TYPES])
    sizes = np.asarray([(t[4], t[3], t[2]) for t in NODE_TYPES], dtype=np.int64)[kinds]
    ratio = np.ones((n, 3), dtype=np.float64)
    ratio[:, 2] = 4.0
    reserved = np.zeros((n, 3), dtype=np.int64)
    reserved[:, 1] = 4_096
    fill = rng.beta(2.6, 1.4, size=n)
    capacity = ((sizes - reserved) * ratio).astype(np.int64)
    jitter = rng.uniform(0.8, 1.0, size=(n, 3))
    used = np.floor(capacity * fill[:, None] * jitter).astype(np.int64)
    providers = _records(n, kinds, rng)
    ones = np.ones((n, 3), dtype=np.int64)
    return Snapshot(
        providers=providers,
        classes=CLASSES,
        total=sizes,
        reserved=reserved,
        used=used,
        allocation_ratio=ratio,
        min_unit=ones,
        max_unit=ones * (2**31 - 1),
        step_size=ones.copy(),
        aggregates=AGGREGATES,
    )


def _records(n: int, kinds: IntArray, rng: np.random.Generator) -> tuple[Provider, ...]:
    zones = rng.integers(0, len(ZONES), size=n).tolist()
    ssd = (rng.random(n) < 0.5).tolist()
    disabled = (rng.random(n) < 0.02).tolist()
    generation = rng.integers(0, 3, size=n).tolist()
    overcommit = (rng.random(n) < 0.1).tolist()
    tenant = (rng.random(n) < 0.05).tolist()
    io = np.where(rng.random(n) < 0.05, rng.integers(1, 4, size=n), 0).tolist()
    traits: dict[tuple[int, bool], frozenset[str]] = {}
    aggregates: dict[tuple[int, bool, bool], frozenset[str]] = {}
    records = []
    for i, kind in enumerate(kinds.tolist()):
        t = traits.setdefault(
            (kind, ssd[i]), frozenset(NODE_TYPES[kind][5] + (("SSD",) if ssd[i] else ()))
        )
        key = (generation[i], overcommit[i] and kind != 4, tenant[i])
        a = aggregates.get(key)
        if a is None:
            names = [f"gen-{2019 + 2 * key[0]}"]
            names += ["overcommit"] * key[1] + ["tenant-blue"] * key[2]
            a = aggregates[key] = frozenset(names)
        pid = f"node-{i:07d}"
        records.append(
            Provider(
                pid,
                host=pid,
                state="disabled" if disabled[i] else "enabled",
                availability_zone=ZONES[zones[i]],
                traits=t,
                aggregates=a,
                num_io_ops=io[i],
            )
        )
    return tuple(records)


def requests(count: int, seed: int = 11) -> list[Request]:
    """The mix: seven shapes, a quarter asking a zone, a tenth SSD, the GPU
    shape a GPU."""
    rng = random.Random(seed)
    shares = [s[0] for s in SHAPES]
    out = []
    for k in range(count):
        (i,) = rng.choices(range(len(SHAPES)), shares)
        _, vcpu, memory, disk = SHAPES[i]
        traits = {"HW_GPU"} if i == len(SHAPES) - 1 else set()
        if rng.random() < 0.1:
            traits.add("SSD")
        zone = rng.choice(ZONES) if rng.random() < 0.25 else None
        out.append(
            Request(
                f"r{k}",
                {"VCPU": vcpu, "MEMORY_MB": memory, "DISK_GB": disk},
                project_id="blue" if rng.random() < 0.05 else "default",
                availability_zone=zone,
                required_traits=frozenset(traits),
            )
        )
    return out


def engines(packing: bool = False, levels: int = 64) -> tuple[Engine, Engine]:
    """(full scan, bounded) with the default filters and weighers, or the
    resource weighers negated (packing)."""
    data: dict[str, Any] = {}
    if packing:
        data["weighers"] = {"RAMWeigher": -1.0, "CPUWeigher": -1.0, "DiskWeigher": -1.0}
        data["weighers"] |= {"IoOpsWeigher": -1.0, "BuildFailureWeigher": 1_000_000.0}
    full = SchedulerConfig.from_mapping({**data, "scheduler": {"mode": "full"}}).engine()
    scheduler = {"mode": "bounded", "levels": levels}
    return full, SchedulerConfig.from_mapping({**data, "scheduler": scheduler}).engine()


def regret(full: Engine, snapshot: Snapshot, request: Request, row: int) -> float:
    """The score ``row`` loses against the full scan's best, as a share of
    the spread of the full scan's scores over every feasible provider."""
    rows = full.feasible(snapshot, request)
    scores = weigh_all(full.weighers, Context(snapshot, request, snapshot.used), rows)
    best, worst = float(scores.max()), float(scores.min())
    if best == worst:
        return 0.0
    chosen = float(scores[int(np.searchsorted(rows, row))])
    return (best - chosen) / (best - worst)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _ms(samples: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
    }


@dataclass(slots=True)
class _Stream:
    """A snapshot that takes each bounded pick, as the scheduler's wave does."""

    snapshot: Snapshot
    used: IntArray

    @classmethod
    def of(cls, snapshot: Snapshot) -> _Stream:
        used = snapshot.used.copy()
        return cls(snapshot.with_used(used, ()), used)

    def take(self, placement: Placement, request: Request) -> None:
        demand = demand_row(self.snapshot, request.resources)
        rows = [self.snapshot.row_of[pid] for pid in placement.providers]
        for row in rows:
            self.used[row] += demand
        self.snapshot = self.snapshot.with_used(self.used, rows)


def decisions(n: int, count: int, full_every: int, counted: range = range(0)) -> dict[str, Any]:
    """Decision latency at ``n`` providers, bounded and full alternated;
    under callgrind, the bounded decisions numbered in ``counted`` each
    dumped as ``decision K`` (see :mod:`bench.callgrind`)."""
    gc.collect()
    before = _rss()
    with timed() as built:
        snapshot = cluster(n)
    held = _rss() - before
    full, bounded = engines()
    with timed() as indexed:
        index = bounded.index(snapshot)
    stream = _Stream.of(snapshot)
    asked = requests(count)
    full.place(stream.snapshot, asked[0])  # the filters' tables, as a running scheduler has
    samples: dict[str, list[float]] = {
        "bounded": [],
        "bounded_cpu": [],
        "bounded_cpu_steady": [],
        "full": [],
        "full_cpu": [],
        "sync": [],
        "regret": [],
    }
    seen: dict[str, list[int]] = {"examined": [], "scored": [], "full_scored": []}
    marks = Marks() if counted else None
    for k, request in enumerate(asked):
        if marks is not None and k == counted.start:
            marks.start()  # instrumented from here: the steps before run at valgrind's pace
        if marks is not None and k in counted:
            marks.zero()
        started, cpu = time.perf_counter(), time.thread_time()
        bounded.index(stream.snapshot)  # the last pick's row re-read: the update
        synced = time.perf_counter()
        placement = bounded.place(stream.snapshot, request)
        if marks is not None and k in counted:
            marks.dump(f"decision {k}")
            if k == counted[-1]:
                marks.stop()
        samples["sync"].append(synced - started)
        samples["bounded"].append(time.perf_counter() - started)
        samples["bounded_cpu"].append(time.thread_time() - cpu)
        if k % full_every != 1:  # not straight after a full scan, which leaves the caches cold
            samples["bounded_cpu_steady"].append(samples["bounded_cpu"][-1])
        seen["examined"].append(placement.examined)
        seen["scored"].append(placement.scored)
        if k % full_every == 0:
            started, cpu = time.perf_counter(), time.thread_time()
            best = full.place(stream.snapshot, request)
            samples["full"].append(time.perf_counter() - started)
            samples["full_cpu"].append(time.thread_time() - cpu)
            seen["full_scored"].append(best.scored)
            assert best.placed == placement.placed, "a false no valid host"
            if placement.placed:
                row = stream.snapshot.row_of[placement.providers[0]]
                samples["regret"].append(regret(full, stream.snapshot, request, row))
        if placement.placed:
            stream.take(placement, request)
    figures = {
        "snapshot_build_s": round(built[0], 2),
        "snapshot_bytes_per_provider": round(held / n),
        "index_build_s": round(indexed[0], 2),
        "index_bytes": index.memory_bytes(),
        "index_bytes_per_provider": round(index.memory_bytes() / n, 1),
        "index_groups": index.group_count,
        "index_buckets": len(index.buckets),
        "index_rebuilds": bounded.index_builds - 1,
        "index_update_us_per_record": round(1e6 * float(np.median(samples["sync"])), 1),
        "examined_mean": round(float(np.mean(seen["examined"])), 1),
        "examined_p99": float(np.percentile(seen["examined"], 99)),
        "scored_max": max(seen["scored"]),
        "full_scored_mean": round(float(np.mean(seen["full_scored"])), 1),
        "regret_mean": round(float(np.mean(samples["regret"])), 5),
        "regret_p99": round(float(np.percentile(samples["regret"], 99)), 5),
        "full_decisions": len(samples["full"]),
    }
    for mode in ("bounded", "bounded_cpu", "bounded_cpu_steady", "full", "full_cpu"):
        figures |= {f"{mode}_{k}": v for k, v in _ms(samples[mode]).items()}
    return figures


# -- quality: a trace driven to saturation -------------------------------------


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    request: Request
    lifetime: float


def holds(snapshot: Snapshot) -> int:
    """About how many requests of the mix the snapshot's providers hold when
    empty: each provider by its scarcest class against the mix's mean."""
    shares = np.asarray([s[0] for s in SHAPES])
    mean = np.asarray([[s[3], s[2], s[1]] for s in SHAPES]).T @ shares / shares.sum()
    capacity = snapshot.capacity()[snapshot.enabled]
    return int((capacity / mean).min(axis=1).sum())


def trace(snapshot: Snapshot, load: float = 1.2, seed: int = 3) -> list[Arrival]:
    """Poisson arrivals of the request mix (one per unit of time) with
    lognormal lifetimes (a heavy tail: most short, a few living through the
    whole trace) whose mean offers ``load`` times what the snapshot holds
    empty; four times that many arrivals, to run well into saturation."""
    rng = random.Random(seed)
    mean_life = load * holds(snapshot)
    mix = requests(4 * int(mean_life), seed)
    sigma = 1.4
    at, out = 0.0, []
    for request in mix:
        at += rng.expovariate(1.0)
        life = rng.lognormvariate(math.log(mean_life) - sigma**2 / 2, sigma)
        out.append(Arrival(at, request, life))
    return out


def _empty(snapshot: Snapshot) -> Snapshot:
    return snapshot.with_used(np.zeros_like(snapshot.used))


def replay(
    snapshot: Snapshot, arrivals: Sequence[Arrival], engine: Engine, full: Engine, score: bool
) -> dict[str, Any]:
    """Place the trace on ``snapshot`` with ``engine``; with ``score``,
    every decision's regret against the full scan on the same state."""
    stream = _Stream.of(_empty(snapshot))
    leaving: list[tuple[float, int, int, IntArray]] = []
    placed = failed = false_no = 0
    lost: list[float] = []
    for k, arrival in enumerate(arrivals):
        while leaving and leaving[0][0] <= arrival.at:
            _, _, row, demand = heapq.heappop(leaving)
            stream.used[row] -= demand
            stream.snapshot = stream.snapshot.with_used(stream.used, [row])
        placement = engine.place(stream.snapshot, arrival.request)
        if not placement.placed:
            failed += 1
            if engine is not full and full.place(stream.snapshot, arrival.request).placed:
                false_no += 1
            continue
        placed += 1
        row = stream.snapshot.row_of[placement.providers[0]]
        if score:
            lost.append(regret(full, stream.snapshot, arrival.request, row))
        demand = demand_row(stream.snapshot, arrival.request.resources)
        heapq.heappush(leaving, (arrival.at + arrival.lifetime, k, row, demand))
        stream.take(placement, arrival.request)
    return {
        "placed": placed,
        "failed": failed,
        "false_no_valid_host": false_no,
        "stranded_pct": round(stranded(stream.snapshot), 3),
        "used_pct": round(used_share(stream.snapshot), 3),
        **(
            {
                "regret_mean": round(float(np.mean(lost)), 5),
                "regret_p99": round(float(np.percentile(lost, 99)), 5),
            }
            if lost
            else {}
        ),
    }


def stranded(snapshot: Snapshot) -> float:
    """Free capacity on enabled providers that no shape of the mix fits any
    more, as a percentage of all capacity (the mean over classes)."""
    free = np.maximum(snapshot.capacity() - snapshot.used, 0)
    smallest = np.asarray([[s[3], s[2], s[1]] for s in SHAPES], dtype=np.int64)
    fits = (free[:, None, :] >= smallest[None, :, :]).all(axis=2).any(axis=1)
    stuck = ~fits & snapshot.enabled
    share = free[stuck].sum(axis=0) / np.maximum(snapshot.capacity().sum(axis=0), 1)
    return 100.0 * float(share.mean())


def used_share(snapshot: Snapshot) -> float:
    share = snapshot.used.sum(axis=0) / np.maximum(snapshot.capacity().sum(axis=0), 1)
    return 100.0 * float(share.mean())


def quality(providers: int, rounds: int) -> dict[str, Any]:
    """Full scan and bounded mode alternated on the same trace, per policy."""
    snapshot = cluster(providers, seed=17)
    arrivals = trace(snapshot)
    figures: dict[str, Any] = {"quality_providers": providers, "quality_requests": len(arrivals)}
    for policy, packing in (("spread", False), ("pack", True)):
        full, bounded = engines(packing)
        runs: dict[str, list[dict[str, Any]]] = {"full": [], "bounded": []}
        for _ in range(rounds):
            note(f"quality: {policy}, full scan ...")
            runs["full"].append(replay(snapshot, arrivals, full, full, False))
            note(f"quality: {policy}, bounded ...")
            runs["bounded"].append(replay(snapshot, arrivals, bounded, full, True))
        for mode, results in runs.items():
            for key, value in results[-1].items():
                figures[f"quality_{policy}_{mode}_{key}"] = value
    return figures


# -- start-up: from the view and from a replay --------------------------------------


def startup(providers: int, rounds: int, keep: str = "") -> dict[str, Any]:
    """Seconds to a bounded scheduler's first snapshot and index, from the
    view and from a replay of the log (the median of ``rounds``, alternated),
    and what the first from the view holds resident, a provider. ``keep``:
    a directory that keeps the published cluster, or holds it already (a
    million providers take many minutes to publish)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="berth-scale-") as tmp:
        app = _published(Path(keep or tmp), providers)
        events = app.settings.topics.events
        ends = [app.log.end_offset(events, p) for p in range(app.settings.partitions)]
        runs: dict[str, list[float]] = {"view": [], "replay": []}
        cpu: dict[str, list[float]] = {"view": [], "replay": []}
        resident = 0
        for _ in range(max(rounds, 2)):
            for source in ("view", "replay"):
                _, engine = engines()
                before = _rss()
                began = time.process_time()
                with timed() as t:
                    engine.index(_started(app, source, ends))
                runs[source].append(t[0])
                cpu[source].append(time.process_time() - began)
                if source == "view" and not resident:  # (the index's engine still holds it)
                    resident = _rss() - before
                del engine
                gc.collect()
        app.close()  # (which checkpoints the view's write-ahead log into its file)
        view_bytes = (Path(app.settings.data_dir) / "view.db").stat().st_size
    return {
        "startup_providers": providers,
        "startup_records": sum(ends),
        "startup_view_s": round(float(np.median(runs["view"])), 2),
        "startup_view_cpu_s": round(float(np.median(cpu["view"])), 2),
        "startup_replay_s": round(float(np.median(runs["replay"])), 2),
        "startup_replay_cpu_s": round(float(np.median(cpu["replay"])), 2),
        "startup_view_resident_bytes_per_provider": round(resident / providers),
        "startup_view_db_bytes_per_provider": round(view_bytes / providers),
        "startup_max_resident_mb": round(_max_rss() / 2**20),
    }


def _published(directory: Path, providers: int) -> App:
    """The app of ``directory``, a cluster of ``providers`` published there
    through the writers first unless its view holds them already."""
    from sqlalchemy import func, select

    from bench.end_to_end import _setup
    from berth.app import Settings
    from projections.view.tables import providers as providers_table

    if (directory / "view.db").exists():
        app = App(Settings(data_dir=directory, partitions=16))
        with app.engine.connect() as conn:
            held = conn.execute(select(func.count()).select_from(providers_table)).scalar_one()
        if held != providers:
            raise SystemExit(f"{directory} does not hold {providers} providers")
        return app
    note(f"start-up: {providers} providers published through the writers ...")
    return _setup(directory, providers, partitions=16)


def _started(app: App, source: str, ends: Sequence[int]) -> Snapshot:
    """A scheduler's first snapshot, from the view or from a replay."""
    from consumers.snapshot_source import LiveSnapshot

    if source == "view":
        return LiveSnapshot(app.engine)()
    return _replayed(app.log, app.settings.topics.events, ends)


def _max_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _replayed(log: Log, events: str, ends: Sequence[int]) -> Snapshot:
    """The snapshot of every partition's records decided again in memory."""
    from berth.replay import decide_until
    from consumers.state_snapshot import snapshot_of
    from projections.state import PartitionState

    states = [PartitionState(p, len(ends)) for p in range(len(ends))]
    gc.disable()  # deciding makes next to no cycles: the collector paused, as a replay does
    try:
        for state, end in zip(states, ends, strict=True):
            decide_until(log, events, state, 0, end)
    finally:
        gc.enable()
    return snapshot_of(states)


# -- sustained placements through the real writers ---------------------------------


Mode = Literal["full", "bounded"]
WHERE = {0: "one_process", 1: "two_processes"}
"""The writers' processes -> the figures' name: 0, a thread of the
scheduler's process (one GIL for the whole placement path); 1, a ``berth
projector`` process of their own beside the scheduler's, as deployed."""


def through_writers(
    providers: int,
    count: int,
    rounds: int,
    modes: Sequence[Mode] = ("full", "bounded"),
    processes: Sequence[int] = (0, 1),
    depths: Sequence[int] = (SUSTAINED_DEPTH,),
    waves: Sequence[int] = (SUSTAINED_WAVE,),
) -> dict[str, Any]:
    """Placements a second, in wall and in CPU time, each run's, alternated
    over ``modes``, the writers' ``processes`` (see :data:`WHERE`) and the
    scheduler's ``depths`` and ``waves`` (waves in flight, requests a wave),
    and the index builds of the last run of each. On a shared machine the
    wall time is mostly waiting for a core: the CPU figures are each
    process's CPU time a placement and the placements a CPU second of both
    (the writers' thread or process included). A name says its depth and
    wave (``_depth2_wave1000``) when more than one of either is alternated."""
    from bench.end_to_end import sustained

    figures: dict[str, Any] = {
        "writers_providers": providers,
        "writers_requests": count,
        "writers_depths": list(depths),
        "writers_waves": list(waves),
    }
    runs: dict[str, dict[str, list[float]]] = {}
    settings = [(d, w) for d in depths for w in waves]
    for _ in range(rounds):
        for mode in modes:
            for writers in processes:
                for depth, wave in settings:
                    name = f"writers_{mode}_{WHERE[writers]}"
                    if len(settings) > 1:
                        name += f"_depth{depth}_wave{wave}"
                    note(f"through the writers, {providers} providers, {name} ...")
                    result = sustained(
                        providers,
                        count,
                        100.0,
                        False,
                        wave=wave,
                        writer_processes=writers,
                        bounded=Bounded(mode),
                        depth=depth,
                    )
                    _note_run(runs.setdefault(name, {}), result, writers)
                    figures[f"{name}_failed"] = result["failed"]
                    figures[f"{name}_startup_s"] = result["startup_s"]
                    figures[f"{name}_index_builds"] = result["index_builds"]
    for name, run in runs.items():
        figures |= {f"{name}_{k}": v for k, v in run.items()}
    return figures


def _note_run(run: dict[str, list[float]], result: dict[str, Any], writers: int) -> None:
    """One run's figures added to the lists of its setting's runs."""
    assert result["overcommitted_providers"] == 0
    placed = max(result["placed"], 1)
    run.setdefault("placements_per_s", []).append(result["placements_per_s"])
    run.setdefault("placements_per_cpu_s", []).append(result["placements_per_cpu_s"])
    run.setdefault("scheduler_cpu_us", []).append(round(result["cpu_s"] / placed * 1e6, 1))
    if writers:
        run.setdefault("projector_cpu_us", []).append(
            round(result["projectors_cpu_s"] / placed * 1e6, 1)
        )
    # a deeper pipeline ranks on staler views: more claims lost, tried again
    run.setdefault("attempts", []).append(result["attempts"])
    run.setdefault("wave_decided_p99_ms", []).append(result["wave_decided_ms"].get("p99", 0.0))


def _instructions(counted: range) -> dict[str, Any]:
    """The counted decisions' instructions (the last size's), from callgrind's files."""
    counts = totals(os.getpid())
    each = {k: counts[f"decision {k}"] for k in counted if f"decision {k}" in counts}
    if not each:
        return {}
    spread = np.asarray(list(each.values()), dtype=np.float64)
    worst = sorted(each, key=each.__getitem__, reverse=True)[:10]
    return {
        "instructions_decisions": len(each),
        "instructions_mean": round(float(spread.mean())),
        "instructions_p50": round(float(np.percentile(spread, 50))),
        "instructions_p99": round(float(np.percentile(spread, 99))),
        "instructions_max": int(spread.max()),
        "instructions_worst": [[k, each[k]] for k in worst],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--full-every", type=int, default=20)
    parser.add_argument("--quality-providers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1, help="alternations of full and bounded")
    parser.add_argument("--startup-providers", type=int, default=100_000)
    parser.add_argument(
        "--startup-data-dir",
        default="",
        help="keep the start-up's published cluster here, or start from the one it holds",
    )
    parser.add_argument("--writers-providers", type=int, default=100_000)
    parser.add_argument("--writers-requests", type=int, default=20_000)
    parser.add_argument(
        "--writers-modes", default="full,bounded", help="the writers part's modes, alternated"
    )
    parser.add_argument(
        "--writers-processes",
        default="0,1",
        help="the writers part's writers, alternated: 0 in a thread of the scheduler's "
        "process, 1 in a berth projector process of their own",
    )
    parser.add_argument(
        "--writers-depths",
        default=str(SUSTAINED_DEPTH),
        help="the writers part's scheduler depths (waves in flight), alternated",
    )
    parser.add_argument(
        "--writers-waves",
        default=str(SUSTAINED_WAVE),
        help="the writers part's waves (requests ranked on one snapshot), alternated",
    )
    parser.add_argument(
        "--callgrind",
        default="",
        metavar="FIRST:END",
        help="under valgrind --tool=callgrind --instr-atstart=no: count the bounded "
        "decisions FIRST..END-1 one by one (instructions in the JSON)",
    )
    args = parser.parse_args()
    counted = range(*(int(k) for k in args.callgrind.split(":"))) if args.callgrind else range(0)
    tune_gc()
    figures: dict[str, Any] = {"compiled": compiled()}
    for n in (int(s) for s in args.sizes.split(",") if s):
        note(f"{n} providers: decisions, bounded and full alternated ...")
        found = decisions(n, args.decisions, args.full_every, counted)
        figures |= {f"{k}_{n}": v for k, v in found.items()}
        gc.collect()
    if counted:
        figures |= _instructions(counted)
    if args.quality_providers:
        figures |= quality(args.quality_providers, args.rounds)
    if args.startup_providers:
        figures |= startup(args.startup_providers, args.rounds, args.startup_data_dir)
    if args.writers_providers:
        modes: list[Mode] = []
        for mode in (m for m in args.writers_modes.split(",") if m):
            if mode not in ("full", "bounded"):
                parser.error(f"--writers-modes: {mode} is neither full nor bounded")
            modes.append("full" if mode == "full" else "bounded")
        processes = [int(k) for k in args.writers_processes.split(",") if k]
        if not set(processes) <= set(WHERE):
            parser.error("--writers-processes: each is 0 or 1")
        figures |= through_writers(
            args.writers_providers,
            args.writers_requests,
            args.rounds,
            modes,
            processes,
            [int(k) for k in args.writers_depths.split(",") if k],
            [int(k) for k in args.writers_waves.split(",") if k],
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
