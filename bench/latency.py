"""Latency on the embedded default: an append until it is durable, and a
claim until its decision.

Run ``python -m bench.latency [--claims N]``. It measures

1. one append of one 300-byte record until ``append`` returns (written and
   fsynced), from 1 thread and from 8 threads appending at once (group
   commit: a lone append is synced at once, a burst shares an fsync);
2. one claim through the Python client until the writer's decision is read
   back (``Publisher.publish`` then ``Decisions.wait``), with the partition
   writers in a ``berth projector`` process of their own, one claim at a
   time: the append, the writer waking for it, deciding, publishing the
   outcome and the client waking for that.

Progress goes to stderr; the last stdout line is one JSON object of figures
(milliseconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from bench.common import note
from berth.app import App, Settings
from berth.client import Decisions, Publisher
from ledger.embedded import EmbeddedLog
from ledger.log import Append
from tests.builders import claim, provider

_VALUE = b"v" * 290


def _quantiles(seconds: list[float], prefix: str) -> dict[str, float]:
    cuts = statistics.quantiles(seconds, n=100)
    return {
        f"{prefix}_p50_ms": round(statistics.median(seconds) * 1000, 3),
        f"{prefix}_p99_ms": round(cuts[98] * 1000, 3),
    }


def bench_appends(directory: Path, per_thread: int, threads: int) -> dict[str, float]:
    with closing(EmbeddedLog(directory)) as log:
        log.create_topic("t", 8)
        lock = threading.Lock()
        seconds: list[float] = []

        def appender(k: int) -> None:
            mine = []
            for n in range(per_thread):
                started = time.perf_counter()
                log.append("t", [Append(k % 8, f"k{k}-{n}".encode(), _VALUE)])
                mine.append(time.perf_counter() - started)
            with lock:
                seconds.extend(mine)

        workers = [threading.Thread(target=appender, args=(k,)) for k in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    return _quantiles(seconds, f"append_durable_{threads}_appenders")


def bench_claim_to_decision(directory: Path, claims: int) -> dict[str, float]:
    settings = Settings(data_dir=directory, partitions=8)
    with App(settings):
        pass  # the log's topics and the view's schema, before the projector starts
    projector = subprocess.Popen(
        [sys.executable, "-m", "berth.cli", "projector", "--data-dir", str(directory)],
        stderr=subprocess.DEVNULL,
    )
    try:
        with App(settings, migrate=False) as app:
            edge = Publisher(app.log, settings.topics)
            decisions = Decisions(app.log, settings.topics)
            setup = provider("node-1", VCPU=10**6)
            edge.publish(setup)
            assert not decisions.wait([e.event_id for e in setup], timeout_s=60)
            seconds = []
            for k in range(claims):
                event = claim(f"r{k}", "node-1", ts=edge.clock_ms(), lease_ms=10**6, VCPU=1)
                started = time.perf_counter()
                (placed,) = edge.publish([event])
                assert not decisions.wait([event.event_id], 30, partitions={placed[0]})
                seconds.append(time.perf_counter() - started)
    finally:
        projector.terminate()
        projector.wait(timeout=30)
    return _quantiles(seconds, "claim_to_decision")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--appends", type=int, default=2000)
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="berth-latency-") as tmp:
        work = Path(tmp)
        note("appends from one thread ...")
        figures.update(bench_appends(work / "one", args.appends, 1))
        note("appends from eight threads at once ...")
        figures.update(bench_appends(work / "eight", args.appends // 8, 8))
        note(f"{args.claims} claims, each until its decision ...")
        figures.update(bench_claim_to_decision(work / "claims", args.claims))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
