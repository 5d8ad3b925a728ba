"""Checkpoints of the view for ``berth explain --request``: the view as of
an answer's offsets rebuilt from the newest checkpoint before them is the
one a replay from offset 0 rebuilds; a checkpoint taken while the writers
commit is one consistent state of the view; a damaged or missing one is
named and passed over, never used; the oldest and newest are kept, the
rest pruned to an even spread."""

from __future__ import annotations

import logging
import random
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from berth.app import App, Settings
from berth.audit import explain_request, view_as_of
from berth.checkpoints import Checkpoints
from berth.client import Answers, Publisher
from berth.replay import ReplayStopped, replay_until
from consumers.partition_writer import catch_up_all, step_all
from consumers.snapshot_source import snapshot_from_view
from consumers.state_snapshot import snapshot_of
from ledger import frames
from projections.view.engine import make_engine
from projections.view.loader import load_state
from scheduling.config import SchedulerConfig
from scheduling.model import RESOURCE_ARRAYS, Snapshot
from schemas.events import Event
from schemas.requests import PlacementRequest
from tests.builders import claim, consume, provider, release
from tests.contracts.view_contract import _assert_same_state

NOW = 1_000_000
PARTITIONS = 3


def _churn(rng: random.Random, k: int, open_: list[str]) -> list[Event]:
    """A claim (tagged, grouped now and then: what is placed where counts
    in the snapshot), or a consume or release of an open one."""
    if open_ and rng.random() < 0.4:
        rid = open_.pop(rng.randrange(len(open_)))
        ended = consume(rid, ts=NOW + k) if rng.random() < 0.5 else release(rid, ts=NOW + k)
        return [ended.model_copy(update={"partition_key": rid.split("@")[1]})]
    pid = f"n{rng.randrange(8)}"
    rid = f"c{k}@{pid}"
    made = claim(rid, pid, ts=NOW + k, VCPU=1, MEMORY_MB=256)
    if rng.random() < 0.3:
        made = made.model_copy(update={"tags": frozenset({"db"}), "anti_affinity_group": "g"})
    open_.append(rid)
    return [made]


def _log_with_checkpoints(data: Path, keep: int = 10) -> list[str]:
    """Providers, churn and placed requests, checkpoints taken between;
    the requests' ids."""
    rng = random.Random(3)
    placed: list[str] = []
    with App(Settings(data_dir=data, partitions=PARTITIONS)) as app:
        edge = Publisher(app.log, app.settings.topics)
        edge.publish(
            [e for n in range(8) for e in provider(f"n{n}", ts=NOW, VCPU=16, MEMORY_MB=8192)]
        )
        writers = app.writers()
        worker = app.scheduler_worker(SchedulerConfig.default(), lambda: catch_up_all(writers))
        answers = Answers(app.log, app.settings.topics)
        checkpoints = Checkpoints(app.settings, keep=keep)
        open_: list[str] = []
        for k in range(1, 241):
            edge.publish(_churn(rng, k, open_))
            if k % 20 == 10:
                rid = f"r{k}"
                catch_up_all(writers)
                request = PlacementRequest(
                    request_id=rid, ts_ms=NOW + k, project_id="p", resources={"VCPU": 2}
                )
                edge.submit([request])
                while worker.step():
                    pass
                assert answers.wait([rid], 10.0) == []
                placed.append(rid)
            if k % 30 == 0:
                catch_up_all(writers)
                assert checkpoints.take() is not None
        catch_up_all(writers)
    return placed


def _assert_same(a: Snapshot, b: Snapshot) -> None:
    assert a.providers == b.providers  # instances, groups and tags included
    assert a.classes == b.classes
    assert a.aggregates == b.aggregates
    for name in RESOURCE_ARRAYS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def _offsets(app: App, rid: str) -> dict[int, int]:
    from berth.audit import find_answer

    answer = find_answer(app.log, app.settings.topics.placements, rid)
    return {int(p): o for p, o in answer["offsets"].items()}


def _replayed_view(settings: Settings, offsets: dict[int, int], scratch: Path) -> Snapshot:
    """The view replayed from offset 0 up to ``offsets``, read as a scheduler reads it."""
    target = Settings(data_dir=settings.data_dir, db_url=f"sqlite:///{scratch / 'view.db'}")
    with App(target) as app:
        target = app.settings
    replay_until(target, offsets)
    engine = make_engine(target.view_url)
    try:
        return snapshot_from_view(engine)
    finally:
        engine.dispose()


def test_the_view_from_a_checkpoint_is_the_view_from_a_full_replay(tmp_path: Path) -> None:
    placed = _log_with_checkpoints(tmp_path)
    settings = Settings(data_dir=tmp_path)
    used = set()
    with App(settings) as app:
        for rid in placed:
            offsets = _offsets(app, rid)
            from_checkpoint, checkpoint = view_as_of(app.settings, offsets)
            with Checkpoints.ignored():
                from_zero, none = view_as_of(app.settings, offsets)
            # what the scheduler read, from the view replayed up to its offsets
            with tempfile.TemporaryDirectory() as scratch:
                replayed = _replayed_view(app.settings, offsets, Path(scratch))
            assert none is None
            _assert_same(from_checkpoint, from_zero)
            _assert_same(from_checkpoint, replayed)
            if checkpoint is not None:
                assert checkpoint.within(offsets)
                used.add(checkpoint.path.name)
            story = explain_request(app, rid, provider="n3")
            with Checkpoints.ignored():
                again = explain_request(app, rid, provider="n3")
            assert story.pop("rebuilt_from")["replayed"] <= again.pop("rebuilt_from")["replayed"]
            assert story == again and story["same"]
    assert len(used) >= 4  # most requests were explained from a checkpoint


def test_a_checkpoint_taken_while_the_writers_commit_is_one_state_of_the_view(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path, partitions=PARTITIONS)
    rng = random.Random(8)
    taken = []
    with App(settings) as app:
        edge = Publisher(app.log, app.settings.topics)
        edge.publish(
            [e for n in range(8) for e in provider(f"n{n}", ts=NOW, VCPU=64, MEMORY_MB=8192)]
        )
        open_: list[str] = []
        edge.publish([e for k in range(1, 1500) for e in _churn(rng, k, open_)])
        writers = app.writers()
        for writer in writers:
            writer.batch_size = 7  # many small commits while the copies are taken
        done = threading.Event()

        def write() -> None:
            while step_all(writers):
                pass
            done.set()

        thread = threading.Thread(target=write)
        thread.start()
        checkpoints = Checkpoints(app.settings, keep=100)
        while not done.is_set():
            checkpoint = checkpoints.take()
            if checkpoint is not None:
                taken.append(checkpoint)
        thread.join()
    assert len(taken) >= 2
    for checkpoint in taken:
        # its states are those a replay up to its offsets leaves in the
        # view, and the snapshot made from them is that view's
        scratch = tmp_path / f"replayed-{checkpoint.records}"
        scratch.mkdir()
        target = Settings(data_dir=tmp_path, db_url=f"sqlite:///{scratch / 'view.db'}")
        with App(target) as app:
            target = app.settings
        replay_until(target, checkpoint.offsets)
        replayed = make_engine(target.view_url)
        try:
            restored = Checkpoints(settings).restore_states(checkpoint.offsets)
            assert restored is not None and restored[0] == checkpoint
            states = restored[1]
            _assert_same(snapshot_of(states), snapshot_from_view(replayed))
            with replayed.connect() as conn:
                for state in states:
                    loaded, offset = load_state(conn, state.partition, PARTITIONS)
                    assert offset == checkpoint.offsets[state.partition]
                    _assert_same_state(state, loaded)
        finally:
            replayed.dispose()


def test_a_damaged_or_missing_checkpoint_is_named_and_passed_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    placed = _log_with_checkpoints(tmp_path)
    settings = Settings(data_dir=tmp_path)
    late = placed[-1]
    with App(settings) as app:
        expected = explain_request(app, late)
    newest = expected["rebuilt_from"]["checkpoint"]
    assert newest is not None
    states = tmp_path / "checkpoints" / newest
    data = bytearray(states.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit's worth of damage
    states.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING)
    with App(settings) as app:
        story = explain_request(app, late)
    assert f"checkpoint {states} ignored" in caplog.text and "do not match" in caplog.text
    older = story.pop("rebuilt_from")
    assert older["checkpoint"] != newest
    assert older["replayed"] > expected.pop("rebuilt_from")["replayed"]
    assert story == expected

    # every checkpoint's states gone, one manifest garbled: from offset 0
    for states in (tmp_path / "checkpoints").glob("*.states"):
        states.unlink()
    next((tmp_path / "checkpoints").glob("*.json")).write_text("{not json")
    caplog.clear()
    with App(settings) as app:
        story = explain_request(app, late)
    assert "its writers' states are missing" in caplog.text
    assert "its manifest does not read" in caplog.text
    assert story.pop("rebuilt_from") == {
        "checkpoint": None,
        "replayed": sum(story["offsets"].values()),
    }
    assert story == expected


def _flip_record(path: Path, position: int) -> None:
    """Damage the record that starts at ``position``: one bit of its body."""
    data = bytearray(path.read_bytes())
    data[position + frames.header_size(frames.CURRENT_FORMAT)] ^= 0x01
    path.write_bytes(bytes(data))


def test_explain_checks_the_events_from_the_checkpoints_marks_on(tmp_path: Path) -> None:
    placed = _log_with_checkpoints(tmp_path)
    settings = Settings(data_dir=tmp_path)
    late = placed[-1]
    with App(settings) as app:
        expected = explain_request(app, late)
    newest = expected["rebuilt_from"]["checkpoint"]
    (checkpoint,) = [c for c in Checkpoints(settings).all() if c.path.name == newest]
    assert set(checkpoint.marks) == set(checkpoint.offsets)
    files = tmp_path / "log" / settings.topics.events

    # a record before the copy's offsets is the copy's: not read, so not checked
    intact = (files / "p0.log").read_bytes()
    _flip_record(files / "p0.log", 0)
    with App(settings) as app:
        assert explain_request(app, late) == expected
    with App(settings) as app, Checkpoints.ignored(), pytest.raises(ReplayStopped, match="p0"):
        explain_request(app, late)  # from offset 0, it is
    (files / "p0.log").write_bytes(intact)

    # one after them is checked against the chain from the mark
    offsets = {int(p): o for p, o in expected["offsets"].items()}
    p = next(p for p, at in checkpoint.offsets.items() if offsets[p] > at)
    _flip_record(files / f"p{p}.log", checkpoint.marks[p][0])
    damaged = rf"p{p}\.log: record {checkpoint.offsets[p]} "
    with App(settings) as app, pytest.raises(ReplayStopped, match=damaged):
        explain_request(app, late)


def test_checkpoints_are_pruned_to_an_even_spread_keeping_the_oldest_and_newest(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path, partitions=1)
    with App(settings) as app:
        edge = Publisher(app.log, app.settings.topics)
        writers = app.writers()
        checkpoints = Checkpoints(app.settings, keep=4)
        sizes = [1, 1, 1, 1, 10, 1, 1]  # events between checkpoints
        k = 0
        for size in sizes:
            edge.publish([claim(f"x{k + n}", "n", ts=NOW, VCPU=1) for n in range(size)])
            k += size
            catch_up_all(writers)
            assert checkpoints.take() is not None
        assert checkpoints.take() is None  # nothing new since the last one
    kept = [c.records for c in checkpoints.all()]
    assert kept == [1, 4, 14, 16]
    assert sorted(p.suffix for p in (tmp_path / "checkpoints").iterdir()) == [
        *[".json"] * 4,
        *[".states"] * 4,
    ]


def test_a_checkpointer_takes_one_once_the_view_has_moved_on(tmp_path: Path) -> None:
    from berth.checkpoints import Checkpointer
    from tests.polling import wait_for

    settings = Settings(data_dir=tmp_path, partitions=PARTITIONS)
    with App(settings) as app:
        edge = Publisher(app.log, app.settings.topics)
        writers = app.writers()
        edge.publish([e for n in range(8) for e in provider(f"n{n}", ts=NOW, VCPU=8)])
        catch_up_all(writers)  # 16 records: fewer than it waits for
        checkpointer = Checkpointer(app.settings, every=20, keep=5, poll_s=0.05).start()
        try:
            checkpoints = Checkpoints(app.settings)
            edge.publish([claim(f"c{k}", f"n{k % 8}", ts=NOW, VCPU=1) for k in range(30)])
            catch_up_all(writers)
            wait_for(lambda: len(checkpoints.all()) == 1, "a checkpoint", timeout_s=60)
        finally:
            checkpointer.stop()
    (taken,) = checkpoints.all()
    assert 20 <= taken.records <= 46  # once 20 more were in (the writers commit one by one)
