"""server groups and their members

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 05:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "server_groups",
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("policy", sa.String(length=32), nullable=False),
        sa.Column("max_server_per_host", sa.Integer(), nullable=False),
        sa.Column("updated_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id"),
    )
    op.create_index("ix_server_groups_partition", "server_groups", ["partition"])
    op.create_table(
        "server_group_members",
        sa.Column("reservation_id", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("provider_id", sa.String(length=255), nullable=False),
        sa.Column("consumer_id", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("reservation_id"),
    )
    op.create_index("ix_server_group_members_partition", "server_group_members", ["partition"])
    op.create_index("ix_server_group_members_group_id", "server_group_members", ["group_id"])


def downgrade() -> None:
    op.drop_table("server_group_members")
    op.drop_table("server_groups")
