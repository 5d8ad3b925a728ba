"""The view contract on SQLite and on the real PostgreSQL server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contracts.view_contract import ViewContract


class TestSqliteView(ViewContract):
    @pytest.fixture()
    def database_url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'view.db'}"


class TestPostgresView(ViewContract):
    @pytest.fixture()
    def database_url(self, postgres_url: str) -> str:
        return postgres_url
