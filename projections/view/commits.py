"""Waiting for the view to commit a partition's record, woken by the commit.

On PostgreSQL every view commit NOTIFYs :data:`CHANNEL` in its own
transaction (:func:`notify_commit`), so a waiter that LISTENs wakes when
the commit is visible. On SQLite, once a commit is visible, the writer
writes a byte to a file beside the database (:func:`ring_committed`), which
wakes a :class:`~ledger.doorbell.Doorbell` watching it, in this process or
another. (The database's own WAL will not do: its frames are written before
the commit is visible, which the shared-memory index says, and writes
through a mapping wake no inotify watch.) A waiter watches first, then
reads the committed offset, then waits: a commit after the read always
wakes it.

A writer publishes its outcomes just before its view commits them, so a
read made at once after an answer may find the view a step behind:
:func:`view_caught_up` waits for it to commit what the log held when asked
and :func:`read_settled` reads again once it has (``berth history``,
``berth group show`` and their API routes do).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Connection, Engine

from ledger.doorbell import Doorbell
from ledger.log import Log
from projections.view.engine import on_postgresql
from projections.view.loader import committed_offsets

CHANNEL = "berth_view_commits"
T = TypeVar("T")
VIEW_WAIT_S = 2.0
"""How long a read waits for the view to commit what an answer decided (an
outcome is published just before its view commit)."""

_COMMITTED = 'SELECT next_offset FROM partition_offsets WHERE "partition" = '


def notify_commit(conn: Connection, partition: int) -> None:
    """Tell PostgreSQL's waiters, once ``conn``'s transaction commits, that
    the view moved on in ``partition`` (a no-op elsewhere)."""
    on_postgresql(conn, f"NOTIFY {CHANNEL}, '{int(partition)}'")


def ring_committed(engine: Engine) -> None:
    """Wake SQLite's waiters after a view commit (a no-op elsewhere)."""
    bell = _bell_file(engine)
    if bell is None:
        return
    fd = os.open(bell, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.pwrite(fd, b"\n", 0)  # rings without growing the file
    finally:
        os.close(fd)


def _bell_file(engine: Engine) -> Path | None:
    """The file beside a SQLite view's database that its commits ring."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or database in (None, "", ":memory:"):
        return None
    return Path(f"{database}-commits")


def wait_committed(engine: Engine, partition: int, offset: int, timeout_s: float) -> bool:
    """Until the view has committed the record at ``offset`` of
    ``partition`` or ``timeout_s`` passes; whether it has."""
    deadline = time.monotonic() + timeout_s
    if engine.dialect.name == "postgresql":
        return _wait_notified(engine, partition, offset, deadline)
    bell = _bell_file(engine)
    if bell is not None:
        return _wait_rung(engine, bell, partition, offset, deadline)
    raise ValueError(f"no wake-up for a view on {engine.dialect.name}")


def view_caught_up(
    engine: Engine, log: Log, topic: str, partitions: int, timeout_s: float = VIEW_WAIT_S
) -> bool:
    """Whether the view was behind the records ``topic`` held when asked and
    has now committed them all (woken by its commits, ``timeout_s`` at most
    in all); False when it was not behind, so that reading again would tell
    nothing new, or is still behind."""
    deadline = time.monotonic() + timeout_s
    with engine.connect() as conn:
        committed = committed_offsets(conn)
    behind = False
    for partition in range(partitions):
        end = log.end_offset(topic, partition)
        if committed.get(partition, 0) >= end:
            continue
        behind = True
        left = deadline - time.monotonic()
        if left <= 0 or not wait_committed(engine, partition, end - 1, left):
            return False
    return behind


def read_settled(
    read: Callable[[], T],
    found: Callable[[T], bool],
    engine: Engine,
    log: Log,
    topic: str,
    partitions: int,
    timeout_s: float = VIEW_WAIT_S,
) -> T:
    """``read()``; when it finds nothing and the view is behind what
    ``topic`` held when asked, ``read()`` again once the view has committed
    that (:func:`view_caught_up`). What the view will never hold is
    answered at once when it is not behind."""
    value = read()
    if not found(value) and view_caught_up(engine, log, topic, partitions, timeout_s):
        value = read()
    return value


def _committed(cursor: object, partition: int, paramstyle: str) -> int:
    sql = _COMMITTED + ("?" if paramstyle == "qmark" else "%s")
    cursor.execute(sql, (partition,))  # type: ignore[attr-defined]
    row = cursor.fetchone()  # type: ignore[attr-defined]
    return -1 if row is None else int(row[0])


def _wait_notified(engine: Engine, partition: int, offset: int, deadline: float) -> bool:
    """LISTEN, read, and wait for notifications until past ``offset``."""
    raw = engine.raw_connection()
    driver = raw.driver_connection
    try:
        raw.rollback()
        driver.autocommit = True  # type: ignore[union-attr]
        driver.execute(f"LISTEN {CHANNEL}")  # type: ignore[union-attr]
        try:
            with driver.cursor() as cursor:  # type: ignore[union-attr]
                while _committed(cursor, partition, "format") <= offset:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    # any partition's commit wakes it: the read tells whose
                    for _ in driver.notifies(timeout=left, stop_after=1):  # type: ignore[union-attr]
                        pass
            return True
        finally:
            driver.execute(f"UNLISTEN {CHANNEL}")  # type: ignore[union-attr]
            # what came while listening would wake the connection's next user
            for _ in driver.notifies(timeout=0):  # type: ignore[union-attr]
                pass
            driver.autocommit = False  # type: ignore[union-attr]
    finally:
        raw.close()


def _wait_rung(
    engine: Engine, bell_file: Path, partition: int, offset: int, deadline: float
) -> bool:
    """Watch the file commits ring, read, and wait for a ring until past
    ``offset``."""
    os.close(os.open(bell_file, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    bell = Doorbell()
    try:
        bell.watch([bell_file])
        raw = engine.raw_connection()
        try:
            while True:
                cursor = raw.cursor()
                try:
                    committed = _committed(cursor, partition, "qmark")
                finally:
                    cursor.close()
                raw.rollback()  # the next read sees the next commit
                if committed > offset:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                bell.wait(left)
        finally:
            raw.close()
    finally:
        bell.close()
