"""Tables of the read model (SQLAlchemy Core; migrations in projections/migrations)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
    TypeDecorator,
    cast,
    text,
)
from sqlalchemy.engine import Dialect

_SQLITE_MAX_INTEGER = 2**63 - 1


class _SQLiteNumeric(Numeric[Any]):
    """NUMERIC on SQLite with the driver's own integers: SQLAlchemy's Numeric
    would pass them through float, losing precision past 2**53."""

    def bind_processor(self, dialect: Dialect) -> None:
        return None

    def result_processor(self, dialect: Dialect, coltype: object) -> None:
        return None


class Count(TypeDecorator[int]):
    """A count of identifiers: up to 2**64 for an IPv6 /64, past BIGINT.

    NUMERIC(20) holds it exactly on PostgreSQL; SQLite's integers stop at
    2**63 - 1, so a larger count is stored there as a float (approximate)."""

    impl = Numeric(20, 0)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(_SQLiteNumeric(20, 0))
        return dialect.type_descriptor(Numeric(20, 0, asdecimal=True))

    def process_bind_param(self, value: int | None, dialect: Dialect) -> Any:
        if value is not None and dialect.name == "sqlite" and value > _SQLITE_MAX_INTEGER:
            return float(value)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> int | None:
        return None if value is None else int(value)


metadata = MetaData()

providers = Table(
    "providers",
    metadata,
    # what a provider is: rewritten when it changes shape, is described or
    # reports; what its claims change is in provider_usage, a short row of
    # its own that a commit rewrites for every provider its claims touched
    Column("provider_id", String(255), primary_key=True),
    Column("partition", Integer, nullable=False, index=True),
    Column("name", String(255), nullable=False),
    Column("state", String(16), nullable=False),
    Column("traits", JSON, nullable=False),
    Column("aggregates", JSON, nullable=False),
    # its description (provider_described): NULL or empty until one says
    Column("availability_zone", String(255)),
    Column("host", String(255)),
    Column("host_ip", String(64)),
    Column("capabilities", JSON, nullable=False, server_default="{}"),
    Column("metadata", JSON, nullable=False, server_default="{}"),
    # its NUMA cells and PCI devices, each as a list in the event's form
    # (schemas/topology.py): sorted by cell id and by address
    Column("numa_cells", JSON, nullable=False, server_default="[]"),
    Column("pci_devices", JSON, nullable=False, server_default="[]"),
    # its latest metrics report (metrics_reported), as of metrics_at_ms
    Column("metrics", JSON, nullable=False, server_default="{}"),
    Column("metrics_at_ms", BigInteger),
    Column("num_io_ops", BigInteger, nullable=False, server_default="0"),
    Column("build_failures", BigInteger, nullable=False, server_default="0"),
    # the end offset of the batch that last changed only its metrics: a
    # report does not move updated_offset, so a live snapshot reads just
    # these columns of a provider that only reported
    Column("metrics_offset", BigInteger, nullable=False, server_default="0"),
    # the end offset of the batch that last wrote the row whole (registered,
    # reshaped, described): a provider whose usage changed since a live
    # snapshot's offsets but not this is read again for its usage alone
    Column("shape_offset", BigInteger, nullable=False, server_default="0"),
    # a live snapshot's wave asks, per partition that moved, which providers
    # reported, and which were written whole, since its offset: without
    # these it reads every row of them
    Index("ix_providers_partition_metrics_offset", "partition", "metrics_offset"),
    Index("ix_providers_partition_shape_offset", "partition", "shape_offset"),
)

provider_usage = Table(
    "provider_usage",
    metadata,
    # one row per row of providers, written with it; a claim's commit
    # updates only this one (its length does not depend on the description)
    Column("provider_id", String(255), primary_key=True),
    # its provider's partition (never changes): with updated_offset, what a
    # live snapshot's wave asks for, the rows changed since its offsets
    Column("partition", Integer, nullable=False),
    Column("active_reservations", Integer, nullable=False),
    Column("updated_offset", BigInteger, nullable=False),
    # what its reservations hold of them (projections/fitting.py use_json):
    # {"cpus": [[cpu, reservation]], "devices": [[address, reservation]],
    # "pages": [[cell, size_kb, count]]}, each part only when not empty
    Column("topology_use", JSON, nullable=False, server_default="{}"),
    Index("ix_provider_usage_partition_updated_offset", "partition", "updated_offset"),
)

provider_rows = providers.join(
    provider_usage, provider_usage.c.provider_id == providers.c.provider_id
)
"""A provider's whole row: select a column list below from this."""

_PROVIDER_ORDER = (
    "provider_id",
    "partition",
    "name",
    "state",
    "traits",
    "aggregates",
    "active_reservations",
    "updated_offset",
    "availability_zone",
    "host",
    "host_ip",
    "capabilities",
    "metadata",
    "numa_cells",
    "pci_devices",
    "topology_use",
    "metrics",
    "metrics_at_ms",
    "num_io_ops",
    "build_failures",
    "metrics_offset",
)


def provider_row() -> list[Any]:
    """A provider's columns from both of its tables, in one order (select
    them from :data:`provider_rows`)."""
    return [
        providers.c[name] if name in providers.c else provider_usage.c[name]
        for name in _PROVIDER_ORDER
    ]


def provider_columns() -> list[Any]:
    """:func:`provider_row`, its NUMA cells and PCI devices (and
    what is held of them) as the
    JSON text the writer wrote rather than parsed: a reader that meets the
    same text on many providers (one hardware model) parses it once."""
    topology = ("numa_cells", "pci_devices", "topology_use")
    return [c for c in provider_row() if c.name not in topology] + [
        cast(c, Text).label(c.name) for c in provider_row() if c.name in topology
    ]


aggregates = Table(
    "aggregates",
    metadata,
    # one copy per partition: each partition's writer applies the aggregate
    # to its own members at its copy's place in its log
    Column("aggregate_id", String(255), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("metadata", JSON, nullable=False),
    Column("updated_offset", BigInteger, nullable=False),
)

inventories = Table(
    "inventories",
    metadata,
    Column("provider_id", String(255), primary_key=True),
    Column("resource_class", String(255), primary_key=True),
    Column("partition", Integer, nullable=False, index=True),
    Column("total", BigInteger, nullable=False),
    Column("reserved", BigInteger, nullable=False),
    Column("min_unit", BigInteger, nullable=False),
    Column("max_unit", BigInteger, nullable=False),
    Column("step_size", BigInteger, nullable=False),
    # the inventory's own ratio; capacity and free are with the ratios of
    # the provider's aggregates, as its writer decides
    Column("allocation_ratio", Float, nullable=False),
    Column("capacity", BigInteger, nullable=False),
    Column("held", BigInteger, nullable=False),
    Column("consumed", BigInteger, nullable=False),
    # effective capacity: what a new claim can still get
    Column("free", BigInteger, nullable=False),
)

reservations = Table(
    "reservations",
    metadata,
    Column("reservation_id", String(255), primary_key=True),
    Column("partition", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("consumer_id", String(255), nullable=False, index=True),
    Column("project_id", String(255), nullable=False),
    Column("items", JSON, nullable=False),
    Column("lease_ms", BigInteger, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False),
    Column("anti_affinity_group", String(255)),
    Column("tags", JSON, nullable=False),
    Column("require_with_tags", JSON, nullable=False),
    Column("require_without_tags", JSON, nullable=False),
    Column("created_offset", BigInteger, nullable=False),
    Column("updated_offset", BigInteger, nullable=False),
    # the identifiers the claim asked for ([{"pool_id", "value"?}]), for its
    # fingerprint; which ones it holds are in reservation_identifiers
    Column("identifiers", JSON),
    # the transaction of a claim set's hold: the one whose decision it awaits
    # while 'pending'; NULL once committed, kept if it never was
    Column("transaction_id", String(255)),
    # while 'pending' only: the transaction's priority, and an order key of the
    # hold among the transaction's holds that the same record created (the
    # order they are committed or aborted in is (created_offset, position))
    Column("transaction_priority", BigInteger),
    Column("transaction_position", Integer),
    Index("ix_reservations_partition_status", "partition", "status"),
    # partial: plain claims, the hot path, add no index entry
    Index(
        "ix_reservations_transaction_id",
        "transaction_id",
        sqlite_where=text("transaction_id IS NOT NULL"),
        postgresql_where=text("transaction_id IS NOT NULL"),
    ),
)
"""Statuses: 'held', 'consumed', 'pending' (prepared, awaiting its transaction's
decision; ``expires_at_ms`` is the deadline), and the final 'released',
'expired', 'aborted'."""

server_groups = Table(
    "server_groups",
    metadata,
    # a server group, in the partition of its id (its writer decides members)
    Column("group_id", String(255), primary_key=True),
    Column("partition", Integer, nullable=False, index=True),
    Column("policy", String(32), nullable=False),
    Column("max_server_per_host", Integer, nullable=False),
    # its owner (NULL: the system's, any project's members may join)
    Column("project_id", String(255), nullable=True, index=True),
    Column("user_id", String(255), nullable=True),
    Column("updated_offset", BigInteger, nullable=False),
)

server_group_members = Table(
    "server_group_members",
    metadata,
    # one row per membership claim ever held, written once: the reservation
    # (in the group's partition) says whether it is still a member
    Column("reservation_id", String(255), primary_key=True),
    Column("partition", Integer, nullable=False, index=True),
    Column("group_id", String(255), nullable=False, index=True),
    Column("provider_id", String(255), nullable=False),
    Column("consumer_id", String(255), nullable=False),
)

pools = Table(
    "pools",
    metadata,
    Column("pool_id", String(255), primary_key=True),
    Column("partition", Integer, nullable=False, index=True),
    Column("kind", String(16), nullable=False),
    # the pool_defined event's kind, cidr, first, last, members and excluded
    Column("definition", JSON, nullable=False),
    Column("size", Count, nullable=False),
    Column("taken", BigInteger, nullable=False),
    Column("free", Count, nullable=False),
    Column("updated_offset", BigInteger, nullable=False),
)

reservation_identifiers = Table(
    "reservation_identifiers",
    metadata,
    # one row per identifier a live (held, consumed or pending) reservation
    # holds: the primary key forbids one identifier held twice
    Column("pool_id", String(255), primary_key=True),
    Column("value", String(255), primary_key=True),
    Column("reservation_id", String(255), nullable=False, index=True),
    Column("partition", Integer, nullable=False, index=True),
    # its place among the reservation's identifiers, as the projector gave them
    Column("position", Integer, nullable=False),
)

outcomes = Table(
    "outcomes",
    metadata,
    Column("partition", Integer, primary_key=True),
    Column("offset", BigInteger, primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("event_id", String(255), nullable=False),
    Column("subject", String(255), nullable=False, index=True),
    Column("clock_ms", BigInteger, nullable=False),
    Column("reasons", JSON),
    Column("expires_at_ms", BigInteger),
    Column("identifiers", JSON),
)

dead_letters = Table(
    "dead_letters",
    metadata,
    Column("partition", Integer, primary_key=True),
    Column("offset", BigInteger, primary_key=True),
    Column("reason", Text, nullable=False),
    Column("value", Text, nullable=False),
)

partition_offsets = Table(
    "partition_offsets",
    metadata,
    Column("partition", Integer, primary_key=True),
    Column("partitions", Integer, nullable=False),
    # the next offset to apply: every record below it is in the view
    Column("next_offset", BigInteger, nullable=False),
    Column("clock_ms", BigInteger, nullable=False),
)

queued_batches = Table(
    "queued_batches",
    metadata,
    Column("batch_id", String(255), primary_key=True),
    Column("priority", Integer, nullable=False),
    # resource shape -> instances of the batch waiting with that shape
    Column("waiting", JSON, nullable=False),
    Column("queued_partition", Integer, nullable=False),
    Column("queued_offset", BigInteger, nullable=False),
)

queue_depth = Table(
    "queue_depth",
    metadata,
    # a resource shape, e.g. DISK_GB=20,MEMORY_MB=4096,VCPU=2: the scale-out
    # signal an autoscaler reads is how many instances of it wait
    Column("shape", String(1024), primary_key=True),
    Column("instances", BigInteger, nullable=False),
    Column("batches", Integer, nullable=False),
)

queue_offsets = Table(
    "queue_offsets",
    metadata,
    Column("partition", Integer, primary_key=True),
    # the next placements record to fold into queued_batches and queue_depth
    Column("next_offset", BigInteger, nullable=False),
)

partition_owners = Table(
    "partition_owners",
    metadata,
    Column("partition", Integer, primary_key=True),
    # raised by every writer that takes the partition over (a consumer group
    # gave it the partition); a commit from an older generation is refused,
    # so a writer paused past its group session cannot commit after the
    # writer that replaced it has
    Column("generation", BigInteger, nullable=False),
    # who holds it: host:pid of the process, for the operator
    Column("owner", String(255), nullable=False),
)

# --- OpenStack Placement's model (issue 32) --------------------------------
# what the Placement API reads; capacity and usage are in inventories, the
# same rows Berth's own reservations count in

placement_providers = Table(
    "placement_providers",
    metadata,
    Column("uuid", String(36), primary_key=True),
    Column("partition", Integer, nullable=False),
    Column("name", String(255), nullable=False, unique=True),
    Column("generation", BigInteger, nullable=False),
    Column("parent_uuid", String(36)),
    Column("root_uuid", String(36), nullable=False, index=True),
    Column("traits", JSON, nullable=False),
    Column("aggregates", JSON, nullable=False),
    # resource class -> {total, reserved, min_unit, max_unit, step_size, allocation_ratio}
    Column("inventories", JSON, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("updated_offset", BigInteger, nullable=False),
)

placement_consumers = Table(
    "placement_consumers",
    metadata,
    Column("uuid", String(36), primary_key=True),
    Column("partition", Integer, nullable=False),
    Column("project_id", String(255), nullable=False, index=True),
    Column("user_id", String(255), nullable=False),
    Column("consumer_type", String(255)),
    Column("generation", BigInteger, nullable=False),
    # provider uuid -> resource class -> amount
    Column("allocations", JSON, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("updated_offset", BigInteger, nullable=False),
)

placement_names = Table(
    "placement_names",
    metadata,
    # the custom resource classes and traits ('resource_class' or 'trait')
    Column("kind", String(16), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("partition", Integer, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
)
