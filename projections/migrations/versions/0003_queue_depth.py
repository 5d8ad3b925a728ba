"""queue depth by resource shape; the transaction index made partial

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 02:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain claims, the hot path, hold no transaction: they need no entry
    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.drop_index("ix_reservations_transaction_id")
        batch_op.create_index(
            "ix_reservations_transaction_id",
            ["transaction_id"],
            unique=False,
            sqlite_where=sa.text("transaction_id IS NOT NULL"),
            postgresql_where=sa.text("transaction_id IS NOT NULL"),
        )
    op.create_table(
        "queued_batches",
        sa.Column("batch_id", sa.String(length=255), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("waiting", sa.JSON(), nullable=False),
        sa.Column("queued_partition", sa.Integer(), nullable=False),
        sa.Column("queued_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("batch_id"),
    )
    op.create_table(
        "queue_depth",
        sa.Column("shape", sa.String(length=1024), nullable=False),
        sa.Column("instances", sa.BigInteger(), nullable=False),
        sa.Column("batches", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("shape"),
    )
    op.create_table(
        "queue_offsets",
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("partition"),
    )


def downgrade() -> None:
    op.drop_table("queue_offsets")
    op.drop_table("queue_depth")
    op.drop_table("queued_batches")
    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.drop_index("ix_reservations_transaction_id")
        batch_op.create_index("ix_reservations_transaction_id", ["transaction_id"], unique=False)
