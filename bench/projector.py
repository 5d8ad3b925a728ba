"""Projector benchmarks: in-memory apply, durable end to end, replay, memory.

    python -m bench.projector [--replay-records N] [--replay-runs N] [--kafka auto|HOST:PORT]
    python -m bench.projector --durable-only [--providers 10000] [--described]
    valgrind --tool=callgrind --instr-atstart=no python -m bench.projector --apply-instructions

Progress goes to stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.callgrind import Marks, totals
from bench.common import (
    aggregate_definitions,
    aggregate_member,
    claim,
    description,
    lifecycle,
    metrics_report,
    note,
    provider_events,
    timed,
)
from berth.app import App, Settings, tune_gc
from berth.compile import compiled
from berth.replay import default_jobs, replay
from consumers.partition_writer import catch_up_all
from ledger.log import Append
from ledger.partitioner import partition_for
from ledger.publisher import partition_keys
from projections.projector import apply
from projections.state import PartitionState
from schemas.codec import decode_event
from schemas.outcomes import Outcome


def _cluster(providers: int, partitions: int = 1) -> dict[int, list[str]]:
    by_partition: dict[int, list[str]] = {p: [] for p in range(partitions)}
    for n in range(providers):
        pid = f"node-{n:06d}"
        by_partition[partition_for(pid.encode(), partitions)].append(pid)
    return by_partition


def _state_with(pids: list[str]) -> PartitionState:
    state = PartitionState(0, 1)
    for offset, raw in enumerate(r for pid in pids for r in provider_events(pid, 1)):
        apply(state, offset, decode_event(raw))
    return state


def _applied(
    state: PartitionState, raws: list[bytes], kinds: Counter[str], first_offset: int = 0
) -> float:
    """Seconds ``apply`` took over ``raws``, decoded as the writer does, a
    batch of 2,000 at a time just before it is applied (decoding untimed)."""
    spent = 0.0
    for start in range(0, len(raws), 2_000):
        events = [decode_event(raw) for raw in raws[start : start + 2_000]]
        emitted: list[list[Outcome]] = []
        with timed() as t:
            for k, e in enumerate(events, first_offset + start):
                emitted.append(apply(state, k, e))
        spent += t[0]
        for outcomes in emitted:
            for outcome in outcomes:
                kinds[outcome.kind] += 1
    return spent


def bench_apply(claims: int = 200_000, providers: int = 1_000) -> dict[str, Any]:
    """Claims decided per second by ``apply`` alone, in one partition of
    ``providers`` (one of 16 partitions of a 16,000-provider cluster): first
    while the partition fills, then a steady state in which 60 s leases expire
    as claims arrive one simulated ms apart. Then a mix where claims are
    consumed and released (records per second)."""
    pids = _cluster(providers)[0]
    raws = [claim(f"r{k}", pids[k % providers], 1_000 + k, lease_ms=60_000) for k in range(claims)]
    filling = 60_000  # claims before the first lease runs out
    # this machine's speed drifts by a quarter from one second to the next:
    # the fill is timed three times on a fresh state and the median reported
    fills: list[float] = []
    for _ in range(3):
        state = _state_with(pids)
        tune_gc()
        kinds: Counter[str] = Counter()
        fills.append(_applied(state, raws[:filling], kinds))
    fill_s = statistics.median(fills)
    steady_s = _applied(state, raws[filling:], kinds, filling)
    mix: list[bytes] = []
    ts = 10_000_000
    for k in range(claims):
        rid, pid = f"m{k}", pids[k % providers]
        mix.append(claim(rid, pid, ts + k))
        if k >= 1000:
            old = f"m{k - 1000}"
            kind = "consume" if k % 2 else "release"
            mix.append(lifecycle(kind, old, pids[(k - 1000) % providers], ts + k))
    state = _state_with(pids)
    tune_gc()
    mix_s = _applied(state, mix, Counter())
    gc.unfreeze()
    return {
        "apply_claims_per_s": round(filling / fill_s),
        "apply_claims_per_s_range": [round(filling / t) for t in (max(fills), min(fills))],
        "apply_claims_with_an_expiry_each_per_s": round((claims - filling) / steady_s),
        "apply_claims_accepted": kinds["accepted"],
        "apply_holds_expired": kinds["expired"],
        "apply_mixed_records_per_s": round(len(mix) / mix_s),
        "apply_claims": claims,
    }


def apply_instructions(claims: int = 20_000, providers: int = 1_000) -> dict[str, Any]:
    """Instructions ``apply`` takes a claim, counted by callgrind (which does
    not drift with the machine's load as its times do): ``claims`` claims
    decoded beforehand, applied into a partition of ``providers`` as it
    fills (none expires). Empty outside valgrind."""
    pids = _cluster(providers)[0]
    events = [
        decode_event(claim(f"r{k}", pids[k % providers], 1_000 + k, lease_ms=60_000))
        for k in range(claims)
    ]
    state = _state_with(pids)
    tune_gc()
    marks = Marks()
    marks.start()
    marks.zero()
    for offset, event in enumerate(events):
        apply(state, offset, event)
    marks.dump("apply")
    marks.stop()
    if not marks.running:
        return {}
    counted = totals(os.getpid())["apply"]
    return {"apply_instructions_per_claim": round(counted / claims), "apply_claims": claims}


def bench_decode(records: int = 100_000) -> dict[str, Any]:
    raws = [claim(f"r{k}", "node-1", k) for k in range(records)]
    with timed() as t:
        for raw in raws:
            decode_event(raw)
    return {"decode_claims_per_s": round(records / t[0])}


def _populate(app: App, providers: int, described: bool = False) -> list[str]:
    by_partition = _cluster(providers, app.settings.partitions)
    appends = [
        Append(p, pid.encode(), raw)
        for p, pids in by_partition.items()
        for pid in pids
        for raw in provider_events(pid, 1)
    ]
    if described:  # described, and members of aggregates defined in every partition
        keys = partition_keys(app.settings.partitions)
        appends += [Append(p, keys[p].encode(), raw) for p, raw in aggregate_definitions(keys, 1)]
        appends += [
            Append(p, pid.encode(), raw(pid, int(pid[5:]), 1))
            for p, pids in by_partition.items()
            for pid in pids
            for raw in (description, aggregate_member)
        ]
    app.log.append(app.settings.topics.events, appends)
    return [pid for pids in by_partition.values() for pid in pids]


def _stream(
    pids: list[str],
    claims: int,
    partitions: int,
    claims_per_ms: int,
    report_every_ms: int | None,
) -> list[Append]:
    """``claims`` claims, ``claims_per_ms`` a millisecond of log time from
    2,000 on; with ``report_every_ms``, each provider's metrics report that
    often, spread evenly over the period, in time order among the claims."""
    appends: list[Append] = []
    reported = 0  # reports so far: report r is provider r % n's, at r x period / n
    n = len(pids)
    for k in range(claims):
        ts = 2_000 + k // claims_per_ms
        while report_every_ms is not None and 2_000 + reported * report_every_ms // n <= ts:
            pid = pids[reported % n]
            at = 2_000 + reported * report_every_ms // n
            raw = metrics_report(pid, reported % n, at)
            appends.append(Append(partition_for(pid.encode(), partitions), pid.encode(), raw))
            reported += 1
        pid = pids[k % n]
        raw = claim(f"d{k}", pid, ts)
        appends.append(Append(partition_for(pid.encode(), partitions), pid.encode(), raw))
    return appends


def bench_durable(
    directory: Path,
    claims: int = 100_000,
    providers: int = 1_000,
    partitions: int = 4,
    log_url: str = "",
    described: bool = False,
    claims_per_ms: int = 1,
    report_every_ms: int | None = None,
) -> dict[str, Any]:
    """Claims/s through append (fsync, group commit) + apply + view commit
    (outcomes published too), on the embedded log or on ``log_url``. With
    ``described`` every provider has a description and is a member of one
    of the aggregates (each defined in every partition); with
    ``report_every_ms`` each reports its metrics that often in log time,
    among the claims (``claims_per_ms`` of them a millisecond), and the
    time they take counts against the claims. The setup's writes are in
    the view's file before the window; the bytes and write calls of the
    window are reported too."""
    directory.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        data_dir=directory,
        partitions=partitions,
        log_url=log_url,
        db_url=f"sqlite:///{directory / 'view.db'}",
    )
    with App(settings) as app:
        pids = _populate(app, providers, described)
        writers = app.writers()
        catch_up_all(writers)
        _checkpoint(app)
        events = app.settings.topics.events
        batch = 2_000
        # the producers' work (encoding, routing) is done up front: this measures
        # Berth's path from append to view commit
        stream = _stream(pids, claims, partitions, claims_per_ms, report_every_ms)
        batches = [stream[start : start + batch] for start in range(0, len(stream), batch)]
        cpu_started = time.process_time()  # every thread's: the fsync helpers' too
        written = _written()
        with timed() as t:
            for appends in batches:
                app.log.append(events, appends)
                catch_up_all(writers)
        cpu_s = time.process_time() - cpu_started
        bytes_written, write_calls = (b - a for a, b in zip(written, _written(), strict=True))
    return {
        "claims_per_s": round(claims / t[0]),
        "claims_per_cpu_s": round(claims / cpu_s),
        "claims": claims,
        "metrics_reports": len(stream) - claims,
        "bytes_written": bytes_written,
        "write_calls": write_calls,
    }


def _checkpoint(app: App) -> None:
    """The setup's pages copied from the view's WAL into its file and the
    WAL emptied, before the timed window: else the window's first
    checkpoint copies them, and the claims are charged for a described
    setup's providers rewritten with their descriptions and ratios (about
    21 MB and 5,000 write calls at 10,000 providers)."""
    conn = app.write_engine.raw_connection()  # outside a transaction, which would refuse it
    try:
        busy = conn.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    finally:
        conn.close()
    assert busy == 0, "the setup's WAL could not be checkpointed"


def _written() -> tuple[int, int]:
    """(bytes, write calls) this process has written so far, as Linux
    counts them (``/proc/self/io``: the log's files and the view's, its
    WAL's checkpoints included)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["write_bytes"]), int(fields["syscw"])


class Churn:
    """The replay benchmark's stream of events after registration: claims,
    of which some are consumed, some released and the rest left to expire
    (seeded, so every run writes the same log)."""

    def __init__(self, pids: list[str], partitions: int, seed: int = 11) -> None:
        self.pids = pids
        self.partitions = partitions
        self.rng = random.Random(seed)
        self.k = 0
        self.open: list[tuple[str, str]] = []

    def next(self, count: int) -> list[Append]:
        """The next ``count`` events, the k-th stamped 5,000 + k ms."""
        rng = self.rng
        appends = []
        for _ in range(count):
            ts = 5_000 + self.k
            if self.open and rng.random() < 0.45:
                rid, pid = self.open.pop(rng.randrange(len(self.open)))
                kind = "consume" if rng.random() < 0.6 else "release"
                raw = lifecycle(kind, rid, pid, ts)
            else:
                pid = self.pids[rng.randrange(len(self.pids))]
                rid = f"x{self.k}"
                raw = claim(rid, pid, ts, lease_ms=rng.choice((2_000, 600_000)))
                self.open.append((rid, pid))
            self.k += 1
            appends.append(Append(partition_for(pid.encode(), self.partitions), pid.encode(), raw))
        return appends


def _write_log(directory: Path, records: int, providers: int, partitions: int) -> int:
    """A log of ``records`` events: registrations, then :class:`Churn`."""
    settings = Settings(data_dir=directory, partitions=partitions)
    with App(settings) as app:
        churn = Churn(_populate(app, providers), partitions)
        written = 2 * providers
        events = app.settings.topics.events
        while written < records:
            appends = churn.next(min(10_000, records - written))
            app.log.append(events, appends)
            written += len(appends)
    return written


def bench_replay(
    directory: Path, records: int, providers: int = 10_000, jobs: int = 2, runs: int = 3
) -> dict[str, Any]:
    """The same log replayed ``runs`` times into a fresh view: the machine's
    speed drifts from one run to the next, so the median is reported, with
    the range, and the CPU the replay took in all its processes."""
    note(f"writing a {records}-record log ...")
    written = _write_log(directory, records, providers, partitions=8)
    seconds: list[float] = []
    cpu: list[float] = []
    outcomes = 0
    for run in range(runs):
        note(f"replaying it into a fresh SQLite view ({run + 1} of {runs}) ...")
        before = _cpu_seconds()
        with timed() as t:
            outcomes = replay(Settings(data_dir=directory), verify=False, jobs=jobs).outcomes
        cpu.append(_cpu_seconds() - before)
        seconds.append(t[0])
    median = statistics.median(seconds)
    return {
        "replay_records": written,
        "replay_s": round(median, 2),
        "replay_s_range": [round(min(seconds), 2), round(max(seconds), 2)],
        "replay_cpu_s": round(statistics.median(cpu), 2),
        "replay_records_per_s": round(written / median),
        "replay_outcomes": outcomes,
        "replay_jobs": jobs,
    }


def _cpu_seconds() -> float:
    """CPU this process and its finished children have used (a replay's
    processes are joined before it returns)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def bench_memory(providers: int = 100_000, reservations: int = 1_000_000) -> dict[str, Any]:
    """Bytes of projector state per provider and per active reservation."""
    pids = [f"node-{n:06d}" for n in range(providers)]
    registrations = [decode_event(r) for pid in pids for r in provider_events(pid, 1)]
    tracemalloc.start()
    state = PartitionState(0, 1)
    base = tracemalloc.get_traced_memory()[0]
    for offset, event in enumerate(registrations):
        apply(state, offset, event)
    del registrations
    after_providers = tracemalloc.get_traced_memory()[0]
    per_provider = (after_providers - base) / providers
    tracemalloc.stop()
    claims_per_chunk = 50_000
    total = 0
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for start in range(0, reservations, claims_per_chunk):
        chunk = [
            decode_event(claim(f"res-{k:08d}", pids[k % providers], 10 + k, lease_ms=10**8))
            for k in range(start, start + claims_per_chunk)
        ]
        for k, event in enumerate(chunk, start):
            apply(state, k, event)
        total += len(chunk)
        del chunk
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(state.reservations) == reservations, "every claim should fit"
    return {
        "memory_bytes_per_provider": round(per_provider),
        "memory_bytes_per_reservation": round((after - before) / total),
        "memory_providers": providers,
        "memory_reservations": total,
    }


def _durable_runs(providers: int, described: bool, runs: int = 3) -> dict[str, Any]:
    """The durable figure ``runs`` times, each on a fresh directory: its median and range."""
    nova = {"described": True, "claims_per_ms": 20, "report_every_ms": 10_000} if described else {}
    rates: list[int] = []
    per_cpu_s: list[int] = []
    written: list[int] = []
    calls: list[int] = []
    reports = 0
    for run in range(runs):
        note(f"durable end to end ({run + 1} of {runs}) ...")
        with tempfile.TemporaryDirectory(prefix="berth-bench-") as work:
            found = bench_durable(Path(work), providers=providers, **nova)  # type: ignore[arg-type]
        rates.append(found["claims_per_s"])
        per_cpu_s.append(found["claims_per_cpu_s"])
        written.append(found["bytes_written"])
        calls.append(found["write_calls"])
        reports = found["metrics_reports"]
    return {
        "durable_claims_per_s": statistics.median(rates),
        "durable_claims_per_s_range": [min(rates), max(rates)],
        "durable_claims_per_cpu_s": statistics.median(per_cpu_s),
        "durable_mb_written": round(statistics.median(written) / 1e6, 1),
        "durable_write_calls": statistics.median(calls),
        "durable_providers": providers,
        "durable_metrics_reports": reports,
    }


@contextmanager
def _kafka(target: str) -> Iterator[str]:
    if target != "auto":
        yield target
        return
    from tests.kafka_broker import running_tansu

    with running_tansu() as bootstrap:
        yield bootstrap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replay-records", type=int, default=1_000_000)
    parser.add_argument("--replay-jobs", type=int, default=default_jobs())
    parser.add_argument("--replay-runs", type=int, default=3)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument(
        "--kafka", default="", help="auto (start tansu) or HOST:PORT for the Kafka figures"
    )
    parser.add_argument(
        "--durable-only", action="store_true", help="only the durable figure, three runs"
    )
    parser.add_argument("--providers", type=int, default=1_000, help="of the durable figure")
    parser.add_argument(
        "--described",
        action="store_true",
        help="durable: providers described and members of aggregates (20, with "
        "allocation ratios), each reporting metrics every 10 s of log time, claims at "
        "20 a ms of log time",
    )
    parser.add_argument(
        "--apply-instructions",
        action="store_true",
        help="only apply's instructions a claim, under valgrind --tool=callgrind "
        "--instr-atstart=no (callgrind's files are left in the current directory)",
    )
    args = parser.parse_args()
    tune_gc()
    figures: dict[str, Any] = {"compiled": compiled()}
    if args.apply_instructions:
        figures.update(apply_instructions())
        print(json.dumps(figures))
        return
    if args.durable_only:
        figures.update(_durable_runs(args.providers, args.described))
        print(json.dumps(figures))
        return
    note("apply in memory ...")
    figures.update(bench_apply())
    figures.update(bench_decode())
    work = Path(tempfile.mkdtemp(prefix="berth-bench-"))
    try:
        note("durable end to end ...")
        durable = bench_durable(work / "durable")
        figures["durable_claims_per_s"] = durable["claims_per_s"]
        if args.kafka:
            note("Kafka end to end ...")
            with _kafka(args.kafka) as bootstrap:
                kafka = bench_durable(work / "kafka", claims=20_000, log_url=f"kafka://{bootstrap}")
            figures["kafka_claims_per_s"] = kafka["claims_per_s"]
        figures.update(
            bench_replay(
                work / "replay", args.replay_records, jobs=args.replay_jobs, runs=args.replay_runs
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not args.skip_memory:
        note("memory ...")
        figures.update(bench_memory())
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
