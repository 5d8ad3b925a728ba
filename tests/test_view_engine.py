"""Taking a view's write lock without waiting for it (a rebuild's writers);
the page cache and WAL checkpoints of each kind of SQLite engine; reads of
one snapshot while another connection commits."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from projections.view.engine import begin_writing, make_engine, one_snapshot


def test_the_lock_is_taken_when_free_and_none_is_returned_at_once_when_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("projections.view.engine._REBUILD_BUSY_MS", 60_000)
    path = tmp_path / "view.db"
    engine = make_engine(f"sqlite:///{path}", writer=True, rebuild=True)
    with engine.begin() as setup:
        setup.exec_driver_sql("CREATE TABLE t (a INTEGER)")
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        conn = begin_writing(engine, wait=False)
        assert conn is not None and conn.in_transaction()
        with conn:
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")  # this connection holds the lock
            conn.commit()

        other.execute("BEGIN IMMEDIATE")
        asked = time.monotonic()
        assert begin_writing(engine, wait=False) is None
        assert time.monotonic() - asked < 30  # not after the minute it would wait
        other.execute("COMMIT")

        with engine.connect() as again:  # the pooled connection waits as before
            assert again.exec_driver_sql("PRAGMA busy_timeout").scalar_one() == 60_000
        second = begin_writing(engine, wait=False)
        assert second is not None
        with second:
            second.exec_driver_sql("INSERT INTO t VALUES (2)")
            second.commit()
        assert other.execute("SELECT a FROM t ORDER BY a").fetchall() == [(1,), (2,)]
    finally:
        other.close()
        engine.dispose()


def test_a_writer_keeps_a_larger_page_cache_and_checkpoints_less_often(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'view.db'}"
    engines = {
        "reader": make_engine(url),
        "writer": make_engine(url, writer=True),
        "rebuild": make_engine(url, writer=True, rebuild=True),
    }
    try:
        kib, pages = {}, {}
        for kind, engine in engines.items():
            with engine.connect() as conn:
                # negative: KiB; positive: pages
                kib[kind] = -conn.exec_driver_sql("PRAGMA cache_size").scalar_one()
                pages[kind] = conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one()
        assert kib == {"reader": 2_000, "writer": 64 << 10, "rebuild": 1 << 20}
        assert pages == {"reader": 1_000, "writer": 10_000, "rebuild": 1_000}
    finally:
        for engine in engines.values():
            engine.dispose()


def test_any_other_database_begins_as_usual(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    try:
        conn = begin_writing(engine, wait=False)
        assert conn is not None and conn.in_transaction()
        with conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
            conn.commit()
    finally:
        engine.dispose()


def test_a_read_of_one_snapshot_does_not_see_a_commit_made_during_it(view_url: str) -> None:
    engine = make_engine(view_url)
    other = make_engine(view_url)
    try:
        with other.begin() as setup:
            setup.exec_driver_sql("CREATE TABLE t (a INTEGER)")
            setup.exec_driver_sql("INSERT INTO t VALUES (1)")
        with one_snapshot(engine) as conn:
            first = conn.exec_driver_sql("SELECT count(*) FROM t").scalar_one()
            with other.begin() as meanwhile:
                meanwhile.exec_driver_sql("INSERT INTO t VALUES (2)")
            second = conn.exec_driver_sql("SELECT count(*) FROM t").scalar_one()
        with engine.connect() as after:
            third = after.exec_driver_sql("SELECT count(*) FROM t").scalar_one()
        assert (first, second, third) == (1, 1, 2)
    finally:
        engine.dispose()
        other.dispose()
