"""The scheduler worker against the real ledger: stale views lose races, the
writer rejects, the scheduler retries elsewhere; nothing is ever overcommitted."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from consumers.scheduler import OutcomeFollower, Scheduler
from consumers.snapshot_source import snapshot_from_view
from placement.engine import Engine
from placement.filters.base import Context, HostFilter
from placement.model import FloatArray, IntArray
from placement.weighers.base import Weigher
from projections.view.tables import inventories
from schemas.requests import PlacementRequest
from tests.builders import provider

NOW_MS = 10**12


class Fits(HostFilter):
    name = "Fits"
    per_pick = True

    def reject(self, ctx: Context, row: int) -> str | None:
        for rc, amount in ctx.request.resources.items():
            column = ctx.snapshot.column(rc)
            if column is None:
                return f"{rc} not provided"
            free = int(ctx.snapshot.capacity()[row, column] - ctx.used[row, column])
            if amount > free:
                return f"{rc} wanted {amount}, free {free}"
        return None


class Untried(HostFilter):
    name = "Untried"
    cost = 0

    def reject(self, ctx: Context, row: int) -> str | None:
        pid = ctx.snapshot.providers[row].provider_id
        return "already tried" if pid in ctx.request.tried_providers else None


class Pack(Weigher):
    name = "Pack"
    multiplier_key: ClassVar[str] = "pack_weight_multiplier"

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        used: FloatArray = ctx.used[rows].sum(axis=1).astype(np.float64)
        return used


def _requests(prefix: str, count: int) -> list[PlacementRequest]:
    return [
        PlacementRequest(
            request_id=f"{prefix}{k}", ts_ms=NOW_MS, project_id="p", resources={"VCPU": 2}
        )
        for k in range(count)
    ]


def test_two_schedulers_on_a_stale_view_never_overcommit(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, partitions=3)
    with App(settings) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        publisher.publish([e for n in range(6) for e in provider(f"n{n}", ts=1, VCPU=4)])
        writers = app.writers()

        def pump() -> None:
            for writer in writers:
                writer.catch_up()

        pump()
        stale = snapshot_from_view(app.engine)  # both schedulers keep seeing this

        def scheduler() -> Scheduler:
            return Scheduler(
                publisher,
                Engine([Untried(), Fits()], [Pack()]),
                lambda: stale,
                OutcomeFollower(app.log, settings.topics.outcomes),
                pump=pump,
                max_attempts=8,
            )

        first, second = scheduler(), scheduler()
        results = []
        for a, b in zip(_requests("a", 8), _requests("b", 8), strict=True):
            results += first.schedule([a])
            results += second.schedule([b])
        with app.engine.connect() as conn:
            usage = conn.execute(
                select(inventories.c.provider_id, inventories.c.held, inventories.c.capacity)
            ).all()
    placed = [r for r in results if r.placed]
    failed = [r for r in results if not r.placed]
    assert len(placed) == 12  # 6 providers x 4 VCPU / 2
    assert len(failed) == 4
    assert all(held <= capacity for _, held, capacity in usage)
    assert sum(held for _, held, _ in usage) == 24
    assert any(r.attempts > 1 for r in placed), "the stale view should have lost races"
    assert all(r.reason for r in failed)
    assert {pid for r in placed for _, pid in r.reservations} == {f"n{n}" for n in range(6)}
