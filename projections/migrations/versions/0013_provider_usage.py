"""what claims change of a provider, in a short row of its own

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 06:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_MOVED = ("active_reservations", "updated_offset", "topology_use")


def upgrade() -> None:
    op.create_table(
        "provider_usage",
        sa.Column("provider_id", sa.String(length=255), nullable=False),
        sa.Column("active_reservations", sa.Integer(), nullable=False),
        sa.Column("updated_offset", sa.BigInteger(), nullable=False),
        sa.Column("topology_use", sa.JSON(), server_default="{}", nullable=False),
        sa.PrimaryKeyConstraint("provider_id"),
    )
    op.execute(
        "INSERT INTO provider_usage (provider_id, active_reservations, updated_offset, "
        "topology_use) SELECT provider_id, active_reservations, updated_offset, topology_use "
        "FROM providers"
    )
    with op.batch_alter_table("providers", schema=None) as batch_op:
        for name in _MOVED:
            batch_op.drop_column(name)


def downgrade() -> None:
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("active_reservations", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("updated_offset", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("topology_use", sa.JSON(), server_default="{}", nullable=False)
        )
    op.execute(
        "UPDATE providers SET active_reservations = u.active_reservations, "
        "updated_offset = u.updated_offset, topology_use = u.topology_use "
        "FROM provider_usage AS u WHERE u.provider_id = providers.provider_id"
    )
    op.drop_table("provider_usage")
