"""Alembic environment: runs against the connection handed over by berth."""

from __future__ import annotations

from alembic import context

from projections.view.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through projections.view.migrate.upgrade")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
