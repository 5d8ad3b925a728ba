"""provider descriptions and metrics reports

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 02:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _added() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("availability_zone", sa.String(length=255), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("host_ip", sa.String(length=64), nullable=True),
        sa.Column("capabilities", sa.JSON(), server_default="{}", nullable=False),
        sa.Column("metadata", sa.JSON(), server_default="{}", nullable=False),
        sa.Column("metrics", sa.JSON(), server_default="{}", nullable=False),
        sa.Column("metrics_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("num_io_ops", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("build_failures", sa.BigInteger(), server_default="0", nullable=False),
    )


def upgrade() -> None:
    # providers described before this version had nothing to say: the
    # defaults are what the writer would have written
    with op.batch_alter_table("providers", schema=None) as batch_op:
        for column in _added():
            batch_op.add_column(column)


def downgrade() -> None:
    with op.batch_alter_table("providers", schema=None) as batch_op:
        for column in reversed(_added()):
            batch_op.drop_column(column.name)
