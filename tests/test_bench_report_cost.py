"""bench.report_cost: every report goes through the writer's steps, and the
callgrind totals of a step dumped several times are summed."""

from __future__ import annotations

from pathlib import Path

from bench.callgrind import totals
from bench.report_cost import bench


def test_every_report_goes_through_each_step(tmp_path: Path) -> None:
    figures = bench(tmp_path, providers=40, count=30, per_round=7)
    assert figures["applied"] == 30
    steps = figures["cpu_us_per_report"]
    assert set(steps) == {
        "decode_alone",
        "fetch",
        "decide",
        "encode_outcomes",
        "append_outcomes",
        "commit_view",
    }
    assert all(value >= 0 for value in steps.values())
    assert "instructions_per_report" not in figures  # not under valgrind


def test_totals_sum_the_dumps_of_one_step(tmp_path: Path) -> None:
    for n, (what, total) in enumerate([("decide", 10), ("commit", 5), ("decide", 7)], 1):
        (tmp_path / f"callgrind.out.42.{n}").write_text(
            f"desc: Trigger: Client Request: {what}\nevents: Ir\ntotals: {total}\n"
        )
    assert totals(42, str(tmp_path)) == {"decide": 17, "commit": 5}
