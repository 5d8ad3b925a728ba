"""OpenStack Placement's model: providers, consumers, custom names

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "placement_providers",
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("parent_uuid", sa.String(length=36), nullable=True),
        sa.Column("root_uuid", sa.String(length=36), nullable=False),
        sa.Column("traits", sa.JSON(), nullable=False),
        sa.Column("aggregates", sa.JSON(), nullable=False),
        sa.Column("inventories", sa.JSON(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("uuid"),
        sa.UniqueConstraint("name"),
    )
    op.create_index(
        "ix_placement_providers_root_uuid", "placement_providers", ["root_uuid"], unique=False
    )
    op.create_table(
        "placement_consumers",
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("consumer_type", sa.String(length=255), nullable=True),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("allocations", sa.JSON(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("uuid"),
    )
    op.create_index(
        "ix_placement_consumers_project_id", "placement_consumers", ["project_id"], unique=False
    )
    op.create_table(
        "placement_names",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "name"),
    )


def downgrade() -> None:
    op.drop_table("placement_names")
    op.drop_index("ix_placement_consumers_project_id", table_name="placement_consumers")
    op.drop_table("placement_consumers")
    op.drop_index("ix_placement_providers_root_uuid", table_name="placement_providers")
    op.drop_table("placement_providers")
