"""The durable benchmark times the claims' path, not its setup's writes."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from bench.projector import _checkpoint, _populate, bench_durable
from berth.app import App, Settings
from consumers.partition_writer import catch_up_all


def test_the_setups_pages_are_in_the_views_file_before_the_timed_window(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, partitions=4, db_url=f"sqlite:///{tmp_path / 'view.db'}")
    wal = tmp_path / "view.db-wal"
    with App(settings) as app:
        _populate(app, 40, described=True)
        catch_up_all(app.writers())
        assert wal.stat().st_size > 0  # the descriptions' rows, not yet in the file
        _checkpoint(app)
        assert wal.stat().st_size == 0
        with app.engine.connect() as conn:
            zones = conn.execute(
                text("SELECT count(*) FROM providers WHERE availability_zone IS NOT NULL")
            ).scalar_one()
    assert zones == 40


def test_the_durable_figure_counts_the_bytes_and_writes_of_its_window(tmp_path: Path) -> None:
    figures = bench_durable(
        tmp_path, claims=2_000, providers=40, described=True, claims_per_ms=20, report_every_ms=100
    )
    assert figures["claims"] == 2_000
    # the claims span 100 ms of log time: each provider reports once in it
    assert figures["metrics_reports"] == 40
    assert figures["bytes_written"] > 0
    assert figures["write_calls"] > 0
