"""``berth replay`` into the data directory's own view: a rebuild of a fresh
SQLite file (big batches, no syncing, secondary indexes built at the end) that
must come out identical to the view the live writers keep, and that replaces
it only once complete."""

from __future__ import annotations

import multiprocessing
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

import berth.replay
from bench.common import claim, dumps
from bench.projector import _cluster, _populate, _write_log
from berth.app import App, Settings
from berth.replay import replay
from consumers.partition_writer import catch_up_all
from ledger.log import Append, LogError
from ledger.partitioner import partition_for
from projections.view.engine import make_engine
from projections.view.writer import _MOST_WAITING, ViewWriter
from schemas.codec import encode_event
from tests.contracts.view_contract import BATCH_DEPENDENT, _dump, pool_scenario


def _schema(engine: Engine) -> list[tuple[Any, ...]]:
    """Every table, index and trigger as SQLite stores its definition."""
    with engine.connect() as conn:
        return sorted(
            tuple(row)
            for row in conn.exec_driver_sql(
                "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
            )
        )


def _snapshot(
    engine: Engine, leave_out: dict[str, set[str]] | None = BATCH_DEPENDENT
) -> tuple[list[tuple[Any, ...]], dict[str, list[tuple[Any, ...]]]]:
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar_one() == "ok"
        return _schema(engine), _dump(engine, leave_out)
    finally:
        engine.dispose()


def _live(
    data: Path, batch_size: int, leave_out: dict[str, set[str]] | None = BATCH_DEPENDENT
) -> Any:
    """Decide the whole log with the live writers, in small batches, publishing
    outcomes; the view they leave behind."""
    with App(Settings(data_dir=data, batch_size=batch_size)) as app:
        catch_up_all(app.writers())
    return _snapshot(make_engine(f"sqlite:///{data / 'view.db'}"), leave_out)


@pytest.mark.parametrize(("jobs", "start_method"), [(1, None), (2, "fork"), (2, "spawn")])
def test_a_rebuild_is_identical_to_the_live_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int, start_method: str | None
) -> None:
    if start_method is not None:
        context = multiprocessing.get_context(start_method)
        monkeypatch.setattr(berth.replay, "_context", lambda: context)
    data = tmp_path / "data"
    # claims, consumes and releases on 40 providers in 4 partitions; short
    # leases expire, some claims do not fit
    _write_log(data, 6_000, 40, 4)
    live = _live(data, batch_size=37)
    assert len(live[1]["outcomes"]) > 6_000
    result = replay(Settings(data_dir=data), verify=True, jobs=jobs)
    assert result.divergence is None
    assert result.verified == result.outcomes == len(live[1]["outcomes"])
    assert result.view_url == f"sqlite:///{data / 'view.db'}"
    assert not (data / "view.replay.db").exists()
    rebuilt = _snapshot(make_engine(result.view_url))
    assert rebuilt[0] == live[0]  # same tables and indexes, as the migrations made them
    assert rebuilt[1] == live[1]


def _traits_set(pid: str) -> Append:
    event = {
        "type": "traits_set",
        "event_id": f"traits-{pid}",
        "ts_ms": 1,  # leaves the partition clock, and the holds, alone
        "partition_key": pid,
        "provider_id": pid,
        "traits": ["CUSTOM_REBUILT"],
    }
    return Append(partition_for(pid.encode(), 4), pid.encode(), dumps(event))


@pytest.mark.parametrize(("jobs", "held_rows"), [(1, 500_000), (2, 500_000), (1, 7)])
def test_a_rebuild_in_many_batches_is_identical_to_the_live_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int, held_rows: int
) -> None:
    """Rows a rebuild holds back across batches (reservations still active,
    providers' usage) come out as the live writers left them: in batches of
    the same size, to the offset of the batch that last changed them; also
    when too many are held and they are written, then updated."""
    monkeypatch.setattr(berth.replay, "REBUILD_BATCH_SIZE", 1)
    monkeypatch.setattr(berth.replay, "REBUILD_HELD_ROWS", held_rows)
    context = multiprocessing.get_context("fork")  # the workers see the patch
    monkeypatch.setattr(berth.replay, "_context", lambda: context)
    data = tmp_path / "data"
    _write_log(data, 6_000, 40, 4)
    with App(Settings(data_dir=data)) as app:
        # every provider reshaped after its last claim: its row is rewritten,
        # and the usage held back from earlier batches must not overwrite it
        pids = [pid for pids in _cluster(40, 4).values() for pid in pids]
        app.log.append(app.settings.topics.events, [_traits_set(pid) for pid in pids])
    live = _live(data, batch_size=37, leave_out=None)
    views: list[ViewWriter] = []

    def view_writer(*args: Any, **kwargs: Any) -> ViewWriter:
        views.append(ViewWriter(*args, **kwargs))
        return views[-1]

    held: list[int] = []  # after each batch, in this process (jobs=1)

    def progress(_: int) -> None:
        if views and views[-1].held_back is not None:
            held.append(len(views[-1].held_back.reservations))

    monkeypatch.setattr(berth.replay, "ViewWriter", view_writer)
    result = replay(
        Settings(data_dir=data, batch_size=37), verify=True, progress=progress, jobs=jobs
    )
    if jobs == 1:
        assert 0 < max(held) <= held_rows
    assert result.divergence is None
    assert result.verified == result.outcomes == len(live[1]["outcomes"])
    statuses = {row[2] for row in live[1]["reservations"]}
    assert {"'held'", "'consumed'", "'released'", "'expired'"} <= statuses
    assert _snapshot(make_engine(result.view_url), leave_out=None) == live


def test_a_rebuild_of_pools_and_transactions_is_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    events, more = pool_scenario()
    with App(Settings(data_dir=data, partitions=1)) as app:
        topic = app.settings.topics.events
        app.log.append(topic, [Append(0, b"k", encode_event(e)) for e in events + more])
    live = _live(data, batch_size=4)
    monkeypatch.setattr(berth.replay, "REBUILD_BATCH_SIZE", 1)
    result = replay(Settings(data_dir=data, batch_size=3), verify=True)
    assert result.divergence is None
    assert result.verified == result.outcomes > 0
    assert _snapshot(make_engine(result.view_url)) == live


def test_a_rebuild_decides_on_while_another_connection_holds_the_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other replay processes and the index build take the write lock in
    turn: a rebuild's writer that finds it taken keeps deciding, its batches
    waiting in memory, and writes them, in order, once it gets the lock."""
    monkeypatch.setattr(berth.replay, "REBUILD_BATCH_SIZE", 1)
    # were the writer to wait for the lock, it would fail after a second
    monkeypatch.setattr("projections.view.engine._REBUILD_BUSY_MS", 1_000)
    data = tmp_path / "data"
    _write_log(data, 3_000, 20, 2)
    live = _live(data, batch_size=37)
    views: list[ViewWriter] = []

    def view_writer(*args: Any, **kwargs: Any) -> ViewWriter:
        views.append(ViewWriter(*args, **kwargs))
        return views[-1]

    monkeypatch.setattr(berth.replay, "ViewWriter", view_writer)
    holders: list[sqlite3.Connection] = []
    seen: list[tuple[int, int]] = []  # batches waiting, the view's offset

    def progress(_records: int) -> None:
        if not holders:  # the first batch is in: the next find the lock taken
            holders.append(sqlite3.connect(data / "view.replay.db", isolation_level=None))
            holders[0].execute("BEGIN IMMEDIATE")
        elif len(seen) == _MOST_WAITING:
            return
        (offset,) = holders[0].execute("SELECT next_offset FROM partition_offsets").fetchone()
        seen.append((len(views[-1].waiting), offset))
        if len(seen) == _MOST_WAITING:
            holders[0].execute("COMMIT")

    try:
        result = replay(
            Settings(data_dir=data, batch_size=37), verify=True, progress=progress, jobs=1
        )
    finally:
        for holder in holders:
            holder.close()
    assert seen == [(n, 37) for n in range(_MOST_WAITING)]
    assert not views[-1].waiting
    assert result.divergence is None
    assert result.verified == result.outcomes == len(live[1]["outcomes"])
    assert _snapshot(make_engine(result.view_url)) == live


class _Crash(Exception):
    pass


def test_the_indexes_are_built_on_the_core_a_finished_process_leaves_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One partition of a few records and one of thousands, two processes:
    the secondary indexes are built while the second still replays, and the
    rows it writes after them keep them whole."""
    data = tmp_path / "data"
    with App(Settings(data_dir=data, partitions=2)) as app:
        _populate(app, 20)
        busy = _cluster(20, 2)[0]
        claims = [
            Append(0, pid.encode(), claim(f"r{k}", pid, 5_000 + k, lease_ms=1_000))
            for k in range(20_000)
            for pid in [busy[k % len(busy)]]
        ]
        assert all(partition_for(a.key, 2) == 0 for a in claims)
        app.log.append(app.settings.topics.events, claims)
    live = _live(data, batch_size=500)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    still_replaying: list[bool] = []
    build = berth.replay._Indexes.build

    def watched(indexes: berth.replay._Indexes) -> None:
        if indexes.statements:
            still_replaying.append(any(p.is_alive() for p in multiprocessing.active_children()))
        build(indexes)

    monkeypatch.setattr(berth.replay._Indexes, "build", watched)
    result = replay(Settings(data_dir=data), verify=True, jobs=2)
    assert still_replaying == [True]
    assert result.divergence is None
    assert _snapshot(make_engine(result.view_url)) == live


def test_a_crashed_rebuild_leaves_the_view_alone_and_a_rerun_recovers(tmp_path: Path) -> None:
    """A rebuild killed half way leaves only ``view.replay.db``, a partial file
    without its secondary indexes that nothing reads; the view in place is
    untouched, and the next replay starts that file again from scratch."""
    data = tmp_path / "data"
    _write_log(data, 3_000, 20, 2)
    live = _live(data, batch_size=50)

    def crash(_records: int) -> None:
        raise _Crash  # after the first partition's batch is committed

    with pytest.raises(_Crash):
        replay(Settings(data_dir=data), verify=False, progress=crash)
    partial = data / "view.replay.db"
    assert partial.exists()
    assert _snapshot(make_engine(f"sqlite:///{data / 'view.db'}")) == live
    left = _snapshot(make_engine(f"sqlite:///{partial}"))
    assert left[0] != live[0]  # its secondary indexes are not built yet
    assert 0 < len(left[1]["outcomes"]) < len(live[1]["outcomes"])

    result = replay(Settings(data_dir=data), verify=True)
    assert result.divergence is None
    assert not partial.exists()
    assert _snapshot(make_engine(result.view_url)) == live


def test_a_rebuild_waits_for_no_writer_and_keeps_writers_out(tmp_path: Path) -> None:
    """Replacing view.db under a running writer would drop its commits: a
    rebuild refuses while another process has the log open for writing, and
    a writer cannot open it while a rebuild runs."""
    data = tmp_path / "data"
    _write_log(data, 500, 10, 2)
    settings = Settings(data_dir=data)
    with App(settings), pytest.raises(LogError, match="open in another log"):
        replay(settings, verify=False)
    assert not (data / "view.replay.db").exists()
    opened: list[str] = []

    def progress(_: int) -> None:
        with pytest.raises(LogError, match="held exclusively"):
            App(settings)
        opened.append("refused")

    result = replay(settings, verify=True, progress=progress)
    assert opened and result.divergence is None
    App(settings).close()  # the rebuild is done: writers may come back


@pytest.mark.parametrize("jobs", [1, 3])
def test_each_process_sizes_its_partitions_before_it_replays_them(
    tmp_path: Path, jobs: int
) -> None:
    """What sizes ``berth replay``'s progress bar: the records of each group
    of partitions, from the process that indexes them, before any progress."""
    data = tmp_path / "data"
    written = _write_log(data, 3_000, 30, 4)
    told: list[tuple[str, int]] = []
    result = replay(
        Settings(data_dir=data),
        verify=False,
        progress=lambda n: told.append(("progress", n)),
        sized=lambda n: told.append(("sized", n)),
        jobs=jobs,
    )
    sizes = [n for kind, n in told if kind == "sized"]
    assert told[0][0] == "sized"
    assert len(sizes) == jobs
    assert sum(sizes) == written == result.records
    assert sum(n for kind, n in told if kind == "progress") == written


def test_workers_are_forked_only_from_a_process_with_one_thread() -> None:
    alone = subprocess.run(
        [
            sys.executable,
            "-c",
            "from berth.replay import _context; print(_context().get_start_method())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert alone.stdout.strip() == ("fork" if sys.platform == "linux" else "spawn")
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert berth.replay._context().get_start_method() == "spawn"
    finally:
        release.set()
        other.join()
