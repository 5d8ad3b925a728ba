"""Placement's allocation race against Berth: ``python -m bench.placement_race
[--clients 8] [--providers 50] [--requests 600]``.

A ``berth serve --placement-api`` on a fresh data directory, ``providers``
providers of 8 VCPU each (400 slots with the defaults), and ``clients``
concurrent clients each writing new consumers of 1 VCPU with ``PUT
/allocations/{consumer}`` on providers in turn, ``requests`` in all.
Prints one JSON object: placed, refused, overcommitted providers (always 0)
and placements per second. ``race_at`` runs it against any Placement API
(``bench.placement_api`` runs upstream's beside Berth's).

The racing clients are threads of this process on the standard library's
``http.client`` (a kept-alive connection each), the same for either API:
httpx took 1.4 ms of CPU per request in the client (150-190 us with
http.client), which on this 2-core machine alone held the race below
500 placements/s whatever the server did. ``--client httpx`` races with
httpx as before. The setup and the usages read after it use httpx."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from bench.placement_gabbits import berth_command, wait_listening

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.38"}
SLOTS = 8
CLIENTS = ("http.client", "httpx")

Put = Callable[[str, Mapping[str, object]], int]
"""``PUT path`` with a JSON body on one kept-alive connection: the status."""


def _providers(api: httpx.Client, count: int) -> list[str]:
    found = []
    for n in range(count):
        rp = str(uuid.uuid4())
        api.post("/resource_providers", json={"name": f"cn{n}", "uuid": rp}).raise_for_status()
        api.put(
            f"/resource_providers/{rp}/inventories",
            json={"resource_provider_generation": 0, "inventories": {"VCPU": {"total": SLOTS}}},
        ).raise_for_status()
        found.append(rp)
    return found


def race(
    clients: int, providers: int, requests: int, idle_wait_s: float, client: str = CLIENTS[0]
) -> dict[str, object]:
    """The race against a ``berth serve --placement-api`` of its own, with
    the server's CPU time (every thread's) per write while the clients raced."""
    with tempfile.TemporaryDirectory(prefix="berth-race-") as work:
        data_dir = Path(work) / "data"
        command = berth_command(data_dir, "--idle-wait-s", str(idle_wait_s))
        with open(Path(work) / "stderr", "w+") as stderr:
            server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
            try:
                host, port = wait_listening(server, Path(stderr.name), "placement-api")
                cpu = _ProcessCpu(server.pid)
                found = race_at(f"http://{host}:{port}", clients, providers, requests, client, cpu)
            finally:
                server.terminate()
                server.wait(timeout=30)
    return {"idle_wait_s": idle_wait_s, **found}


class _ProcessCpu:
    """A process's CPU seconds (user and system, all its threads) so far."""

    def __init__(self, pid: int) -> None:
        self._stat = Path(f"/proc/{pid}/stat")
        self._tick_s = 1 / os.sysconf("SC_CLK_TCK")

    def __call__(self) -> float:
        # the fields after the command's closing parenthesis: utime, stime are 12, 13
        fields = self._stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * self._tick_s


def _stdlib_client(base: str) -> tuple[Put, Callable[[], None]]:
    where = urlsplit(base)
    connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=60)
    headers = {**HEADERS, "content-type": "application/json"}

    def put(path: str, body: Mapping[str, object]) -> int:
        connection.request("PUT", path, json.dumps(body).encode(), headers)
        answer = connection.getresponse()
        answer.read()
        return answer.status

    return put, connection.close


def _httpx_client(base: str) -> tuple[Put, Callable[[], None]]:
    client = httpx.Client(base_url=base, headers=HEADERS, timeout=60)
    return lambda path, body: client.put(path, json=body).status_code, client.close


def race_at(
    base: str,
    clients: int,
    providers: int,
    requests: int,
    client: str = CLIENTS[0],
    server_cpu_s: Callable[[], float] | None = None,
) -> dict[str, object]:
    """The race against the Placement API at ``base`` (Berth's or another's),
    its clients on ``client`` (one of :data:`CLIENTS`); given the server's
    CPU seconds so far, its CPU per write during the race too."""
    connect = _stdlib_client if client == "http.client" else _httpx_client
    with httpx.Client(base_url=base, headers=HEADERS, timeout=60) as api:
        rps = _providers(api, providers)

        def racer(n: int) -> tuple[list[int], list[float]]:
            statuses, latencies = [], []
            put, close = connect(base)
            try:
                for i in range(n, requests, clients):
                    body = {
                        "allocations": {rps[i % providers]: {"resources": {"VCPU": 1}}},
                        "project_id": "bench",
                        "user_id": "bench",
                        "consumer_generation": None,
                        "consumer_type": "INSTANCE",
                    }
                    start = time.perf_counter()
                    statuses.append(put(f"/allocations/{uuid.uuid4()}", body))
                    latencies.append(time.perf_counter() - start)
            finally:
                close()
            return statuses, latencies

        cpu_start = server_cpu_s() if server_cpu_s else 0.0
        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            results = list(pool.map(racer, range(clients)))
        elapsed = time.perf_counter() - start
        cpu_s = server_cpu_s() - cpu_start if server_cpu_s else None
        statuses = [s for found, _ in results for s in found]
        latencies = sorted(t for _, found in results for t in found)
        used = [
            api.get(f"/resource_providers/{rp}/usages").json()["usages"].get("VCPU", 0)
            for rp in rps
        ]
    placed = statuses.count(204)
    return {
        "client": client,
        "clients": clients,
        "providers": providers,
        "slots": providers * SLOTS,
        "requests": requests,
        "placed": placed,
        "refused": statuses.count(409),
        "other": len(statuses) - placed - statuses.count(409),
        "overcommitted_providers": sum(1 for u in used if u > SLOTS),
        "usage_matches_placed": sum(used) == placed,
        "placements_per_s": round(placed / elapsed, 1),
        "requests_per_s": round(len(statuses) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 1),
        **({} if cpu_s is None else {"server_cpu_ms_per_write": round(cpu_s * 1000 / requests, 3)}),
        "load": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--providers", type=int, default=50)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument(
        "--idle-wait-s", type=float, default=0.05, help="berth serve's, as the server is run"
    )
    parser.add_argument("--client", choices=CLIENTS, default=CLIENTS[0], help="the racers' HTTP")
    args = parser.parse_args(argv)
    found = race(args.clients, args.providers, args.requests, args.idle_wait_s, args.client)
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
