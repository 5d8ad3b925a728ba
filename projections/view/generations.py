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
(:class:`projections.view.writer.Stalled`).
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Connection, Engine, select
from sqlalchemy.dialects import postgresql, sqlite

from projections.view.tables import partition_owners


class Owner(NamedTuple):
    generation: int
    owner: str


def take_partition(engine: Engine, partition: int, owner: str) -> int:
    """Make ``owner`` the partition's writer: its generation, one above any
    before. Load the partition's state only after this returns."""
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
    with engine.begin() as conn:
        return int(conn.execute(statement).scalar_one())


def owners(conn: Connection) -> dict[int, Owner]:
    """Partition -> its generation and owner, for the partitions ever taken."""
    table = partition_owners.c
    rows = conn.execute(select(table.partition, table.generation, table.owner))
    return {int(p): Owner(int(g), str(o)) for p, g, o in rows}
