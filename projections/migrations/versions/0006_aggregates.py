"""aggregates with metadata, a copy per partition

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "aggregates",
        sa.Column("aggregate_id", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("updated_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("aggregate_id", "partition"),
    )


def downgrade() -> None:
    op.drop_table("aggregates")
