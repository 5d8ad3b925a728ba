"""The projector killed with SIGKILL at random points resumes without losing or
double-applying a record: its view ends identical to an uninterrupted replay."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from berth.app import App, Settings
from berth.client import Publisher
from berth.replay import replay
from projections.view.engine import make_engine
from projections.view.tables import inventories, outcomes, partition_offsets, reservations
from schemas.events import Event
from tests.builders import claim_items, consume, provider, release

PARTITIONS = 2
DEADLINE_S = 60.0


def _fill_log(data_dir: Path, rng: random.Random) -> int:
    settings = Settings(data_dir=data_dir, partitions=PARTITIONS)
    with App(settings) as app:
        publisher = Publisher(app.log, clock_ms=lambda: 10**12)
        pids = [f"n{k}" for k in range(12)]
        publisher.publish([e for pid in pids for e in provider(pid, ts=1, VCPU=16, MEMORY_MB=8192)])
        events: list[Event] = []
        live: list[tuple[str, str]] = []
        for k in range(3000):
            ts = 10 + k
            if live and rng.random() < 0.4:
                rid, pid = live.pop(rng.randrange(len(live)))
                maker = consume if rng.random() < 0.5 else release
                event: Event = maker(rid, ts=ts).model_copy(update={"partition_key": pid})
            else:
                pid = rng.choice(pids)
                rid = f"r{k}"
                event = claim_items(rid, {pid: {"VCPU": 1, "MEMORY_MB": 512}}, ts=ts, lease_ms=500)
                live.append((rid, pid))
            events.append(event)
        for start in range(0, len(events), 250):
            publisher.publish(events[start : start + 250])
        total = sum(app.log.end_offset(settings.topics.events, p) for p in range(PARTITIONS))
    return total


def _applied(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.coalesce(func.sum(partition_offsets.c.next_offset), 0))
            ).scalar_one()
        )


def _snapshot(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        return {
            "outcomes": conn.execute(
                select(
                    outcomes.c.partition,
                    outcomes.c.offset,
                    outcomes.c.seq,
                    outcomes.c.kind,
                    outcomes.c.subject,
                ).order_by(outcomes.c.partition, outcomes.c.offset, outcomes.c.seq)
            ).all(),
            "reservations": conn.execute(
                select(
                    reservations.c.reservation_id,
                    reservations.c.status,
                    reservations.c.expires_at_ms,
                ).order_by(reservations.c.reservation_id)
            ).all(),
            "inventories": conn.execute(
                select(
                    inventories.c.provider_id,
                    inventories.c.resource_class,
                    inventories.c.held,
                    inventories.c.consumed,
                ).order_by(inventories.c.provider_id, inventories.c.resource_class)
            ).all(),
        }


def _start(data_dir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "berth.cli",
            "projector",
            "--data-dir",
            str(data_dir),
            "--idle-wait-s",
            "0.01",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "BERTH_BATCH_SIZE": "37"},
    )


def test_projector_survives_sigkill(tmp_path: Path) -> None:
    rng = random.Random(2024)
    data_dir = tmp_path / "data"
    total = _fill_log(data_dir, rng)
    engine = make_engine(f"sqlite:///{data_dir / 'view.db'}")
    kills = 0
    deadline = time.monotonic() + DEADLINE_S
    while _applied(engine) < total:
        assert time.monotonic() < deadline, "the projector made no progress"
        child = _start(data_dir)
        target = _applied(engine) + rng.randrange(50, 600)
        while _applied(engine) < min(target, total) and child.poll() is None:
            assert time.monotonic() < deadline, "the projector made no progress"
            time.sleep(0.005)  # polling the view's committed offset, not synchronising
        child.send_signal(signal.SIGKILL)
        child.wait()
        kills += 1
    assert kills >= 3
    survived = _snapshot(engine)
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    result = replay(
        Settings(data_dir=data_dir, db_url=f"sqlite:///{reference_dir / 'view.db'}"),
        verify=True,
    )
    assert result.divergence is None  # republished outcomes were de-duplicated
    assert result.records == total
    assert survived == _snapshot(make_engine(result.view_url))
