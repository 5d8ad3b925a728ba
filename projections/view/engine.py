"""Database engines for the read model: SQLite by default, PostgreSQL for scale."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event


def sqlite_url(path: str) -> str:
    return f"sqlite:///{path}"


def make_engine(url: str, writer: bool = False) -> Engine:
    """An engine for ``url``; SQLite gets WAL and ``synchronous=NORMAL``.

    A ``writer`` engine on SQLite begins every transaction IMMEDIATE: writers
    in several processes then queue on the write lock (busy_timeout) instead
    of failing when another commits between their first read and first write.

    NORMAL may lose the last view commit on power loss, never corrupt it; the
    log is the source of truth and the view re-applies from its own committed
    offset, so a lost commit is simply redone.
    """
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()
            if writer:
                dbapi_connection.isolation_level = None  # we issue BEGIN ourselves

        if writer:

            @event.listens_for(engine, "begin")
            def _begin_immediate(conn: Any) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_pre_ping=True)
