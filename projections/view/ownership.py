"""One process per partition, held where the view is.

The embedded log refuses a second owner of a partition by itself (file
locks). Kafka cannot tell without consumer groups, which Berth does not use;
but every process of a deployment shares its view. On PostgreSQL a session
advisory lock per topic and partition makes the claim on the view's server:
taken without waiting, held until the owner closes or dies (the server ends
its session), refused to every other process meanwhile. A SQLite view is
shared only by processes of one machine: a file lock per topic and
partition beside the database file does the same there.

The lock guards against a misconfigured deployment (two processes given
the same ``--owned``), up front and with a clear error. Should the owner's
session end while it runs (a server restart, a terminated backend), its
locks are gone: :meth:`ViewOwnership.confirm`, which the long-running
commands call every few seconds, then raises :class:`OwnershipLost` and the
process stops, to be restarted and own its partitions again, or be refused.
Until it notices, the view's committed offsets still keep a second writer
from applying any record twice.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ledger.log import OwnedElsewhere
from ledger.owner_lock import lock_owner
from projections.view.engine import driver_message

_TRY_LOCK = text("SELECT pg_try_advisory_lock(:topic, :partition)")
_UNLOCK_ALL = text("SELECT pg_advisory_unlock_all()")
# the session holds no advisory lock but this process's partitions
_HELD = text(
    "SELECT count(*) FROM pg_locks "
    "WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()"
)


class OwnershipLost(RuntimeError):
    """The session that held this process's partitions is gone, and with it
    the guarantee that no other process acts on them."""


def _topic_key(topic: str) -> int:
    """The topic as the lock's first key, a signed 32-bit integer; prefixed
    so that other users of the server's advisory locks are unlikely to meet it."""
    crc = zlib.crc32(f"berth:{topic}".encode())
    return crc - (1 << 32) if crc >= 1 << 31 else crc


def _lock_directory(engine: Engine) -> Path | None:
    """Where a SQLite view's owners lock their partitions: beside its file
    (None for a database in memory, which no other process can open)."""
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(f"{database}.owners")


class ViewOwnership:
    """The partitions this process owns, as locks on the view's server
    (PostgreSQL) or beside its file (SQLite)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session: Connection | None = None
        # each owned (topic, partition): the open lock file on SQLite, None
        # on PostgreSQL (the session holds the lock)
        self._owned: dict[tuple[str, int], int | None] = {}

    def own(self, topic: str, partitions: Sequence[int]) -> None:
        """Lock each partition, or :class:`OwnedElsewhere` at the first that
        another process holds (those locked before it stay owned)."""
        lock = self._locker()
        if lock is None:
            return
        for partition in partitions:
            if (topic, partition) not in self._owned:
                self._owned[(topic, partition)] = lock(topic, partition)

    def _locker(self) -> Callable[[str, int], int | None] | None:
        """How this view's partitions are locked; None where nothing else
        can open the view."""
        dialect = self.engine.dialect.name
        if dialect == "postgresql":
            return self._lock_on_server
        directory = _lock_directory(self.engine) if dialect == "sqlite" else None
        if directory is None:
            return None
        directory.mkdir(exist_ok=True)
        return lambda topic, partition: lock_owner(
            directory / f"{topic}.p{partition}", topic, partition
        )

    def _lock_on_server(self, topic: str, partition: int) -> None:
        session = self._session
        if session is None:
            # outside any transaction: a session lock outlives transactions,
            # and an open one would hold back the server's vacuum
            session = self._session = self.engine.connect().execution_options(
                isolation_level="AUTOCOMMIT"
            )
        params = {"topic": _topic_key(topic), "partition": partition}
        if not session.execute(_TRY_LOCK, params).scalar():
            raise OwnedElsewhere(topic, partition)

    def confirm(self) -> None:
        """:class:`OwnershipLost` unless the session still holds every
        partition owned (one round trip to the server); the partitions are
        then given up. A session lives as long as its connection, unless a
        pooler in transaction mode stands between: each statement may then
        run in another session, and the locks are found missing."""
        session = self._session
        if session is None or not self._owned:
            return
        owned = len(self._owned)
        try:
            held = session.execute(_HELD).scalar_one()
            why = None if held >= owned else f"it holds {held} of the {owned} locks taken"
        except DBAPIError as error:
            why = f"{type(error.orig or error).__name__}: {driver_message(error)}"
        if why is not None:
            self.close()
            raise OwnershipLost(
                "lost the PostgreSQL session that locks this process's partitions "
                f"({why}); stopping, so that no other process acts on them beside this one"
            )

    def close(self) -> None:
        """Give up every partition: the session's locks are released, and
        the session ends rather than going back to the pool, where any lock
        left would stay held."""
        for fd in self._owned.values():
            if fd is not None:
                os.close(fd)  # closing releases the flock
        self._owned.clear()
        session, self._session = self._session, None
        if session is not None:
            # released now: the server frees a closed session's locks only
            # once its backend has exited, a moment after the socket closes
            with contextlib.suppress(SQLAlchemyError):  # a lost session holds none
                session.execute(_UNLOCK_ALL)
            session.invalidate()
            session.close()
