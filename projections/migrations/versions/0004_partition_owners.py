"""partition owners' generations, for fencing writers a consumer group replaced

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 19:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "partition_owners",
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("partition"),
    )


def downgrade() -> None:
    op.drop_table("partition_owners")
