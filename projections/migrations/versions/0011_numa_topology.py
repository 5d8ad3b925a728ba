"""providers' NUMA cells and PCI devices

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 06:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _added() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("numa_cells", sa.JSON(), server_default="[]", nullable=False),
        sa.Column("pci_devices", sa.JSON(), server_default="[]", nullable=False),
    )


def upgrade() -> None:
    # no description before this version gave cells or devices: the
    # defaults are what the writer would have written
    with op.batch_alter_table("providers", schema=None) as batch_op:
        for column in _added():
            batch_op.add_column(column)


def downgrade() -> None:
    with op.batch_alter_table("providers", schema=None) as batch_op:
        for column in reversed(_added()):
            batch_op.drop_column(column.name)
