"""Berth's Placement API beside OpenStack Placement's, on the same data:
``python -m bench.placement_api [--sizes 1000,2000,10000] [--samples 40]
[--skip-race]``.

A reference Placement (``bench.placement_reference``: the installed
``openstack-placement`` on SQLite) and a ``berth serve --placement-api``
(embedded default) run side by side:

- **candidates**: both hold the same providers (three sizes of compute
  node, each with VCPU, MEMORY_MB and DISK_GB), grown to each of
  ``--sizes`` in turn; at each size ``GET /allocation_candidates`` (one
  VCPU/MEMORY_MB/DISK_GB request, ``limit=1``, as issue 32 measured
  Placement) is timed over HTTP, the two servers alternating in rounds of
  a few requests: p50 and p99 of each, and Placement's p50 over Berth's.
  Both answer the same number of candidates, checked. The providers are
  loaded as upstream's own test fixtures load them, without the HTTP
  round trips that would take most of an hour at 10,000: into Placement's
  SQLite database directly (the rows its API would write), and into
  Berth's log as the events its API would append, one append for many.
- **race** (``bench.placement_race``): ``--clients`` concurrent clients
  ``PUT /allocations/{consumer}`` of 1 VCPU against ``--providers``
  providers of 8 VCPU (400 slots with the defaults), ``--requests`` in
  all (on ``http.client``, or ``--client httpx``); placed, overcommitted
  providers and placements per second, Berth first, then Placement (its
  WSGI server takes one request at a time: threaded, on SQLite, a third of
  the writes fail on the database's lock).

The load average is read before and after each part. Progress goes to
stderr; the figures are one JSON object on the last line."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.common import note
from bench.placement_gabbits import berth_server
from bench.placement_race import CLIENTS, race_at
from bench.placement_reference import reference_server
from berth.app import App, Settings
from berth.client import Publisher

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
QUERY = "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:10&limit=1"
SIZES = ((16, 32_768, 500), (32, 65_536, 1_000), (64, 262_144, 2_000))
"""VCPU, MEMORY_MB, DISK_GB of the three kinds of compute node."""
ROUND = 5
"""Requests to one server before the other's turn."""


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def nodes(start: int, stop: int, seed: int = 32) -> list[tuple[str, str, dict[str, int]]]:
    """Providers ``start`` .. ``stop - 1``: uuid, name, inventory totals."""
    found = []
    for n in range(start, stop):
        vcpu, memory_mb, disk_gb = random.Random(seed * 1_000_003 + n).choice(SIZES)
        totals = {"VCPU": vcpu, "MEMORY_MB": memory_mb, "DISK_GB": disk_gb}
        found.append((str(uuid.UUID(int=n + 1)), f"node-{n:06d}", totals))
    return found


def load_berth(data_dir: Path, base: str, found: list[tuple[str, str, dict[str, int]]]) -> None:
    """The events ``POST /resource_providers`` and ``PUT .../inventories``
    append, appended many at a time; returns once the server's view holds them."""
    with App(Settings.from_env(data_dir=data_dir), migrate=False) as app:
        publisher = Publisher(app.log, app.settings.topics)
        for start in range(0, len(found), 500):
            events: list[dict[str, Any]] = []
            for rp, name, totals in found[start : start + 500]:
                common = {"ts_ms": int(time.time() * 1000), "partition_key": "placement"}
                events.append(
                    {
                        "type": "placement_provider_saved",
                        "event_id": f"bench-{rp}-saved",
                        "uuid": rp,
                        "name": name,
                        **common,
                    }
                )
                events.append(
                    {
                        "type": "placement_inventories_set",
                        "event_id": f"bench-{rp}-inventories",
                        "uuid": rp,
                        "generation": 0,
                        "inventories": {
                            rc: {"total": total, "max_unit": total} for rc, total in totals.items()
                        },
                        **common,
                    }
                )
            publisher.publish(events)
    _wait_held(base, found[-1][0])


def _wait_held(base: str, rp: str, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=base, headers=HEADERS, timeout=60) as api:
        while time.monotonic() < deadline:
            answer = api.get(f"/resource_providers/{rp}/inventories")
            if answer.status_code == 200 and answer.json()["inventories"]:
                return
            time.sleep(0.2)  # the writer decides the events at its own pace
    raise RuntimeError(f"Berth's view did not hold {rp} within {timeout_s} s")


def load_placement(db_path: Path, found: list[tuple[str, str, dict[str, int]]]) -> None:
    """The rows Placement's API writes for a provider and its inventories,
    written into its database (as upstream's fixtures write theirs)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    with sqlite3.connect(db_path) as db:
        # the standard classes, synced into its table when it started
        classes = dict(db.execute("SELECT name, id FROM resource_classes").fetchall())
        (last,) = db.execute("SELECT coalesce(max(id), 0) FROM resource_providers").fetchone()
        for n, (rp, name, totals) in enumerate(found, last + 1):
            db.execute(
                "INSERT INTO resource_providers (id, uuid, name, generation, root_provider_id, "
                "created_at, updated_at) VALUES (?, ?, ?, 1, ?, ?, ?)",
                (n, rp, name, n, now, now),
            )
            db.executemany(
                "INSERT INTO inventories (resource_provider_id, resource_class_id, total, "
                "reserved, min_unit, max_unit, step_size, allocation_ratio, created_at, "
                "updated_at) VALUES (?, ?, ?, 0, 1, ?, 1, 1.0, ?, ?)",
                [(n, classes[rc], total, total, now, now) for rc, total in totals.items()],
            )


def candidates(bases: dict[str, str], samples: int) -> dict[str, Any]:
    """Each server's p50 and p99, in rounds of ``ROUND`` requests each, alternating."""
    times: dict[str, list[float]] = {name: [] for name in bases}
    answered: dict[str, int] = {}
    clients = {
        name: httpx.Client(base_url=base, headers=HEADERS, timeout=120)
        for name, base in bases.items()
    }
    try:
        for client in clients.values():
            client.get(f"/allocation_candidates?{QUERY}").raise_for_status()  # warm
        while min(len(t) for t in times.values()) < samples:
            for name, client in clients.items():
                for _ in range(ROUND):
                    start = time.perf_counter()
                    answer = client.get(f"/allocation_candidates?{QUERY}")
                    times[name].append(time.perf_counter() - start)
                    answer.raise_for_status()
                    answered[name] = len(answer.json()["allocation_requests"])
    finally:
        for client in clients.values():
            client.close()
    if len(set(answered.values())) != 1:
        raise RuntimeError(f"the servers answered different numbers of candidates: {answered}")
    figures: dict[str, Any] = {}
    for name, found in times.items():
        ms = sorted(t * 1000 for t in found)
        figures[f"{name}_p50_ms"] = round(statistics.median(ms), 2)
        figures[f"{name}_p99_ms"] = round(ms[max(0, int(len(ms) * 0.99) - 1)], 2)
    figures["placement_over_berth_p50"] = round(
        figures["placement_p50_ms"] / figures["berth_p50_ms"], 1
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,2000,10000", help="providers, ascending")
    parser.add_argument("--samples", type=int, default=40, help="requests per server per size")
    parser.add_argument("--skip-race", action="store_true")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--providers", type=int, default=50)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--client", choices=CLIENTS, default=CLIENTS[0], help="the racers' HTTP")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    figures: dict[str, Any] = {"query": QUERY, "load_average_start": load_average()}
    with tempfile.TemporaryDirectory(prefix="berth-placement-api-") as work:
        data_dir, db_path = Path(work) / "berth", Path(work) / "placement.db"
        with (
            berth_server(data_dir) as berth_at,
            reference_server(db_path) as placement_at,
        ):
            bases = {
                "berth": f"http://{berth_at[0]}:{berth_at[1]}",
                "placement": f"http://{placement_at[0]}:{placement_at[1]}",
            }
            held = 0
            for size in sizes:
                note(f"candidates: loading {held} -> {size} providers ...")
                found = nodes(held, size)
                load_placement(db_path, found)
                load_berth(data_dir, bases["berth"], found)
                held = size
                note(f"candidates at {size} providers (load {load_average()}) ...")
                measured = candidates(bases, args.samples)
                measured["load_average"] = load_average()
                figures[f"candidates_{size}"] = measured
                note(json.dumps(measured))
        if not args.skip_race:
            for name in ("berth", "placement"):
                note(f"race on {name} (load {load_average()}) ...")
                figures[f"race_{name}"] = _race(name, Path(work), args)
                note(json.dumps(figures[f"race_{name}"]))
    if not args.skip_race:
        figures["race_berth_over_placement"] = round(
            figures["race_berth"]["placements_per_s"]
            / max(figures["race_placement"]["placements_per_s"], 0.1),
            1,
        )
    figures["load_average_end"] = load_average()
    print(json.dumps(figures))
    return 0


def _race(name: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    start_load = load_average()
    if name == "berth":
        server = berth_server(work / "race-berth", "--idle-wait-s", "0.05")
    else:
        server = reference_server(work / "race-placement.db")
    with server as (host, port):
        found = race_at(
            f"http://{host}:{port}", args.clients, args.providers, args.requests, args.client
        )
    return {**found, "load_average": [start_load, load_average()]}


if __name__ == "__main__":
    raise SystemExit(main())
