"""Database engines for the read model: SQLite by default, PostgreSQL for scale."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event


def sqlite_url(path: str) -> str:
    return f"sqlite:///{path}"


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL and ``synchronous=NORMAL``.

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

        return engine
    return create_engine(url, pool_pre_ping=True)
