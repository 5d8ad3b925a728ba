"""Fencing: who owns a partition now, as a generation number in the view.

Kafka's consumer group hands a partition from one worker to another when
the first stops heartbeating, but a worker that was only paused (SIGSTOP,
a long GC pause, a network partition) does not know it lost it and may
still commit. Each taking over raises the partition's generation in the
view; the writer commits with the generation it took, and the view refuses
a commit from an older one in the commit's own transaction
(:class:`projections.view.writer.Fenced`). The takeover's row lock orders
it against a commit in flight: a commit that got in first is in the state
the new owner loads, one that comes later is refused. A commit whose
process stops mid-transaction would hold that lock, and the takeover, for
as long as it stays stopped: on PostgreSQL the server ends such a
transaction once it has sat idle for the writer's stall bound
(:attr:`projections.view.writer.ViewWriter.stall_ms`, a worker's session
timeout), and the writer, resumed, is told it stalled
(:class:`projections.view.writer.Stalled`). A commit stopped in the
middle of a pipeline of statements is not idle but active, and is ended by
the takeover itself once it has waited the stall bound
(:func:`take_partition`); the writer, resumed, finds its connection gone
and its partition taken (:class:`projections.view.writer.Fenced`).
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from sqlalchemy import Connection, Engine, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError

from projections.view.engine import on_postgresql
from projections.view.tables import partition_owners

log = logging.getLogger(__name__)


class Owner(NamedTuple):
    generation: int
    owner: str


def take_partition(engine: Engine, partition: int, owner: str, stall_ms: int | None = None) -> int:
    """Make ``owner`` the partition's writer: its generation, one above any
    before. Load the partition's state only after this returns. With
    ``stall_ms``, on PostgreSQL, a transaction that has held the owner row
    that long without a statement ending (see :func:`_end_stalled_holder`)
    is ended, and the takeover goes on."""
    insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    statement = (
        insert(partition_owners)
        .values(partition=partition, generation=1, owner=owner)
        .on_conflict_do_update(
            index_elements=[partition_owners.c.partition],
            set_={"generation": partition_owners.c.generation + 1, "owner": owner},
        )
        .returning(partition_owners.c.generation)
    )
    if stall_ms is None or engine.dialect.name != "postgresql":
        with engine.begin() as conn:
            return int(conn.execute(statement).scalar_one())
    while True:
        try:
            with engine.begin() as conn:
                on_postgresql(conn, f"SET LOCAL lock_timeout = {int(stall_ms)}")
                return int(conn.execute(statement).scalar_one())
        except OperationalError as error:
            if getattr(error.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
        _end_stalled_holder(engine, partition, stall_ms)


LOCK_NOT_AVAILABLE = "55P03"
"""PostgreSQL's SQLSTATE for a statement that waited past its ``lock_timeout``."""

_STALLED_HOLDER = text(
    """
    SELECT pg_terminate_backend(activity.pid)
    FROM partition_owners AS owners
    JOIN pg_locks AS held
      ON held.locktype = 'transactionid' AND held.transactionid = owners.xmax
         AND held.mode = 'ExclusiveLock' AND held.granted
    JOIN pg_stat_activity AS activity ON activity.pid = held.pid
    WHERE owners."partition" = :partition AND activity.pid <> pg_backend_pid()
      AND activity.state IN ('active', 'idle in transaction')
      AND activity.state_change < now() - make_interval(secs => :stall_s)
    """
)


def _end_stalled_holder(engine: Engine, partition: int, stall_ms: int) -> None:
    """End the session whose transaction holds the partition's owner row
    and has been in the same state (a statement running, or idle between
    two) for more than ``stall_ms``: above all a writer stopped in the
    middle of a pipeline of statements (psycopg sends a commit's rows that
    way), which PostgreSQL counts as active, not idle, so that
    :func:`~projections.view.engine.bound_idle`'s bound never ends it. A
    writer's statements take milliseconds; one stuck past its stall bound
    is its process stopped (SIGSTOP, a stalled machine), and this takeover
    fences it anyway: its commit is lost either way."""
    with engine.begin() as conn:
        ended = conn.execute(_STALLED_HOLDER, {"partition": partition, "stall_s": stall_ms / 1000})
        for (done,) in ended:
            if done:
                log.warning(
                    "partition %d: ended a session that held its owner row past %d ms",
                    partition,
                    stall_ms,
                )


def owners(conn: Connection) -> dict[int, Owner]:
    """Partition -> its generation and owner, for the partitions ever taken."""
    table = partition_owners.c
    rows = conn.execute(select(table.partition, table.generation, table.owner))
    return {int(p): Owner(int(g), str(o)) for p, g, o in rows}
