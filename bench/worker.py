"""Durable claims per second on Kafka through ``berth worker`` (1 and 2
workers in a consumer group) against ``berth projector``, and the takeover
time after a worker is SIGKILLed.

    python -m bench.worker [--kafka auto|HOST:PORT] [--claims N] [--rounds N]

Each run gets a fresh broker (with ``auto``) and a fresh PostgreSQL view:
the writer processes start and take their partitions, then claims are
appended as fast as one producer can, and the clock stops when the view
holds the last of them. The modes are alternated, round after round, as
the machine's speed drifts. Progress goes to stderr; the figures are one
JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.common import claim, note, provider_events
from berth.app import App, Settings
from berth.compile import compiled
from ledger.log import Append
from ledger.partitioner import partition_for
from projections.view.generations import owners
from projections.view.loader import committed_offsets

PARTITIONS = 4
PROVIDERS = 1_000
MODES = ("projector", "worker-1", "worker-2")


@contextmanager
def _kafka(target: str) -> Iterator[str]:
    if target != "auto":
        yield target
        return
    from tests.kafka_broker import running_tansu

    with running_tansu() as bootstrap:
        yield bootstrap


@contextmanager
def _processes(argvs: list[list[str]], logs: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started = []
    try:
        for n, argv in enumerate(argvs):
            with (logs / f"{argv[0]}-{n}.log").open("wb") as out:
                started.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "berth.cli", *argv],
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in started:
            process.wait(timeout=60)


def _wait(predicate: Any, what: str, timeout_s: float = 120.0) -> float:
    """Poll ``predicate`` until it holds; when it did (monotonic seconds)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.005)
    return time.monotonic()


def _applied_all(app: App, ends: list[int]) -> bool:
    with app.engine.connect() as conn:
        done = committed_offsets(conn)
    return all(done.get(p, 0) >= end for p, end in enumerate(ends))


def _owner_pids(app: App) -> dict[int, int]:
    with app.engine.connect() as conn:
        return {p: int(o.owner.rsplit(":", 1)[1]) for p, o in owners(conn).items()}


def _claims(pids: list[str], count: int, first: int) -> list[list[Append]]:
    """Batches of 2,000 claims over the providers, made up front: this
    measures Berth's path from append to view commit."""
    appends = [
        Append(
            partition_for(pid.encode(), PARTITIONS), pid.encode(), claim(f"c{k}", pid, 2_000 + k)
        )
        for k in range(first, first + count)
        for pid in [pids[k % len(pids)]]
    ]
    return [appends[i : i + 2_000] for i in range(0, len(appends), 2_000)]


def run(
    mode: str, kafka: str, db_url: str, claims: int, logs: Path, session_s: float
) -> dict[str, float]:
    """One measurement: claims per second, and for two workers the takeover."""
    with _kafka(kafka) as bootstrap:
        settings = Settings(log_url=f"kafka://{bootstrap}", db_url=db_url, partitions=PARTITIONS)
        common = ["--log", settings.log_url, "--db", db_url, "--partitions", str(PARTITIONS)]
        with App(settings) as app:
            events = app.settings.topics.events
            pids = [f"node-{n:06d}" for n in range(PROVIDERS)]
            app.log.append(
                events,
                [
                    Append(partition_for(pid.encode(), PARTITIONS), pid.encode(), raw)
                    for pid in pids
                    for raw in provider_events(pid, 1)
                ],
            )
            if mode == "projector":
                argvs = [["projector", *common]]
            else:
                worker = [
                    "worker",
                    *common,
                    "--writers-only",
                    "--session-timeout-s",
                    str(session_s),
                ]
                argvs = [worker] * int(mode.split("-")[1])
            with _processes(argvs, logs) as processes:
                ends = [app.log.end_offset(events, p) for p in range(PARTITIONS)]
                _wait(lambda: _applied_all(app, ends), "the providers applied")
                if mode != "projector":
                    wanted = {p.pid for p in processes}
                    _wait(lambda: set(_owner_pids(app).values()) == wanted, "the group assigned")
                started = time.monotonic()
                for batch in _claims(pids, claims, 0):
                    app.log.append(events, batch)
                ends = [app.log.end_offset(events, p) for p in range(PARTITIONS)]
                done = _wait(lambda: _applied_all(app, ends), "every claim applied")
                figures = {"claims_per_s": claims / (done - started)}
                if mode == "worker-2":
                    figures["takeover_s"] = _takeover(app, processes, pids, claims)
                return figures


def _takeover(
    app: App, processes: list[subprocess.Popen[bytes]], pids: list[str], first: int
) -> float:
    """SIGKILL the worker holding partition 0; seconds until the claims
    appended to its partitions just after are decided by the other, claims
    arriving all along."""
    events = app.settings.topics.events
    victim = _owner_pids(app)[0]
    lost = [p for p, pid in _owner_pids(app).items() if pid == victim]
    trickle = [a for batch in _claims(pids, 20_000, first) for a in batch]
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    next(p for p in processes if p.pid == victim).wait()
    app.log.append(events, trickle[:2_000])
    marks = {p: app.log.end_offset(events, p) for p in lost}
    sent = [killed]

    def decided_elsewhere() -> bool:
        if time.monotonic() - sent[-1] >= 0.05:  # traffic goes on, 400 claims/s
            start = 2_000 + 20 * len(sent)
            app.log.append(events, trickle[start : start + 20])
            sent.append(time.monotonic())
        with app.engine.connect() as conn:
            applied = committed_offsets(conn)
        return all(applied.get(p, 0) >= mark for p, mark in marks.items())

    return _wait(decided_elsewhere, "the takeover") - killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kafka", default="auto", help="auto (start tansu) or HOST:PORT")
    parser.add_argument("--claims", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--session-timeout-s", type=float, default=4.0)
    args = parser.parse_args()
    from tests.postgres import scratch_database

    measured: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="berth-bench-worker-") as logs:
        for round_ in range(args.rounds):
            for mode in MODES:
                note(f"round {round_ + 1} of {args.rounds}: {mode} ...")
                with ExitStack() as stack:
                    db_url = stack.enter_context(scratch_database())
                    measured[mode].append(
                        run(
                            mode,
                            args.kafka,
                            db_url,
                            args.claims,
                            Path(logs),
                            args.session_timeout_s,
                        )
                    )
    figures: dict[str, Any] = {"compiled": compiled(), "claims": args.claims}
    for mode, runs in measured.items():
        rates = [r["claims_per_s"] for r in runs]
        name = mode.replace("-", "_")
        figures[f"{name}_claims_per_s"] = round(statistics.median(rates))
        figures[f"{name}_claims_per_s_runs"] = [round(r) for r in rates]
    takeovers = [r["takeover_s"] for r in measured["worker-2"]]
    figures["takeover_s_runs"] = [round(t, 2) for t in takeovers]
    figures["session_timeout_s"] = args.session_timeout_s
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
