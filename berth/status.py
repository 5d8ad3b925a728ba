"""What an operator asks first: is every partition's writer keeping up, what
is held, what went to the dead letters. Read from the log's end offsets and
the view; nothing here writes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, select

from ledger.log import Log, UnknownTopic
from ledger.topics import Topics
from projections.view.engine import one_snapshot
from projections.view.loader import committed_offsets
from projections.view.tables import (
    dead_letters,
    inventories,
    partition_offsets,
    providers,
    reservations,
)


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    partition: int
    log_end: int
    """Records in the log's partition."""
    applied: int
    """Records the view reflects (its writer's next offset)."""
    clock_ms: int | None
    """The partition's clock as of the view (None before its first record)."""
    dead_letters: int

    @property
    def behind(self) -> int:
        return self.log_end - self.applied


@dataclass(frozen=True, slots=True, order=True)
class ResourceTotals:
    resource_class: str
    capacity: int
    held: int
    consumed: int
    free: int

    @property
    def used(self) -> float:
        """The share of capacity held or consumed."""
        return (self.held + self.consumed) / self.capacity if self.capacity else 0.0


@dataclass(frozen=True, slots=True)
class Totals:
    """The view's contents summed up: each count scans a table, which a
    frequent health check has no use for."""

    resources: list[ResourceTotals]
    providers: dict[str, int]
    """Providers by state."""
    reservations: dict[str, int]
    """Reservations by status."""
    overcommitted_providers: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "resources": {
                r.resource_class: {**asdict(r), "used": round(r.used, 4)} for r in self.resources
            },
            "providers": self.providers,
            "reservations": self.reservations,
            "overcommitted_providers": self.overcommitted_providers,
        }


@dataclass(frozen=True, slots=True)
class DamagedPartition:
    """A partition of a topic that refuses appends and reads past a damaged
    record (see ``berth log verify``)."""

    topic: str
    partition: int
    damage: str


@dataclass(frozen=True, slots=True)
class Status:
    partitions: list[PartitionStatus]
    totals: Totals | None
    damaged: list[DamagedPartition] = field(default_factory=list)
    """Every partition, of every topic, the log knows to be damaged."""

    @property
    def behind(self) -> int:
        """The most records any partition's view is behind its log."""
        return max((p.behind for p in self.partitions), default=0)

    @property
    def ahead(self) -> list[int]:
        """Partitions whose view has applied more records than their log
        holds: the log lost records, or the view is another log's. Their
        writers will not start."""
        return [p.partition for p in self.partitions if p.behind < 0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "partitions": [{**asdict(p), "behind": p.behind} for p in self.partitions],
            "behind": self.behind,
            "view_ahead_of_log": self.ahead,
            "damaged": [asdict(d) for d in self.damaged],
            **(self.totals.to_dict() if self.totals is not None else {}),
        }


def resource_totals(conn: Connection) -> list[ResourceTotals]:
    """Capacity, held, consumed and free summed per resource class."""
    c = inventories.c
    query = select(
        c.resource_class,
        func.sum(c.capacity),
        func.sum(c.held),
        func.sum(c.consumed),
        func.sum(c.free),
    ).group_by(c.resource_class)
    # sorted here: the databases' collations order names differently
    return sorted(
        ResourceTotals(rc, int(capacity), int(held), int(consumed), int(free))
        for rc, capacity, held, consumed, free in conn.execute(query)
    )


def overcommitted_providers(conn: Connection) -> int:
    """Providers holding or consuming more of a resource class than it has:
    none, ever, is the ledger's promise."""
    c = inventories.c
    query = select(func.count(func.distinct(c.provider_id))).where(c.held + c.consumed > c.capacity)
    return int(conn.execute(query).scalar_one())


def read_status(
    log: Log, engine: Engine, topics: Topics, partitions: int, totals: bool = True
) -> Status:
    """Each partition's progress, and with ``totals`` the view summed up."""
    with one_snapshot(engine) as conn:  # offsets and totals of one commit
        applied = committed_offsets(conn)
        pc = partition_offsets.c
        clocks = {int(p): int(ms) for p, ms in conn.execute(select(pc.partition, pc.clock_ms))}
        dead = _counts(conn, dead_letters.c.partition)
        summed = (
            Totals(
                resources=resource_totals(conn),
                providers=_counts(conn, providers.c.state),
                reservations=_counts(conn, reservations.c.status),
                overcommitted_providers=overcommitted_providers(conn),
            )
            if totals
            else None
        )
    # the log's ends read after the view's offsets: a record applied since is
    # counted in both, so no partition is ever behind by less than nothing
    progress = [
        PartitionStatus(
            partition=p,
            log_end=log.end_offset(topics.events, p),
            applied=applied.get(p, 0),
            clock_ms=clocks.get(p),
            dead_letters=dead.get(p, 0),
        )
        for p in range(partitions)
    ]
    return Status(progress, summed, damaged_partitions(log, topics))


def damaged_partitions(log: Log, topics: Topics) -> list[DamagedPartition]:
    """What the log knows to be damaged, topic by topic."""
    found = []
    for topic in (getattr(topics, name) for name in topics.__slots__):
        try:
            count = log.partition_count(topic)
        except UnknownTopic:
            continue
        for partition in range(count):
            damage = log.damage(topic, partition)
            if damage is not None:
                found.append(DamagedPartition(topic, partition, damage))
    return found


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    partition: int
    offset: int
    reason: str
    value: str
    """The record as text (bytes that are not UTF-8 replaced)."""


def read_dead_letters(
    engine: Engine, limit: int, partition: int | None = None
) -> list[DeadLetterRow]:
    """The last ``limit`` dead letters by partition and offset, of one
    partition or of all."""
    c = dead_letters.c
    query = select(c.partition, c.offset, c.reason, c.value)
    if partition is not None:
        query = query.where(c.partition == partition)
    query = query.order_by(c.partition.desc(), c.offset.desc()).limit(limit)
    with engine.connect() as conn:
        rows = [DeadLetterRow(int(p), int(o), r, v) for p, o, r, v in conn.execute(query)]
    return rows[::-1]


def _counts(conn: Connection, column: Any) -> dict[Any, int]:
    query = select(column, func.count()).group_by(column)
    return {key: int(n) for key, n in sorted(conn.execute(query))}


def _clock(clock_ms: int | None) -> str:
    if clock_ms is None:
        return "-"
    return datetime.fromtimestamp(clock_ms / 1000, UTC).isoformat(timespec="milliseconds")


def render(status: Status) -> str:
    lines = [
        f"{'partition':>9} {'log end':>12} {'applied':>12} {'behind':>9} "
        f"{'dead letters':>12}  clock (UTC)"
    ]
    lines += [
        f"{p.partition:>9} {p.log_end:>12,} {p.applied:>12,} {p.behind:>9,} "
        f"{p.dead_letters:>12,}  {_clock(p.clock_ms)}"
        for p in status.partitions
    ]
    for p in status.partitions:
        if p.behind < 0:
            lines.append(
                f"VIEW AHEAD OF LOG partition {p.partition}: the view has applied "
                f"{p.applied:,} records, the log holds {p.log_end:,}; its writer will not start"
            )
    for damaged in status.damaged:
        lines.append(f"DAMAGED {damaged.topic} partition {damaged.partition}: {damaged.damage}")
    totals = status.totals
    if totals is None:
        return "\n".join(lines)
    if totals.resources:
        lines.append("")
        lines.append(
            f"{'resource class':<20} {'capacity':>14} {'held':>14} {'consumed':>14} "
            f"{'free':>14} {'used':>7}"
        )
        lines += [
            f"{r.resource_class:<20} {r.capacity:>14,} {r.held:>14,} {r.consumed:>14,} "
            f"{r.free:>14,} {r.used:>7.1%}"
            for r in totals.resources
        ]
    lines.append("")
    lines.append("providers: " + _tally(totals.providers, "none"))
    lines.append("reservations: " + _tally(totals.reservations, "none"))
    lines.append(f"overcommitted providers: {totals.overcommitted_providers}")
    return "\n".join(lines)


def _tally(counts: dict[str, int], empty: str) -> str:
    return ", ".join(f"{n:,} {key}" for key, n in counts.items()) or empty
