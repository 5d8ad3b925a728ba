"""Queue depth by resource shape: the fold, and the read model kept by the
queue projector from the scheduler worker's answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from berth.app import App, Settings
from berth.cli import main
from berth.client import Publisher
from consumers.batches import parse_shape, shape_key
from consumers.partition_writer import catch_up_all
from consumers.queue_projector import QueueOffsetMoved, QueueProjector, read_depth
from consumers.scheduler_worker import SchedulerWorker
from projections.queue_depth import Depth, QueueDepth
from projections.view.tables import queue_offsets
from scheduling.config import SchedulerConfig
from schemas.events import Release
from schemas.requests import BatchMode, BatchRequest, PlacementRequest
from tests.builders import provider
from tests.placements import placement_answers
from tests.stopped_commit import StoppedInCommit

NOW_MS = 10**12


def test_the_fold_counts_queued_instances_per_shape_until_answered() -> None:
    fold = QueueDepth()
    fold.apply(0, 0, {"request_id": "a", "status": "queued", "waiting": {"VCPU=2": 3}})
    fold.apply(1, 0, {"request_id": "b", "status": "queued", "waiting": {"VCPU=2": 1, "VCPU=4": 2}})
    fold.apply(1, 1, {"request_id": "c", "status": "committed"})  # never queued: no change
    assert fold.depth() == {"VCPU=2": Depth(4, 2), "VCPU=4": Depth(2, 1)}
    fold.apply(0, 1, {"request_id": "a", "status": "committed"})
    fold.apply(1, 2, {"request_id": "b", "status": "failed"})
    assert fold.depth() == {}


def test_a_shape_is_the_same_whatever_the_order_of_its_classes() -> None:
    assert shape_key({"VCPU": 2, "MEMORY_MB": 4096}) == shape_key({"MEMORY_MB": 4096, "VCPU": 2})
    assert shape_key({"VCPU": 2, "MEMORY_MB": 4096}) == "MEMORY_MB=4096,VCPU=2"


def test_a_shape_is_read_back_from_its_text() -> None:
    assert parse_shape("VCPU=2, MEMORY_MB=4096") == {"VCPU": 2, "MEMORY_MB": 4096}
    assert parse_shape(shape_key({"VCPU": 2, "DISK_GB": 20})) == {"DISK_GB": 20, "VCPU": 2}
    for bad in ("VCPU", "VCPU=two", "VCPU=2,", ""):
        with pytest.raises(ValueError, match="resources are CLASS=AMOUNT"):
            parse_shape(bad)


def _batch(
    batch_id: str, instances: int, vcpu: int, mode: BatchMode, priority: int = 0
) -> BatchRequest:
    member = PlacementRequest(
        request_id=f"{batch_id}-m",
        ts_ms=NOW_MS,
        project_id="ci",
        resources={"VCPU": vcpu},
        num_instances=instances,
    )
    return BatchRequest(
        batch_id=batch_id, ts_ms=NOW_MS, members=(member,), mode=mode, priority=priority
    )


def _worker(app: App, publisher: Publisher) -> SchedulerWorker:
    writers = app.writers()

    def pump() -> None:
        catch_up_all(writers)

    pump()
    return app.scheduler_worker(SchedulerConfig.default(), pump, publisher)


def test_queue_depth_follows_the_queue_exactly_once_and_survives_restarts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(data_dir=tmp_path, partitions=2)
    with App(settings) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        publisher.publish([e for n in range(2) for e in provider(f"n{n}", ts=1, VCPU=4)])
        worker = _worker(app, publisher)
        publisher.submit([_batch("fill", 2, 4, "all_or_nothing")])
        worker.step()
        publisher.submit(
            [_batch("wait", 3, 2, "queue"), _batch("urgent", 1, 4, "queue", priority=5)]
        )
        worker.step()
        projector = QueueProjector(app.log, settings.topics, app.engine)
        assert projector.catch_up() == 3
        waiting = {
            "VCPU=2": {"instances": 3, "batches": 1},
            "VCPU=4": {"instances": 1, "batches": 1},
        }
        assert read_depth(app.engine) == waiting
        # a second projector resumes from the view's offsets: nothing is counted twice
        assert QueueProjector(app.log, settings.topics, app.engine).catch_up() == 0
        assert read_depth(app.engine) == waiting

        # a restarted worker queues the waiting batches again, in priority order
        worker = _worker(app, publisher)
        assert worker.batches is not None
        assert [b.batch_id for b in worker.batches.queued()] == ["urgent", "wait"]
        answers = placement_answers(app)
        (fill,) = [a for a in answers if a["request_id"] == "fill"]
        publisher.publish(
            [
                Release(event_id=f"rel-{rid}", ts_ms=NOW_MS, partition_key=pid, reservation_id=rid)
                for rid, pid in fill["reservations"]
            ]
        )
        worker.step()  # drains the queue head first: urgent fits, wait (6 VCPU) no longer does
        projector.catch_up()
        assert read_depth(app.engine) == {"VCPU=2": {"instances": 3, "batches": 1}}
    assert main(["queue", "--data-dir", str(tmp_path), "--partitions", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {
        "VCPU=2": {"instances": 3, "batches": 1}
    }


def _committed(app: App) -> dict[int, int]:
    with app.engine.connect() as conn:
        return {int(p): int(o) for p, o in conn.execute(select(queue_offsets))}


def test_answers_that_change_no_queue_commit_nothing_and_are_folded_again_after_a_restart(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path, partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        publisher.publish([e for n in range(2) for e in provider(f"n{n}", ts=1, VCPU=4)])
        worker = _worker(app, publisher)
        publisher.submit([_batch("fill", 2, 2, "all_or_nothing")])
        worker.step()
        projector = QueueProjector(app.log, settings.topics, app.engine)
        assert projector.catch_up() == 1
        # a placed batch leaves the queue as it was: no transaction for it
        assert _committed(app) == {} and read_depth(app.engine) == {}
        again = QueueProjector(app.log, settings.topics, app.engine)
        assert again.catch_up() == 1 and read_depth(app.engine) == {}

        publisher.submit([_batch("wait", 2, 4, "queue")])
        worker.step()
        assert projector.catch_up() == 1
        # a queued one commits, with the offset of every answer before it
        assert _committed(app) == {0: 2}
        assert read_depth(app.engine) == {"VCPU=4": {"instances": 2, "batches": 1}}
        assert QueueProjector(app.log, settings.topics, app.engine).catch_up() == 0


def test_a_projector_stopped_mid_commit_holds_another_back_only_its_stall_bound(
    tmp_path: Path, postgres_url: str
) -> None:
    """Two workers' queue projectors on PostgreSQL: the one stopped inside its
    commit (holding the partition's offset row) is ended by the server after
    its stall bound, the other commits, and the first, resumed, learns it is
    stale; the queue is counted once."""
    settings = Settings(data_dir=tmp_path, db_url=postgres_url, partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        publisher.publish([e for n in range(2) for e in provider(f"n{n}", ts=1, VCPU=4)])
        worker = _worker(app, publisher)
        publisher.submit([_batch("wait", 3, 8, "queue")])
        worker.step()
        first = QueueProjector(app.log, settings.topics, app.engine, stall_ms=300)
        stopped = StoppedInCommit(app.engine, first.catch_up)
        other = QueueProjector(app.log, settings.topics, app.engine)
        assert other.catch_up() == 1, "it waited on the stopped projector, then committed"
        assert stopped.resume() == [QueueOffsetMoved]
        assert read_depth(app.engine) == {"VCPU=8": {"instances": 3, "batches": 1}}
        assert _committed(app) == {0: 1}
