"""initial read model

Revision ID: 0001
Revises:
Create Date: 2026-11-22 21:57:42.487702
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dead_letters",
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("partition", "offset"),
    )
    op.create_table(
        "inventories",
        sa.Column("provider_id", sa.String(length=255), nullable=False),
        sa.Column("resource_class", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.Column("reserved", sa.BigInteger(), nullable=False),
        sa.Column("min_unit", sa.BigInteger(), nullable=False),
        sa.Column("max_unit", sa.BigInteger(), nullable=False),
        sa.Column("step_size", sa.BigInteger(), nullable=False),
        sa.Column("allocation_ratio", sa.Float(), nullable=False),
        sa.Column("capacity", sa.BigInteger(), nullable=False),
        sa.Column("held", sa.BigInteger(), nullable=False),
        sa.Column("consumed", sa.BigInteger(), nullable=False),
        sa.Column("free", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("provider_id", "resource_class"),
    )
    with op.batch_alter_table("inventories", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_inventories_partition"), ["partition"], unique=False)

    op.create_table(
        "outcomes",
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("subject", sa.String(length=255), nullable=False),
        sa.Column("clock_ms", sa.BigInteger(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=True),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("partition", "offset", "seq"),
    )
    with op.batch_alter_table("outcomes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_outcomes_subject"), ["subject"], unique=False)

    op.create_table(
        "partition_offsets",
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("partitions", sa.Integer(), nullable=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
        sa.Column("clock_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("partition"),
    )
    op.create_table(
        "providers",
        sa.Column("provider_id", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("traits", sa.JSON(), nullable=False),
        sa.Column("aggregates", sa.JSON(), nullable=False),
        sa.Column("active_reservations", sa.Integer(), nullable=False),
        sa.Column("updated_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("provider_id"),
    )
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_providers_partition"), ["partition"], unique=False)

    op.create_table(
        "reservations",
        sa.Column("reservation_id", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("consumer_id", sa.String(length=255), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("items", sa.JSON(), nullable=False),
        sa.Column("lease_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("anti_affinity_group", sa.String(length=255), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("require_with_tags", sa.JSON(), nullable=False),
        sa.Column("require_without_tags", sa.JSON(), nullable=False),
        sa.Column("created_offset", sa.BigInteger(), nullable=False),
        sa.Column("updated_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("reservation_id"),
    )
    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_reservations_consumer_id"), ["consumer_id"], unique=False
        )
        batch_op.create_index(
            "ix_reservations_partition_status", ["partition", "status"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.drop_index("ix_reservations_partition_status")
        batch_op.drop_index(batch_op.f("ix_reservations_consumer_id"))

    op.drop_table("reservations")
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_providers_partition"))

    op.drop_table("providers")
    op.drop_table("partition_offsets")
    with op.batch_alter_table("outcomes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_outcomes_subject"))

    op.drop_table("outcomes")
    with op.batch_alter_table("inventories", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_inventories_partition"))

    op.drop_table("inventories")
    op.drop_table("dead_letters")
