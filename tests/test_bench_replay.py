"""The replay benchmark's figures: what the README quotes must be what it measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.projector import bench_replay


def test_the_replay_benchmark_reports_the_median_of_its_runs_and_their_range(
    tmp_path: Path,
) -> None:
    figures = bench_replay(tmp_path / "data", records=3_000, providers=40, jobs=2, runs=3)
    assert figures["replay_records"] == 3_000
    assert figures["replay_jobs"] == 2
    # every record of the log is decided again: at least one outcome each
    assert figures["replay_outcomes"] >= 3_000
    fastest, slowest = figures["replay_s_range"]
    assert 0 < fastest <= figures["replay_s"] <= slowest
    # the rate is of the median run (its seconds are rounded in the figures)
    assert figures["replay_records_per_s"] == pytest.approx(3_000 / figures["replay_s"], rel=0.05)
    assert figures["replay_cpu_s"] > 0
    assert (tmp_path / "data" / "view.db").exists()
    assert not list((tmp_path / "data").glob("view.replay*"))
