"""A crash in the middle of cross-partition writes never leaves a
consumer's allocations half-applied: real ``berth serve --placement-api``
processes, SIGKILLed while clients send ``POST /allocations`` for several
consumers on providers whose ids belong to different partitions, then
started again on the same log and view. Every write sent is then either
applied whole or not at all; every one acknowledged (204) is applied; each
provider's usage is the sum of the allocations the API shows on it; and
the log decides again alike (``berth replay --verify``).

On the embedded log with SQLite, and on Kafka (tansu) with PostgreSQL."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.placement_gabbits import berth_command, wait_listening
from ledger.partitioner import partition_for
from tests.kafka_broker import running_tansu
from tests.polling import wait_for
from tests.postgres import scratch_database

LATEST = {"x-auth-token": "admin", "openstack-api-version": "placement latest"}
PARTITIONS = 4
CLIENTS = 4
CONSUMERS_PER_WRITE = 3
CRASHES = 2
ACKED_BEFORE_CRASH = 12
"""Writes acknowledged in a round before its server is killed: the others
in flight are the ones a crash cuts in the middle."""


@dataclass
class Write:
    """One ``POST /allocations``: its consumers' allocations, and its status
    if an answer came back (None when the connection died with the server)."""

    body: dict[str, dict[str, Any]]
    status: int | None = None


@dataclass
class Traffic:
    """Clients sending writes until told to stop (or their server dies)."""

    url: str
    providers: list[str]
    writes: list[Write] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acknowledged(self) -> int:
        with self.lock:
            return sum(w.status == 204 for w in self.writes)

    def client(self, n: int) -> None:
        with httpx.Client(base_url=self.url, headers=LATEST, timeout=60) as api:
            i = 0
            while not self.stop.is_set():
                write = Write(self._body(n, i))
                with self.lock:
                    self.writes.append(write)
                try:
                    write.status = api.post("/allocations", json=write.body).status_code
                except httpx.HTTPError:
                    return  # the server was killed under this write
                i += 1

    def _body(self, n: int, i: int) -> dict[str, dict[str, Any]]:
        """Three new consumers, each on two providers of different
        partitions, amounts that differ by write."""
        body = {}
        for c in range(CONSUMERS_PER_WRITE):
            first = (n + i + c) % len(self.providers)
            second = (first + 1) % len(self.providers)
            body[str(uuid.uuid4())] = {
                "allocations": {
                    self.providers[first]: {"resources": {"VCPU": 1 + (i + c) % 3}},
                    self.providers[second]: {"resources": {"MEMORY_MB": 64 * (1 + n)}},
                },
                "project_id": "p1",
                "user_id": "u1",
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            }
        return body


@contextmanager
def _backend(kind: str, tmp_path: Path) -> Iterator[tuple[str, ...]]:
    """``berth serve``'s options for the log and the view of ``kind``."""
    if kind == "embedded":
        yield ("--partitions", str(PARTITIONS))
        return
    with running_tansu() as bootstrap, scratch_database() as url:
        yield ("--partitions", str(PARTITIONS), "--log", f"kafka://{bootstrap}", "--db", url)


@contextmanager
def _server(data: Path, options: tuple[str, ...], n: int) -> Iterator[tuple[str, Any]]:
    """A ``berth serve --placement-api``: its URL and process, killed on the
    way out if the test has not killed it."""
    stderr_path = data.parent / f"serve-{n}.stderr"
    with open(stderr_path, "w+") as stderr:
        process = subprocess.Popen(
            berth_command(data, *options), stdout=subprocess.DEVNULL, stderr=stderr
        )
        try:
            host, port = wait_listening(process, stderr_path, "placement-api")
            yield f"http://{host}:{port}", process
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


def _providers(api: httpx.Client) -> list[str]:
    """One provider per partition, each with room for every write."""
    found: dict[int, str] = {}
    while len(found) < PARTITIONS:
        rp = str(uuid.uuid4())
        found.setdefault(partition_for(rp.encode(), PARTITIONS), rp)
    for rp in found.values():
        made = api.post("/resource_providers", json={"name": f"cn-{rp}", "uuid": rp})
        assert made.status_code == 200, made.text
        inventories = {"VCPU": {"total": 100_000}, "MEMORY_MB": {"total": 10_000_000}}
        put = api.put(
            f"/resource_providers/{rp}/inventories",
            json={"resource_provider_generation": 0, "inventories": inventories},
        )
        assert put.status_code == 200, put.text
    return list(found.values())


def _crash_under_traffic(url: str, process: Any, providers: list[str]) -> list[Write]:
    traffic = Traffic(url, providers)
    clients = [threading.Thread(target=traffic.client, args=(n,)) for n in range(CLIENTS)]
    for client in clients:
        client.start()
    try:
        wait_for(lambda: traffic.acknowledged() >= ACKED_BEFORE_CRASH, "writes acknowledged", 120)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        traffic.stop.set()
        for client in clients:
            client.join(timeout=120)
    assert any(w.status is None for w in traffic.writes), "no write was cut by the crash"
    return traffic.writes


def _check(api: httpx.Client, providers: list[str], writes: list[Write]) -> int:
    """Every write whole or absent, the acknowledged ones whole, and each
    provider's usage the sum of what the API shows on it; the writes found."""
    used = {rp: {"VCPU": 0, "MEMORY_MB": 0} for rp in providers}
    applied = 0
    for write in writes:
        assert write.status in (None, 204), write.status
        shown = {c: api.get(f"/allocations/{c}").json()["allocations"] for c in write.body}
        expected = {
            c: {rp: a["resources"] for rp, a in body["allocations"].items()}
            for c, body in write.body.items()
        }
        got = {c: {rp: a["resources"] for rp, a in held.items()} for c, held in shown.items()}
        whole, none = got == expected, all(not held for held in got.values())
        assert whole or none, f"half applied: sent {expected}, found {got}"
        if write.status == 204:
            assert whole, f"acknowledged but not applied: {expected}"
        if whole:
            applied += 1
            for resources in expected.values():
                for rp, amounts in resources.items():
                    for rc, amount in amounts.items():
                        used[rp][rc] += amount
    for rp in providers:
        usages = api.get(f"/resource_providers/{rp}/usages").json()["usages"]
        assert usages == used[rp], rp
        held = api.get(f"/resource_providers/{rp}/allocations").json()["allocations"]
        assert sum(a["resources"].get("VCPU", 0) for a in held.values()) == used[rp]["VCPU"]
    return applied


@pytest.mark.parametrize("backend", ["embedded", "kafka-postgresql"])
def test_a_crash_never_leaves_allocations_half_applied(backend: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    writes: list[Write] = []
    with _backend(backend, tmp_path) as options:
        with _server(data, options, 0) as (url, process):
            with httpx.Client(base_url=url, headers=LATEST, timeout=60) as api:
                providers = _providers(api)
            writes += _crash_under_traffic(url, process, providers)
        for n in range(1, CRASHES + 1):
            with _server(data, options, n) as (url, process):
                with httpx.Client(base_url=url, headers=LATEST, timeout=60) as api:
                    # answered once decided, after every record before it in
                    # the one partition of Placement's model: the writes the
                    # crash left appended but undecided are decided by then
                    assert api.put(f"/traits/CUSTOM_RESTART_{n}").status_code == 201
                    applied = _check(api, providers, writes)
                    assert applied >= ACKED_BEFORE_CRASH * n
                if n < CRASHES:
                    writes += _crash_under_traffic(url, process, providers)
        _replay_verifies(data, options)


def _replay_verifies(data: Path, options: tuple[str, ...]) -> None:
    """``berth replay --verify`` decides the log again alike: into the view
    itself on SQLite, into a fresh database on PostgreSQL."""
    command = [sys.executable, "-m", "berth.cli", "replay", "--verify", "--data-dir", str(data)]
    if "--log" not in options:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    else:
        log = options[options.index("--log") + 1]
        with scratch_database() as fresh:
            done = subprocess.run(
                [*command, "--log", log, "--db", fresh], capture_output=True, text=True, timeout=300
            )
    assert done.returncode == 0, done.stdout + done.stderr
