"""Placement's allocation race against Berth: ``python -m bench.placement_race
[--clients 8] [--providers 50] [--requests 600]``.

A ``berth serve --placement-api`` on a fresh data directory, ``providers``
providers of 8 VCPU each (400 slots with the defaults), and ``clients``
concurrent clients each writing new consumers of 1 VCPU with ``PUT
/allocations/{consumer}`` on providers in turn, ``requests`` in all.
Prints one JSON object: placed, refused, overcommitted providers (always 0)
and placements per second. ``--front-ends N`` serves the API from N ``berth
placement-api`` processes on one address beside a ``berth serve`` that
decides, rather than from ``berth serve --placement-api``. ``race_at`` runs
it against any Placement API (``bench.placement_api`` runs upstream's
beside Berth's).

The racing clients are threads of this process, the same for either API,
and they are not what is measured: on a 2-core machine their CPU is CPU
the server does not get. By default (``--client raw``) each sends
requests encoded before the race starts, byte for byte what
``http.client`` sends, on a kept-alive socket of its own (opened again
when the server closes it, as an HTTP/1.0 server does) and reads only
the answer's status line and length: 20-30 us of the racer's CPU a
request, against 150-190 us on ``http.client`` and 1.4 ms on httpx, which
alone held the race below 500 placements/s. ``--client http.client`` and
``--client httpx`` race on those. The setup and the usages read after it
use httpx."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from bench.placement_gabbits import berth_command, wait_listening

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.38"}
SLOTS = 8
CLIENTS = ("raw", "http.client", "httpx")

Put = Callable[[int], int]
"""``PUT`` the racer's ``n``th write on its kept-alive connection: the status."""
Connect = Callable[[str, list[tuple[str, bytes]]], tuple[Put, Callable[[], None]]]
"""A racer's client at a base URL for its writes (path, JSON body), made
before the race starts: how it puts them, and how it closes."""


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
    clients: int,
    providers: int,
    requests: int,
    idle_wait_s: float,
    client: str = CLIENTS[0],
    front_ends: int = 0,
) -> dict[str, object]:
    """The race against a ``berth serve --placement-api`` of its own, with
    the server's CPU time (every thread's) per write while the clients
    raced. With ``front_ends``, that many ``berth placement-api`` processes
    on one address (``--reuse-port``) serve the API instead, beside a
    ``berth serve`` that decides; the CPU is theirs and its."""
    with tempfile.TemporaryDirectory(prefix="berth-race-") as work, ExitStack() as stack:
        work_dir = Path(work)
        data_dir = work_dir / "data"
        idle = ("--idle-wait-s", str(idle_wait_s))
        if not front_ends:
            server = _started(stack, berth_command(data_dir, *idle), work_dir / "serve")
            base = _listening(server, work_dir / "serve")
            servers = [server]
        else:
            cli = berth_command(data_dir)[:3]  # the interpreter running berth's main
            migrate = [*cli, "migrate", "--data-dir", str(data_dir)]
            subprocess.run(migrate, check=True, stdout=subprocess.DEVNULL)
            servers = [_started(stack, [*cli, "serve", "--data-dir", str(data_dir), *idle])]
            listen = "127.0.0.1:0"
            for n in range(front_ends):
                command = [*cli, "placement-api", "--data-dir", str(data_dir), "--reuse-port"]
                servers.append(_started(stack, [*command, "--listen", listen], work_dir / f"{n}"))
                base = _listening(servers[-1], work_dir / f"{n}")
                listen = urlsplit(base).netloc  # the others on the first one's port
        cpus = [_ProcessCpu(server.pid) for server in servers]
        found = race_at(base, clients, providers, requests, client, lambda: sum(c() for c in cpus))
    return {"idle_wait_s": idle_wait_s, "front_ends": front_ends, **found}


def _started(
    stack: ExitStack, command: list[str], stderr_path: Path | None = None
) -> subprocess.Popen[bytes]:
    """``command`` running until ``stack`` closes; its stderr to ``stderr_path``."""
    stderr = stack.enter_context(stderr_path.open("w+")) if stderr_path else subprocess.DEVNULL
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)

    def stop() -> None:
        process.terminate()
        process.wait(timeout=30)

    stack.callback(stop)
    return process


def _listening(server: subprocess.Popen[bytes], stderr_path: Path) -> str:
    host, port = wait_listening(server, stderr_path, "placement-api")
    return f"http://{host}:{port}"


class _ProcessCpu:
    """A process's CPU seconds (user and system, all its threads) so far."""

    def __init__(self, pid: int) -> None:
        self._stat = Path(f"/proc/{pid}/stat")
        self._tick_s = 1 / os.sysconf("SC_CLK_TCK")

    def __call__(self) -> float:
        # the fields after the command's closing parenthesis: utime, stime are 12, 13
        fields = self._stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * self._tick_s


class _RawConnection:
    """Requests already encoded, sent on one kept-alive socket; of each
    answer only the status line and the length of its body are read."""

    def __init__(self, host: str, port: int) -> None:
        self._address = (host, port)
        self._socket: socket.socket | None = None
        self._buffer = b""

    def send(self, request: bytes) -> int:
        """``request``'s answer's status, once all of it is read."""
        if self._socket is None:
            self._socket = socket.create_connection(self._address, timeout=60)
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._buffer = b""
        self._socket.sendall(request)
        return self._answer()

    def _answer(self) -> int:
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            self._buffer += self._received()
        status_line, *lines = self._buffer[:end].decode("latin-1").split("\r\n")
        version, status = status_line.split(" ", 2)[:2]
        fields = {
            k.strip().lower(): v.strip().lower() for k, _, v in (f.partition(":") for f in lines)
        }
        rest = self._buffer[end + 4 :]
        if status in ("204", "304"):
            length = 0
        elif "content-length" in fields:
            length = int(fields["content-length"])
        else:  # the body ends with the connection
            while chunk := self._received(eof_ok=True):
                rest += chunk
            length = len(rest)
        while len(rest) < length:
            rest += self._received()
        self._buffer = rest[length:]
        connection = fields.get("connection", "")
        if connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive"):
            self.close()
        return int(status)

    def _received(self, eof_ok: bool = False) -> bytes:
        assert self._socket is not None
        chunk = self._socket.recv(65536)
        if not chunk and not eof_ok:
            raise ConnectionError("the server closed the connection mid-answer")
        return chunk

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def _raw_client(base: str, writes: list[tuple[str, bytes]]) -> tuple[Put, Callable[[], None]]:
    where = urlsplit(base)
    host, port = where.hostname or "", where.port or 80
    # what http.client sends for the same request, in its order
    fixed = f"Host: {host}:{port}\r\nAccept-Encoding: identity\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in HEADERS.items()
    )
    encoded = [
        (
            f"PUT {path} HTTP/1.1\r\n{fixed}content-type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1")
        + body
        for path, body in writes
    ]
    connection = _RawConnection(host, port)
    return lambda n: connection.send(encoded[n]), connection.close


def _stdlib_client(base: str, writes: list[tuple[str, bytes]]) -> tuple[Put, Callable[[], None]]:
    where = urlsplit(base)
    connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=60)
    headers = {**HEADERS, "content-type": "application/json"}

    def put(n: int) -> int:
        path, body = writes[n]
        connection.request("PUT", path, body, headers)
        answer = connection.getresponse()
        answer.read()
        return answer.status

    return put, connection.close


def _httpx_client(base: str, writes: list[tuple[str, bytes]]) -> tuple[Put, Callable[[], None]]:
    client = httpx.Client(base_url=base, headers=HEADERS, timeout=60)
    json_headers = {"content-type": "application/json"}

    def put(n: int) -> int:
        path, body = writes[n]
        return client.put(path, content=body, headers=json_headers).status_code

    return put, client.close


CONNECT: dict[str, Connect] = {
    "raw": _raw_client,
    "http.client": _stdlib_client,
    "httpx": _httpx_client,
}


def _writes(rps: list[str], requests: int) -> list[tuple[str, bytes]]:
    """Each request's path and body: a new consumer of 1 VCPU, on the providers in turn."""
    writes = []
    for i in range(requests):
        body = {
            "allocations": {rps[i % len(rps)]: {"resources": {"VCPU": 1}}},
            "project_id": "bench",
            "user_id": "bench",
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        }
        writes.append((f"/allocations/{uuid.uuid4()}", json.dumps(body).encode()))
    return writes


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
    CPU seconds so far, its CPU per write during the race too. Every
    request is made before the race starts: the racers only send them."""
    with httpx.Client(base_url=base, headers=HEADERS, timeout=60) as api:
        rps = _providers(api, providers)
        writes = _writes(rps, requests)
        racers = [CONNECT[client](base, writes[n::clients]) for n in range(clients)]

        def race_one(n: int) -> tuple[list[int], list[float]]:
            put, close = racers[n]
            statuses, latencies = [], []
            try:
                for i in range(len(writes[n::clients])):
                    start = time.perf_counter()
                    statuses.append(put(i))
                    latencies.append(time.perf_counter() - start)
            finally:
                close()
            return statuses, latencies

        cpu_start = server_cpu_s() if server_cpu_s else 0.0
        own_cpu_start = time.process_time()  # every thread of this process: the racers'
        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            results = list(pool.map(race_one, range(clients)))
        elapsed = time.perf_counter() - start
        own_cpu_s = time.process_time() - own_cpu_start
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
        "racers_cpu_ms_per_write": round(own_cpu_s * 1000 / requests, 3),
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
    parser.add_argument(
        "--front-ends",
        type=int,
        default=0,
        help="berth placement-api processes on one address serving the API, beside a berth "
        "serve deciding (0: berth serve --placement-api alone)",
    )
    args = parser.parse_args(argv)
    found = race(
        args.clients, args.providers, args.requests, args.idle_wait_s, args.client, args.front_ends
    )
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
