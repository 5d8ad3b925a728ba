"""a provider's shape_offset: the batch that last wrote its row whole

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 06:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a live snapshot reads whole only the providers written whole since its
    # offsets (registered, reshaped, described), and only the usage of those
    # whose claims alone changed them; a row written before this revision
    # says 0, before any offset a live snapshot started from
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("shape_offset", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.create_index(
            "ix_providers_partition_shape_offset", ["partition", "shape_offset"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.drop_index("ix_providers_partition_shape_offset")
        batch_op.drop_column("shape_offset")
