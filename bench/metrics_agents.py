"""Providers' metrics agents for bench.end_to_end --described, in a process
of their own (the agents live on the compute nodes, not in Berth's
processes, so their encoding and appending is not Berth's CPU).

    python -m bench.metrics_agents --log DIR --providers 10000 --origin-ms T [--every-ms 10000]

Every provider reports every ``--every-ms`` of log time, each report with
its own timestamp and values, spread evenly over the period. It encodes the
first reports, prints ``ready``, reads the wall time (``time.time()``) at
which log time was ``--origin-ms`` from its stdin, appends each report as its
time comes (checking every 50 ms) until its stdin closes, then prints
``{"metrics_reports": N}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable

from bench.common import metrics_report
from berth.app import Settings, open_log
from ledger.log import Append, Log
from ledger.partitioner import partition_for


class LogClock:
    """Log time: ``origin_ms`` until started, then ``origin_ms`` plus the wall
    time since; the wall clock, so that the bench and its agents' process agree."""

    def __init__(self, origin_ms: int) -> None:
        self.origin_ms = origin_ms
        self.started: float | None = None

    def start(self, at: float | None = None) -> float:
        self.started = time.time() if at is None else at
        return self.started

    def __call__(self) -> int:
        if self.started is None:
            return self.origin_ms
        return self.origin_ms + int((time.time() - self.started) * 1000)


class Reports:
    """Report i is provider ``i % n``'s, due at ``origin_ms + i * every_ms // n``.
    The first ``rounds`` periods are encoded beforehand; a run that
    outlasts them encodes the rest as they fall due."""

    def __init__(
        self, providers: int, partitions: int, origin_ms: int, every_ms: int, rounds: int = 12
    ) -> None:
        self.providers = providers
        self.origin_ms = origin_ms
        self.partitions = partitions
        self.every_ms = every_ms
        self.encoded = [self._encode(i) for i in range(rounds * providers)]
        self.sent = 0

    def due_ms(self, i: int) -> int:
        return self.origin_ms + i * self.every_ms // self.providers

    def __getitem__(self, i: int) -> Append:
        return self.encoded[i] if i < len(self.encoded) else self._encode(i)

    def _encode(self, i: int) -> Append:
        n = i % self.providers
        pid = f"node-{n:06d}"
        key = pid.encode()
        return Append(
            partition_for(key, self.partitions), key, metrics_report(pid, n, self.due_ms(i))
        )


def report(
    log: Log, topic: str, reports: Reports, clock_ms: Callable[[], int], stop: threading.Event
) -> None:
    """Append every report as its time comes, checking every 50 ms."""
    while not stop.wait(0.05):
        now = clock_ms()
        sent = due = reports.sent
        while reports.due_ms(due) <= now:
            due += 1
        if due > sent:
            log.append(topic, [reports[i] for i in range(sent, due)])
            reports.sent = due


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log", required=True, help="the embedded log's directory")
    parser.add_argument("--providers", type=int, required=True)
    parser.add_argument("--origin-ms", type=int, required=True, help="log time at the start")
    parser.add_argument("--every-ms", type=int, default=10_000)
    args = parser.parse_args()
    settings = Settings(log_url=f"embedded:{args.log}")
    log = open_log(settings)
    topic = settings.topics.events
    partitions = log.partition_count(topic)
    reports = Reports(args.providers, partitions, args.origin_ms, args.every_ms)
    print("ready", flush=True)
    clock = LogClock(args.origin_ms)
    clock.start(float(sys.stdin.readline()))
    stop = threading.Event()
    agents = threading.Thread(target=report, args=(log, topic, reports, clock, stop))
    agents.start()
    sys.stdin.read()  # until the bench closes it
    stop.set()
    agents.join()
    log.close()
    print(json.dumps({"metrics_reports": reports.sent}), flush=True)


if __name__ == "__main__":
    main()
