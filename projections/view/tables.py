"""Tables of the read model (SQLAlchemy Core; migrations in projections/migrations)."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

providers = Table(
    "providers",
    metadata,
    Column("provider_id", String(255), primary_key=True),
    Column("partition", Integer, nullable=False, index=True),
    Column("name", String(255), nullable=False),
    Column("state", String(16), nullable=False),
    Column("traits", JSON, nullable=False),
    Column("aggregates", JSON, nullable=False),
    Column("active_reservations", Integer, nullable=False),
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
    Index("ix_reservations_partition_status", "partition", "status"),
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
