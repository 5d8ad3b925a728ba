"""The scheduler worker against the real ledger: stale views lose races, the
writer rejects, the scheduler retries elsewhere; nothing is ever overcommitted."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

import numpy as np
from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from consumers.scheduler import OutcomeFollower, Scheduler, Versioned
from consumers.snapshot_source import LiveSnapshot, snapshot_from_view
from projections.view.tables import inventories
from scheduling.engine import Engine
from scheduling.filters.base import Context, HostFilter
from scheduling.model import FloatArray, IntArray, Snapshot
from scheduling.scriptlet import Scriptlet
from scheduling.weighers.base import Weigher
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


def _providers_of_4_vcpus(app: App, publisher: Publisher, count: int) -> Callable[[], None]:
    """Publish ``count`` providers of 4 VCPU, let the writers decide them, and
    return the pump that lets the writers catch up from then on."""
    publisher.publish([e for n in range(count) for e in provider(f"n{n}", ts=1, VCPU=4)])
    writers = app.writers()

    def pump() -> None:
        catch_up_all(writers)

    pump()
    return pump


def test_two_schedulers_on_a_stale_view_never_overcommit(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, partitions=3)
    with App(settings) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        pump = _providers_of_4_vcpus(app, publisher, 6)
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


class FirstSnapshot:
    """A versioned source stuck on the first snapshot it read: the view never
    seems to catch up, so only the scheduler's own bookkeeping of what it
    proposed since those offsets keeps it from counting capacity twice."""

    def __init__(self, live: LiveSnapshot) -> None:
        self.snapshot = live()
        self.seen = dict(live.offsets())

    def __call__(self) -> Snapshot:
        return self.snapshot

    def offsets(self) -> Mapping[int, int]:
        return self.seen


def test_waves_on_a_lagging_view_count_the_claims_proposed_since(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path, partitions=3)) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        pump = _providers_of_4_vcpus(app, publisher, 4)
        stale = FirstSnapshot(LiveSnapshot(app.engine))
        assert isinstance(stale, Versioned)
        scheduler = Scheduler(
            publisher,
            Engine([Untried(), Fits()], [Pack()]),
            stale,
            OutcomeFollower(app.log, app.settings.topics.outcomes),
            pump=pump,
            wave=3,
            depth=2,
        )
        results = scheduler.schedule(_requests("w", 9))
        with app.engine.connect() as conn:
            usage = conn.execute(select(inventories.c.held, inventories.c.capacity)).all()
    placed = [r for r in results if r.placed]
    assert [r.request_id for r in results] == [f"w{k}" for k in range(9)]
    assert len(placed) == 8  # 4 providers x 4 VCPU / 2
    assert all(r.attempts == 1 for r in results), "no claim should lose to its own wave"
    assert results[-1].reason.startswith("no valid host")
    assert all(held <= capacity for held, capacity in usage)
    assert sum(held for held, _ in usage) == 16


def test_a_live_view_that_catches_up_forgets_the_claims_it_reflects(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path, partitions=3)) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        pump = _providers_of_4_vcpus(app, publisher, 6)
        scheduler = Scheduler(
            publisher,
            Engine([Untried(), Fits()], [Pack()]),
            LiveSnapshot(app.engine),
            OutcomeFollower(app.log, app.settings.topics.outcomes),
            pump=pump,
            wave=4,
        )
        first = scheduler.schedule(_requests("a", 6))
        second = scheduler.schedule(_requests("b", 7))
    assert all(r.placed and r.attempts == 1 for r in first)
    assert [r.placed for r in second] == [True] * 6 + [False]
    assert all(r.attempts == 1 for r in second)
    # the first call's claims are in the view the second call read, so none of
    # them is still counted on top of it (the last wave's are dropped at the next read)
    assert scheduler._unseen and not any(rid.startswith("a") for rid in scheduler._unseen)


def test_bounded_waves_fill_the_cluster_with_one_index_kept_up_to_date(tmp_path: Path) -> None:
    """The scheduler's working twins and the live view's snapshots say which
    rows they changed: the engine's feasibility index follows them across
    waves instead of being built again, and bounded placement still fills
    every place (no false "no valid host") without overcommitting."""
    from scheduling.config import SchedulerConfig

    config = SchedulerConfig.from_mapping({"scheduler": {"mode": "bounded", "candidates": 3}})
    engine = config.engine()
    with App(Settings(data_dir=tmp_path, partitions=3)) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        pump = _providers_of_4_vcpus(app, publisher, 20)
        scheduler = Scheduler(
            publisher,
            engine,
            LiveSnapshot(app.engine, placements=True),
            OutcomeFollower(app.log, app.settings.topics.outcomes),
            pump=pump,
            wave=7,
        )
        results = scheduler.schedule(_requests("a", 45))
        with app.engine.connect() as conn:
            usage = conn.execute(select(inventories.c.held, inventories.c.capacity)).all()
    assert [r.placed for r in results] == [True] * 40 + [False] * 5  # 20 x 4 VCPU / 2
    assert all(r.attempts == 1 for r in results[:40])
    assert all(held == capacity for held, capacity in usage)
    assert engine.index_builds == 1


def test_the_index_follows_a_view_a_wave_behind_across_many_rows(tmp_path: Path) -> None:
    """The writers decide each wave but leave its view commit for the next
    round, so every wave's snapshot lacks the claims of the wave before
    (counted on a working twin) and the view moves on by hundreds of rows
    at a time, more than a twin's lineage carries (it then starts afresh
    from the snapshot it is made of): the index still follows every
    snapshot and every twin without being built again."""
    from scheduling.config import SchedulerConfig

    config = SchedulerConfig.from_mapping({"scheduler": {"mode": "bounded", "candidates": 3}})
    engine = config.engine()
    # each wave's snapshot differs from the last by 600 rows and its twins
    # count 1,200 more (the claims of two waves the view lacks), more than a
    # lineage carries (1,024) before it starts afresh; the index follows up
    # to a quarter of the providers' rows at once
    count = 5_000
    with App(Settings(data_dir=tmp_path, partitions=3)) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        publisher.publish([e for n in range(count) for e in provider(f"n{n}", ts=1, VCPU=1)])
        writers = app.writers()
        catch_up_all(writers)
        scheduler = Scheduler(
            publisher,
            engine,
            LiveSnapshot(app.engine),
            OutcomeFollower(app.log, app.settings.topics.outcomes),
            decide=lambda: catch_up_all(writers, defer=True),
            wave=600,
        )
        requests = [
            PlacementRequest(
                request_id=f"r{k}", ts_ms=NOW_MS, project_id="p", resources={"VCPU": 1}
            )
            for k in range(count + 3)
        ]
        results = scheduler.schedule(requests)
        catch_up_all(writers)
        with app.engine.connect() as conn:
            usage = conn.execute(select(inventories.c.held, inventories.c.capacity)).all()
    assert [r.placed for r in results] == [True] * count + [False] * 3
    assert all(held == capacity for held, capacity in usage)
    assert engine.index_builds == 1


def test_the_placement_scriptlet_steers_claims_and_refuses_requests(tmp_path: Path) -> None:
    # the operator's program keeps n0 free and refuses project "x"; the writer
    # still decides every claim the scheduler proposes
    program = Scriptlet(
        "def instance_placement(request, candidates):\n"
        '    if request.project_id == "x":\n'
        '        return "project x is frozen"\n'
        '    others = [c for c in candidates if c["provider_id"] != "n0"]\n'
        "    if others:\n"
        '        set_target(others[0]["provider_id"])\n'
    )
    with App(Settings(data_dir=tmp_path, partitions=3)) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        pump = _providers_of_4_vcpus(app, publisher, 3)
        scheduler = Scheduler(
            publisher,
            Engine([Untried(), Fits()], [Pack()], scriptlet=program),
            LiveSnapshot(app.engine),
            OutcomeFollower(app.log, app.settings.topics.outcomes),
            pump=pump,
        )
        frozen = PlacementRequest(
            request_id="x0", ts_ms=NOW_MS, project_id="x", resources={"VCPU": 2}
        )
        held: list[dict[str, int]] = []
        results = []
        for wave in (_requests("s", 4), [frozen, *_requests("t", 2)]):
            results += scheduler.schedule(wave)
            with app.engine.connect() as conn:
                rows = conn.execute(select(inventories.c.provider_id, inventories.c.held))
                held.append({pid: amount for pid, amount in rows.all()})
    by_id = {r.request_id: r for r in results}
    assert all(r.placed for r in results if r.request_id != "x0")
    assert by_id["x0"].reason == (
        "refused by the placement scriptlet: project x is frozen (0 of 1 instances placed)"
    )
    # n1 and n2 fill first (the weigher alone packs onto the first provider);
    # only then is n0, the one candidate left, used
    assert held == [{"n0": 0, "n1": 4, "n2": 4}, {"n0": 4, "n1": 4, "n2": 4}]
