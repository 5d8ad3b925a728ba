"""server groups belong to a project and a user

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 02:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # the groups created before had no owner: the system's, as they were
    with op.batch_alter_table("server_groups") as batch:
        batch.add_column(sa.Column("project_id", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("user_id", sa.String(length=255), nullable=True))
    op.create_index("ix_server_groups_project_id", "server_groups", ["project_id"])


def downgrade() -> None:
    op.drop_index("ix_server_groups_project_id", table_name="server_groups")
    with op.batch_alter_table("server_groups") as batch:
        batch.drop_column("user_id")
        batch.drop_column("project_id")
