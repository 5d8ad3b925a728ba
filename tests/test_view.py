"""The view contract on SQLite and on the real PostgreSQL server."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.app import App, Settings
from berth.replay import replay
from consumers.partition_writer import PartitionWriter
from ledger.log import Append
from projections.view.engine import make_engine
from schemas.codec import encode_event
from tests.contracts.view_contract import BATCH_DEPENDENT, ViewContract, _dump, pool_scenario


class TestSqliteView(ViewContract):
    @pytest.fixture()
    def database_url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'view.db'}"


class TestPostgresView(ViewContract):
    @pytest.fixture()
    def database_url(self, postgres_url: str) -> str:
        return postgres_url


def test_replay_verify_reproduces_pools_and_transactions(tmp_path: Path) -> None:
    """``berth replay --verify`` rebuilds a view of pools, claim sets and
    transactions identical to the live one, every decision verified."""
    events, more = pool_scenario()
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        topics = app.settings.topics
        app.log.append(topics.events, [Append(0, b"k", encode_event(e)) for e in events + more])
        writer = PartitionWriter(app.log, app.view, 0, 1, topics, batch_size=4)
        writer.catch_up()
        decisions = sum(1 for _ in app.log.read(topics.outcomes, 0, 0, 10_000))
    live = _dump(make_engine(settings.view_url), BATCH_DEPENDENT)
    result = replay(
        Settings(data_dir=settings.data_dir, db_url=f"sqlite:///{tmp_path / 'replayed.db'}"),
        verify=True,
    )
    assert result.divergence is None
    assert result.verified == result.outcomes == decisions
    assert _dump(make_engine(result.view_url), BATCH_DEPENDENT) == live
