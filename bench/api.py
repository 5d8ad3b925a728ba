"""The HTTP API: what its edge costs, and a placement's round trip through it.

    python -m bench.api [--events N] [--requests N]

1. Claims POSTed to ``/v1/events`` of ``berth api`` in its own process on
   a fresh embedded log (no writers), one client on one kept-alive
   connection: one claim a request, then 100 a request. Appends are durable
   (fsynced) before the API answers.
2. ``berth serve --api`` in its own process (writers, a scheduler worker and
   the API) on 200 providers: placement requests POSTed to
   ``/v1/requests?wait=30``, one at a time (the latency of an answer: p50
   and p99), then 100 a request (placements per second); with serve's
   default ``--idle-wait-s`` (0.05) and with 0.002.

Progress goes to stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import FLAVOR, INVENTORY, note


class Client:
    """One kept-alive HTTP connection."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        payload = json.dumps(body)
        self.connection.request("POST", path, payload, {"Content-Type": "application/json"})
        response = self.connection.getresponse()
        return response.status, json.loads(response.read())


def _claim(k: int, pid: str, ts_ms: int) -> dict[str, Any]:
    return {
        "type": "claim",
        "event_id": f"e-{k}",
        "ts_ms": ts_ms,
        "partition_key": pid,
        "reservation_id": f"r-{k}",
        "consumer_id": f"vm-{k}",
        "project_id": "bench",
        "items": [{"provider_id": pid, "resources": FLAVOR}],
    }


def bench_events(directory: Path, count: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    now = int(time.time() * 1000)
    port = _free_port()
    argv = ["api", "--data-dir", str(directory), "--partitions", "8"]
    api_process = subprocess.Popen(
        [sys.executable, "-m", "berth.cli", *argv, "--listen", f"127.0.0.1:{port}"],
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port)
        client = Client(port)
        for per_request in (1, 100):
            note(f"{count} claims over HTTP, {per_request} a request ...")
            started = time.perf_counter()
            for start in range(0, count, per_request):
                body = [
                    _claim(per_request * 10**7 + k, f"node-{k % 200:04d}", now)
                    for k in range(start, min(count, start + per_request))
                ]
                status, _ = client.post("/v1/events", body)
                assert status == 202, status
            elapsed = time.perf_counter() - started
            figures[f"events_per_s_{per_request}_a_request"] = round(count / elapsed)
    finally:
        api_process.terminate()
        api_process.wait(timeout=30)
    return figures


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_listening(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise RuntimeError("berth serve --api did not start listening")
        time.sleep(0.05)


def _request(rid: str, ts_ms: int) -> dict[str, Any]:
    return {"request_id": rid, "ts_ms": ts_ms, "project_id": "bench", "resources": FLAVOR}


def bench_round_trip(directory: Path, count: int, idle_wait_s: float) -> dict[str, Any]:
    port = _free_port()
    argv = [
        "serve",
        "--data-dir",
        str(directory),
        "--partitions",
        "8",
        "--api",
        f"127.0.0.1:{port}",
        "--idle-wait-s",
        str(idle_wait_s),
    ]
    serve_process = subprocess.Popen(
        [sys.executable, "-m", "berth.cli", *argv], stderr=subprocess.DEVNULL
    )
    try:
        _wait_listening(port)
        client = Client(port)
        now = int(time.time() * 1000)
        providers = []
        for n in range(200):
            pid = f"node-{n:04d}"
            common = {"ts_ms": now, "partition_key": pid, "provider_id": pid}
            providers += [
                {"type": "provider_registered", "event_id": f"reg-{pid}", "name": pid, **common},
                {"type": "inventory_set", "event_id": f"inv-{pid}", "inventories": INVENTORY}
                | common,
            ]
        status, _ = client.post("/v1/events?wait=60", providers)
        assert status == 200, status
        note(f"{count} placement requests, one at a time, each waiting for its answer ...")
        latencies = []
        for k in range(count):
            started = time.perf_counter()
            status, reply = client.post("/v1/requests?wait=30", _request(f"one-{k}", now))
            latencies.append(time.perf_counter() - started)
            assert status == 200 and reply["answers"][f"one-{k}"]["placed"], reply
        note(f"{count} placement requests, 100 a request ...")
        started = time.perf_counter()
        placed = 0
        for start in range(0, count, 100):
            body = [_request(f"many-{k}", now) for k in range(start, min(count, start + 100))]
            status, reply = client.post("/v1/requests?wait=60", body)
            assert status == 200, reply
            placed += sum(1 for answer in reply["answers"].values() if answer["placed"])
        elapsed = time.perf_counter() - started
    finally:
        serve_process.terminate()
        serve_process.wait(timeout=30)
    cuts = statistics.quantiles(latencies, n=100)
    at = f"idle_wait_{idle_wait_s:g}_s"
    return {
        f"round_trip_p50_ms_{at}": round(statistics.median(latencies) * 1000, 1),
        f"round_trip_p99_ms_{at}": round(cuts[98] * 1000, 1),
        f"placements_per_s_100_a_request_{at}": round(placed / elapsed),
        f"placed_100_a_request_{at}": placed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=5_000)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--edge-only", action="store_true", help="only the events figures (1.)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        figures = bench_events(Path(work) / "events", args.events)
        if args.edge_only:
            print(json.dumps(figures))
            return
        # serve's default pause when it finds nothing to do, then a short one:
        # the first adds up to that pause to an answer, the second shows the path
        for idle_wait_s in (0.05, 0.002):
            path = Path(work) / f"round-trip-{idle_wait_s:g}"
            figures |= bench_round_trip(path, args.requests, idle_wait_s)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
