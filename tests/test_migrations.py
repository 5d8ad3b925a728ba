"""The Alembic migrations build what projections/view/tables.py declares, from
an empty database and from a view left at an earlier revision."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, select, text

from projections.view.engine import make_engine
from projections.view.migrate import upgrade
from projections.view.tables import metadata, provider_row, provider_rows, provider_usage
from tests.postgres import scratch_database


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'view.db'}")
        yield engine
        engine.dispose()
        return
    with scratch_database() as url:
        engine = make_engine(url)
        yield engine
        engine.dispose()


def _transaction_index(engine: Engine) -> str:
    """The index's definition as the database keeps it."""
    if engine.dialect.name == "sqlite":
        query = "SELECT sql FROM sqlite_master WHERE name = :name"
    else:
        query = "SELECT indexdef FROM pg_indexes WHERE indexname = :name"
    with engine.connect() as conn:
        found = conn.execute(text(query), {"name": "ix_reservations_transaction_id"})
        return str(found.scalar_one())


@pytest.mark.parametrize("start", [None, "0002"])
def test_migrations_build_the_declared_schema(engine: Engine, start: str | None) -> None:
    if start is not None:
        upgrade(engine, start)  # a view written before the later revisions
        assert "WHERE" not in _transaction_index(engine).upper()
    upgrade(engine)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    # partial: compare_metadata does not look at an index's WHERE clause
    assert "transaction_id IS NOT NULL" in _transaction_index(engine)


def test_usage_moves_to_its_own_table(engine: Engine) -> None:
    """0013 moves what claims change of a provider out of its providers row:
    a view written before it reads the same provider after it."""
    upgrade(engine, "0012")
    with engine.begin() as conn:
        conn.execute(
            text(
                'INSERT INTO providers (provider_id, "partition", name, state, traits, '
                "aggregates, active_reservations, updated_offset, availability_zone, "
                "capabilities, metadata, numa_cells, pci_devices, topology_use, metrics, "
                "num_io_ops, build_failures, metrics_offset) VALUES ('n1', 0, 'node 1', "
                "'enabled', '[]', '[\"rack-1\"]', 3, 41, 'az1', '{}', '{}', '[]', '[]', "
                '\'{"cpus": [[2, "r1"]]}\', \'{"cpu": 1.5}\', 2, 0, 39)'
            )
        )
    upgrade(engine)
    with engine.connect() as conn:
        row = conn.execute(select(*provider_row()).select_from(provider_rows)).one()
    assert row._asdict() == {
        "provider_id": "n1",
        "partition": 0,
        "name": "node 1",
        "state": "enabled",
        "traits": [],
        "aggregates": ["rack-1"],
        "active_reservations": 3,
        "updated_offset": 41,
        "availability_zone": "az1",
        "host": None,
        "host_ip": None,
        "capabilities": {},
        "metadata": {},
        "numa_cells": [],
        "pci_devices": [],
        "topology_use": {"cpus": [[2, "r1"]]},
        "metrics": {"cpu": 1.5},
        "metrics_at_ms": None,
        "num_io_ops": 2,
        "build_failures": 0,
        "metrics_offset": 39,
    }


def test_usage_rows_take_their_providers_partition(engine: Engine) -> None:
    """0014 gives each provider_usage row its provider's partition, which a
    live snapshot's index on (partition, updated_offset) asks by."""
    upgrade(engine, "0013")
    with engine.begin() as conn:
        for pid, partition in (("n1", 0), ("n2", 5)):
            conn.execute(
                text(
                    'INSERT INTO providers (provider_id, "partition", name, state, traits, '
                    "aggregates) VALUES (:pid, :partition, :pid, 'enabled', '[]', '[]')"
                ),
                {"pid": pid, "partition": partition},
            )
            conn.execute(
                text(
                    "INSERT INTO provider_usage (provider_id, active_reservations, "
                    "updated_offset) VALUES (:pid, 0, 7)"
                ),
                {"pid": pid},
            )
    upgrade(engine)
    with engine.connect() as conn:
        rows = conn.execute(
            select(provider_usage.c.provider_id, provider_usage.c.partition).order_by(
                provider_usage.c.provider_id
            )
        ).all()
    assert [tuple(row) for row in rows] == [("n1", 0), ("n2", 5)]
