"""Database engines for the read model: SQLite by default, PostgreSQL for scale."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, OperationalError

_REBUILD_CACHE_KIB = 1 << 20
"""A rebuild's page cache: 1 GiB at most, holding a view of a few million
records, so that index inserts at random keys do not go to the disk."""

_WRITER_CACHE_KIB = 64 << 10
"""A writer's page cache: 64 MiB at most (SQLite's default is 2 MiB). A
busy batch rewrites the rows of most of its partition's providers (their
usage), and described providers (zone, address, hypervisor facts, metrics)
have rows four times longer: with the default cache each commit read back
from the file the pages the one before it had written."""

_WRITER_CHECKPOINT_PAGES = 10_000
"""Pages a writer lets the WAL grow to before it checkpoints them into the
file (SQLite's default is 1,000, about 4 MB): the pages a commit rewrites
are mostly the ones the commits before it did (providers' usage), so a
checkpoint every 40 MB copies each of them once rather than ten times, and
syncs the file a fifth as often. The WAL file keeps that size on disk."""

_BUSY_MS = 30_000
_REBUILD_BUSY_MS = 3_600_000
"""How long a rebuild's connection waits for the write lock, when it waits:
its replay processes decide on while the lock is taken (see
:func:`begin_writing`), but wait once enough of their batches do, and for
their last ones. The lock is taken in turn by the other processes and by
an index build, which takes longer the longer the log (about 1.4 s for a
million records). Only the replay itself writes a rebuild's file."""


def driver_message(error: DBAPIError) -> str:
    """The first line of what the database driver said (PostgreSQL's messages
    go on with the statement's text and a caret under the culprit), or the
    name of its error when it said nothing."""
    cause = error.orig if error.orig is not None else error
    lines = str(cause).strip().splitlines()
    return lines[0] if lines else type(cause).__name__


def sqlite_url(path: str) -> str:
    return f"sqlite:///{path}"


def make_engine(
    url: str, writer: bool = False, rebuild: bool = False, journal: bool = True
) -> Engine:
    """An engine for ``url``; SQLite gets WAL and ``synchronous=NORMAL``.

    A ``writer`` engine on SQLite begins every transaction IMMEDIATE: writers
    in several processes then queue on the write lock (busy_timeout) instead
    of failing when another commits between their first read and first write.

    NORMAL may lose the last view commit on power loss, never corrupt it; the
    log is the source of truth and the view re-applies from its own committed
    offset, so a lost commit is simply redone.

    A ``writer`` engine keeps a larger page cache (``_WRITER_CACHE_KIB``)
    and checkpoints the WAL less often (``_WRITER_CHECKPOINT_PAGES``).

    A ``rebuild`` engine (SQLite) is for a replay into a fresh file that is put
    in place only once complete: nothing of it needs to survive a crash, so it
    skips syncing, and it gets a page cache that holds the whole view.
    Without ``journal`` (a scratch file one connection of one process
    writes: ``berth explain``'s), not even a journal: its commits go into
    the file once, not first into a WAL. An engine that opens the file
    afterwards turns WAL on again.
    """
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA journal_mode={'WAL' if journal else 'OFF'}")
            cursor.execute(f"PRAGMA synchronous={'OFF' if rebuild else 'NORMAL'}")
            if rebuild:
                cursor.execute(f"PRAGMA cache_size=-{_REBUILD_CACHE_KIB}")
            elif writer:
                cursor.execute(f"PRAGMA cache_size=-{_WRITER_CACHE_KIB}")
                cursor.execute(f"PRAGMA wal_autocheckpoint={_WRITER_CHECKPOINT_PAGES}")
            cursor.execute(f"PRAGMA busy_timeout={_REBUILD_BUSY_MS if rebuild else _BUSY_MS}")
            cursor.close()
            if writer:
                dbapi_connection.isolation_level = None  # we issue BEGIN ourselves

        if writer:

            @event.listens_for(engine, "begin")
            def _begin_immediate(conn: Any) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_pre_ping=True)


def begin_writing(engine: Engine, wait: bool = True) -> Connection | None:
    """A connection in a transaction that holds the view's write lock. With
    ``wait`` false, on SQLite, None at once if another connection holds it
    (where a ``writer`` engine's BEGIN waits for it); any other database
    begins as it would anyway."""
    conn = engine.connect()
    try:
        if wait or engine.dialect.name != "sqlite":
            conn.begin()
            return conn
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        waits = int(driver.execute("PRAGMA busy_timeout").fetchone()[0])
        driver.execute("PRAGMA busy_timeout=0")
        try:
            conn.begin()
        finally:
            driver.execute(f"PRAGMA busy_timeout={waits}")
        return conn
    except BaseException as error:
        conn.close()
        busy = isinstance(error, OperationalError) and (
            getattr(error.orig, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY
        )
        if busy and not wait:
            return None
        raise


def read_one_snapshot(conn: Connection) -> None:
    """Make ``conn``'s next statements, up to its transaction's end, read the
    view as one commit left it. Without it each statement sees the latest
    commit (SQLite's driver reads outside a transaction, PostgreSQL's read
    committed takes a snapshot per statement), so a read of several tables
    can meet a batch's commit halfway: a claim's outcome read after the
    commit, its reservation before it. Call it before the first statement."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        return
    driver = conn.connection.driver_connection
    # a writer engine's transaction (isolation_level None: it begins
    # IMMEDIATE on its own) holds the write lock, which is one snapshot
    # already: reads that need not stop the writers use a reader engine
    if isinstance(driver, sqlite3.Connection) and driver.isolation_level is not None:
        conn.exec_driver_sql("BEGIN")


@contextmanager
def one_snapshot(engine: Engine) -> Iterator[Connection]:
    """A connection that reads one snapshot of the view
    (:func:`read_one_snapshot`) for the block. Nothing is written: the
    transaction is rolled back."""
    with engine.connect() as conn:
        read_one_snapshot(conn)
        try:
            yield conn
        finally:
            conn.rollback()


IDLE_IN_TRANSACTION_ENDED = "25P03"
"""PostgreSQL's SQLSTATE for a session ended by its
``idle_in_transaction_session_timeout``."""


def bound_idle(conn: Connection, stall_ms: int) -> None:
    """On PostgreSQL, end ``conn``'s transaction server side once it has sat
    idle ``stall_ms``, so that a process stopped in the middle of it (SIGSTOP,
    a stalled machine) holds its row locks no longer than that. SET LOCAL
    lasts until the transaction ends."""
    on_postgresql(conn, f"SET LOCAL idle_in_transaction_session_timeout = {int(stall_ms)}")


def on_postgresql(conn: Connection, sql: str) -> None:
    """Run ``sql`` in ``conn``'s transaction on PostgreSQL (a no-op
    elsewhere), straight on the driver's cursor: a statement of every
    commit, kept out of SQLAlchemy's compilation."""
    if conn.dialect.name != "postgresql":
        return
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql)
    finally:
        cursor.close()


def ended_idle(error: DBAPIError) -> bool:
    """Whether ``error`` is PostgreSQL ending a transaction that sat idle
    past its bound (:func:`bound_idle`)."""
    return getattr(error.orig, "sqlstate", None) == IDLE_IN_TRANSACTION_ENDED
