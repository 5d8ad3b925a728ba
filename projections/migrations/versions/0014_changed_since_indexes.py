"""indexes for what changed since given offsets, per partition

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 06:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a live snapshot asks each wave for the providers whose usage changed
    # or that reported past an offset of their partition: without these it
    # reads every provider row of every partition that moved
    with op.batch_alter_table("provider_usage", schema=None) as batch_op:
        batch_op.add_column(sa.Column("partition", sa.Integer(), nullable=True))
    op.execute(
        'UPDATE provider_usage SET "partition" = (SELECT p."partition" FROM providers AS p '
        "WHERE p.provider_id = provider_usage.provider_id)"
    )
    with op.batch_alter_table("provider_usage", schema=None) as batch_op:
        batch_op.alter_column("partition", existing_type=sa.Integer(), nullable=False)
        batch_op.create_index(
            "ix_provider_usage_partition_updated_offset",
            ["partition", "updated_offset"],
            unique=False,
        )
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.create_index(
            "ix_providers_partition_metrics_offset",
            ["partition", "metrics_offset"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.drop_index("ix_providers_partition_metrics_offset")
    with op.batch_alter_table("provider_usage", schema=None) as batch_op:
        batch_op.drop_index("ix_provider_usage_partition_updated_offset")
        batch_op.drop_column("partition")
