"""identifier pools, claim sets and transactions

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 09:12:04.318230
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pools",
        sa.Column("pool_id", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("size", sa.Numeric(precision=20, scale=0), nullable=False),
        sa.Column("taken", sa.BigInteger(), nullable=False),
        sa.Column("free", sa.Numeric(precision=20, scale=0), nullable=False),
        sa.Column("updated_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("pool_id"),
    )
    with op.batch_alter_table("pools", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pools_partition"), ["partition"], unique=False)

    op.create_table(
        "reservation_identifiers",
        sa.Column("pool_id", sa.String(length=255), nullable=False),
        sa.Column("value", sa.String(length=255), nullable=False),
        sa.Column("reservation_id", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("pool_id", "value"),
    )
    with op.batch_alter_table("reservation_identifiers", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_reservation_identifiers_partition"), ["partition"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_reservation_identifiers_reservation_id"),
            ["reservation_id"],
            unique=False,
        )

    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("identifiers", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("transaction_id", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("transaction_priority", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("transaction_position", sa.Integer(), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_reservations_transaction_id"), ["transaction_id"], unique=False
        )

    with op.batch_alter_table("outcomes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("identifiers", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outcomes", schema=None) as batch_op:
        batch_op.drop_column("identifiers")

    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reservations_transaction_id"))
        batch_op.drop_column("transaction_position")
        batch_op.drop_column("transaction_priority")
        batch_op.drop_column("transaction_id")
        batch_op.drop_column("identifiers")

    with op.batch_alter_table("reservation_identifiers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reservation_identifiers_reservation_id"))
        batch_op.drop_index(batch_op.f("ix_reservation_identifiers_partition"))

    op.drop_table("reservation_identifiers")
    with op.batch_alter_table("pools", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pools_partition"))

    op.drop_table("pools")
