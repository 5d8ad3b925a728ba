"""The long-running scheduler: requests in, results out, resumable from the log."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

import pytest
from sqlalchemy import select

import consumers.partition_writer
import consumers.scheduler_worker
from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from consumers.scheduler import OutcomeFollower, Scheduled, Scheduler
from consumers.scheduler_worker import SchedulerWorker
from consumers.snapshot_source import LiveSnapshot, snapshot_from_view
from ledger.log import Append
from projections.view.loader import committed_offsets
from projections.view.tables import inventories
from scheduling.config import SchedulerConfig
from schemas.ranked import candidates_of
from schemas.requests import PlacementRequest
from tests.builders import provider
from tests.placements import placement_answers

NOW_MS = 10**12


class _Died(Exception):
    pass


def _worker(app: App, dies: bool = False) -> SchedulerWorker:
    writers = app.writers()
    pumped = []

    def pump() -> None:
        pumped.append(1)
        if dies and len(pumped) > 1:  # after its claims are appended, before any answer
            raise _Died
        catch_up_all(writers)

    scheduler = Scheduler(
        Publisher(app.log, clock_ms=lambda: NOW_MS),
        SchedulerConfig.default().engine(),
        lambda: snapshot_from_view(app.engine),
        OutcomeFollower(app.log, app.settings.topics.outcomes),
        pump=pump,
    )
    return SchedulerWorker(app.log, app.settings.topics, scheduler)


def _request(rid: str, vcpus: int) -> PlacementRequest:
    return PlacementRequest(request_id=rid, ts_ms=NOW_MS, project_id="p", resources={"VCPU": vcpus})


def test_requests_are_answered_once_and_the_worker_resumes(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, partitions=2)
    with App(settings) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        edge.publish([e for n in range(3) for e in provider(f"n{n}", ts=1, VCPU=4)])
        edge.submit([_request(f"r{k}", 2) for k in range(4)] + [_request("huge", 64)])
        app.log.append(settings.topics.requests, [Append(0, b"bad", b'{"request_id": 7}')])
        first = _worker(app)
        assert first.step() == 6
        assert first.step() == 0
        edge.submit([_request("r0", 2), _request("r9", 2)])  # r0 again: its first answer
        restarted = _worker(app)  # resumes after what was answered
        assert restarted.step() == 2
        results = placement_answers(app)
    by_id = {str(r["request_id"]): Scheduled.from_dict(r) for r in results}
    assert len(results) == 8
    assert all(by_id[f"r{k}"].placed for k in (0, 1, 2, 3, 9))
    assert not by_id["huge"].placed and by_id["huge"].reason.startswith("no valid host")
    invalid = [r for r in results if str(r["request_id"]).startswith("?")]
    assert len(invalid) == 1 and "invalid request" in str(invalid[0]["reason"])
    answers_for_r0 = [r for r in results if r["request_id"] == "r0"]
    assert len(answers_for_r0) == 2 and answers_for_r0[0] == {
        **answers_for_r0[1],
        "source": answers_for_r0[0]["source"],
    }

    # the restarted worker claims under a new generation of reservation ids
    # ("<request>.<instance>.<attempt><generation>")
    def generation(reservation_id: str) -> str:
        return reservation_id.split(".", 2)[2]

    assert generation(by_id["r9"].reservations[0][0]) != generation(by_id["r1"].reservations[0][0])


def test_a_worker_that_died_before_answering_claims_under_a_new_generation(
    tmp_path: Path,
) -> None:
    """Found by the simulator (docs/simulation.md): the generation came from
    the placements topic alone, so a worker that died after claiming and
    before answering gave its successor the same reservation ids."""
    with App(Settings(data_dir=tmp_path, partitions=2)) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        edge.publish(provider("n0", ts=1, VCPU=4))
        edge.submit([_request("r1", 1)])
        with pytest.raises(_Died):
            _worker(app, dies=True).step()
        events = [
            json.loads(r.value)
            for p in range(2)
            for r in app.log.read(app.settings.topics.events, p, 0, 100)
        ]
        abandoned = [e["reservation_id"] for e in events if e["type"] == "claim"]
        assert len(abandoned) == 1
        assert _worker(app).step() == 1
        (answer,) = placement_answers(app)
    placed = Scheduled.from_dict(answer)
    assert placed.placed, placed.reason
    assert placed.reservations[0][0] not in abandoned


def test_an_idle_worker_reads_the_views_changes_before_the_next_request(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, partitions=2)
    with App(settings) as app:
        writers = app.writers()
        worker = app.scheduler_worker(SchedulerConfig.default(), lambda: catch_up_all(writers))
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        edge.publish([e for n in range(3) for e in provider(f"n{n}", ts=1, VCPU=4)])
        edge.submit([_request("r0", 2)])
        assert worker.step() == 1
        snapshot = worker.refresh
        assert isinstance(snapshot, LiveSnapshot)
        with app.engine.connect() as conn:
            committed = committed_offsets(conn)
        # ranked before its claim was decided: the view has moved on since
        assert snapshot.offsets() != committed
        worker.idle()
        assert snapshot.offsets() == committed
        # and holds the placement: the next request's wave reads nothing more
        assert snapshot.snapshot is not None
        assert [p.provider_id for p in snapshot.snapshot.providers if "r0.0" in p.instances] == [
            answer["reservations"][0][1] for answer in placement_answers(app)
        ]


def _appends_counted(app: App, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The topic of each append to ``app``'s log from now on."""
    appended: list[str] = []
    real = app.log.append

    def append(topic: str, records: list[Append]) -> list[int]:
        appended.append(topic)
        return real(topic, records)

    monkeypatch.setattr(app.log, "append", append)
    return appended


def test_a_steps_requests_of_every_partition_are_one_wave_and_one_answer_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(data_dir=tmp_path, partitions=2)
    with App(settings) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        edge.publish([e for n in range(4) for e in provider(f"n{n}", ts=1, VCPU=4)])
        where = edge.submit([_request(f"r{k}", 2) for k in range(6)])
        assert {partition for partition, _ in where} == {0, 1}
        worker = _worker(app)
        appended = _appends_counted(app, monkeypatch)
        assert worker.step() == 6
        # one append of every claim (one wave), one of every answer
        assert appended.count(settings.topics.events) == 1
        assert appended.count(settings.topics.placements) == 1
        results = placement_answers(app)
    assert sorted(str(r["request_id"]) for r in results if r["placed"]) == [
        f"r{k}" for k in range(6)
    ]
    # each partition's answers in the order of its requests
    for partition in (0, 1):
        sources = [r["source"][1] for r in results if r["source"][0] == partition]
        assert sources == sorted(sources)


def _retained_per_answer(worker: SchedulerWorker, edge: Publisher, first: int, more: int) -> float:
    """Bytes the worker still holds, per answer, for ``more`` answers after
    ``first`` (what the steps it took left allocated, traced through it)."""
    # the worker's own, not its writers' (the pump runs them in its step)
    worker_file = consumers.scheduler_worker.__file__
    writer_file = consumers.partition_writer.__file__

    def held() -> int:
        """What tracemalloc.Filter(True, worker_file, all_frames=True) and
        Filter(False, writer_file, ...) keep, by the file names' equality:
        the filters' fnmatch over every frame took seconds."""
        gc.collect()
        total = 0
        for trace in tracemalloc.take_snapshot().traces:
            files = {frame.filename for frame in trace.traceback}
            if worker_file in files and writer_file not in files:
                total += trace.size
        return total

    edge.submit([_request(f"r{k}", 1) for k in range(first)])
    while worker.step():
        pass
    before = held()
    edge.submit([_request(f"r{k}", 1) for k in range(first, first + more)])
    while worker.step():
        pass
    return (held() - before) / more


def test_the_memory_a_worker_keeps_does_not_grow_with_its_answers_candidates(
    tmp_path: Path,
) -> None:
    """Every answer records its best 10 candidates with each weigher's part
    (read back into dicts, several KB); the worker keeps only where each answer is, for a
    resubmitted id, which is then answered the same, read back."""
    with App(Settings(data_dir=tmp_path, partitions=2)) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        edge.publish([e for n in range(40) for e in provider(f"n{n}", ts=1, VCPU=400)])
        worker = _worker(app)
        tracemalloc.start(30)
        try:
            per_answer = _retained_per_answer(worker, edge, 20, 200)
        finally:
            tracemalloc.stop()
        first = {r["request_id"]: r for r in placement_answers(app)}
        assert len(candidates_of(first["r3"])) == 10
        # its id and where its answer is (an answer kept whole: about 9 KB)
        assert per_answer < 1000, per_answer
        # resubmitted, to a worker that answered it and to a restarted one
        edge.submit([_request("r3", 1), _request("r7", 2)])
        assert worker.step() == 2
        edge.submit([_request("r3", 1)])
        assert _worker(app).step() == 1
        again = [r for r in placement_answers(app) if r["request_id"] in ("r3", "r7")]
    assert len(again) == 5
    for answer in again:
        rid = answer["request_id"]
        assert {**answer, "source": None} == {**first[rid], "source": None}


def test_a_worker_configured_with_waves_in_flight_places_a_step_in_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[scheduler] wave`` and ``depth`` reach the worker's scheduler: a
    step's requests go out in waves of ``wave`` claims, the next ranked
    before the last is decided, each counting the claims still in flight,
    so none loses to another and the cluster fills exactly."""
    settings = Settings(data_dir=tmp_path, partitions=2)
    config = SchedulerConfig.from_mapping({"scheduler": {"wave": 2, "depth": 2}})
    with App(settings) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        edge.publish([e for n in range(4) for e in provider(f"n{n}", ts=1, VCPU=4)])
        edge.submit([_request(f"r{k}", 2) for k in range(9)])
        writers = app.writers()
        worker = app.scheduler_worker(config, lambda: catch_up_all(writers))
        appended = _appends_counted(app, monkeypatch)
        assert (worker.scheduler.wave, worker.scheduler.depth) == (2, 2)
        assert worker.step() == 9
        catch_up_all(writers)
        results = placement_answers(app)
        with app.engine.connect() as conn:
            held = conn.execute(select(inventories.c.held, inventories.c.capacity)).all()
    assert appended.count(settings.topics.events) == 4  # 8 claims, 2 a wave
    assert sorted(r["placed"] for r in results) == [False] + [True] * 8
    assert all(r["attempts"] == 1 for r in results if r["placed"])
    assert sum(h for h, _ in held) == 16 and all(h <= c for h, c in held)
