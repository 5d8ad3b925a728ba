"""Eight concurrent publishers race for a tight cluster through the scheduler
and the ledger: exactly the capacity is placed, the rest fails with a reason,
no provider is ever over capacity, and every rejected claim was retried or
reported."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all, step_all
from consumers.scheduler import OutcomeFollower, Scheduled, Scheduler
from consumers.snapshot_source import snapshot_from_view
from projections.view.tables import inventories, reservations
from scheduling.config import SchedulerConfig
from schemas.requests import PlacementRequest
from tests.builders import provider

NOW_MS = 10**12
PROVIDERS = 10
PER_PROVIDER = 8  # VCPU 4 x 4.0 / 2, MEMORY_MB 32768 / 4096, DISK_GB 160 / 20
PUBLISHERS = 8
REQUESTS_EACH = 15  # 120 requests for 80 places


def test_eight_publishers_race_for_a_tight_cluster(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, partitions=4)
    with App(settings) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        edge.publish(
            [
                e
                for n in range(PROVIDERS)
                for e in provider(f"n{n}", ts=1, VCPU=(4, 4.0), MEMORY_MB=32768, DISK_GB=160)
            ]
        )
        writers = app.writers()
        stop = threading.Event()

        def projector() -> None:  # the single writer of every partition
            while not stop.is_set():
                if not step_all(writers):
                    stop.wait(0.002)

        results: list[Scheduled] = []
        lock = threading.Lock()

        def publisher(k: int) -> None:
            scheduler = Scheduler(
                Publisher(app.log, clock_ms=lambda: NOW_MS),
                SchedulerConfig.default().engine(),
                lambda: snapshot_from_view(app.engine),
                OutcomeFollower(app.log, settings.topics.outcomes),
                max_attempts=PROVIDERS,
            )
            for i in range(REQUESTS_EACH):
                request = PlacementRequest(
                    request_id=f"pub{k}-{i}",
                    ts_ms=NOW_MS,
                    project_id="ci",
                    resources={"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 20},
                )
                done = scheduler.schedule([request])
                with lock:
                    results.extend(done)

        catch_up_all(writers)
        applying = threading.Thread(target=projector)
        applying.start()
        publishers = [threading.Thread(target=publisher, args=(k,)) for k in range(PUBLISHERS)]
        for thread in publishers:
            thread.start()
        for thread in publishers:
            thread.join(timeout=120)
        stop.set()
        applying.join(timeout=30)
        assert not any(t.is_alive() for t in publishers), "a publisher hung"
        catch_up_all(writers)
        with app.engine.connect() as conn:
            usage = conn.execute(
                select(inventories.c.held, inventories.c.capacity, inventories.c.resource_class)
            ).all()
            held = conn.execute(
                select(reservations.c.reservation_id).where(reservations.c.status == "held")
            ).all()
    placed = [r for r in results if r.placed]
    failed = [r for r in results if not r.placed]
    assert len(results) == PUBLISHERS * REQUESTS_EACH
    assert len(placed) == PROVIDERS * PER_PROVIDER
    assert len(failed) == PUBLISHERS * REQUESTS_EACH - PROVIDERS * PER_PROVIDER
    assert all(held_ <= capacity for held_, capacity, _ in usage)
    assert len(held) == len(placed)  # nothing held by a request that failed
    assert all(r.reason.startswith(("no valid host", "rejected by the writer")) for r in failed)
