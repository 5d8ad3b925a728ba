"""`python -m bench.plot` draws the benchmarks' JSON lines as PNG figures:
one per benchmark whose results are there, several runs as their median and
spread, the missing ones named."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from bench.plot import by_suffix, read_runs

ROOT = Path(__file__).resolve().parent.parent


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def _write(path: Path, *runs: dict[str, object]) -> None:
    # as a benchmark's stdout is kept: progress lines may precede the JSON
    path.write_text("".join(f"note: running\n{json.dumps(run)}\n" for run in runs))


def test_runs_and_series(tmp_path: Path) -> None:
    path = tmp_path / "placement.json"
    _write(path, {"p50_ms_1000": 0.05, "p50_ms_10000": 0.2}, {"p50_ms_1000": 0.07, "other": "x"})
    runs = read_runs(path)
    assert len(runs) == 2
    assert by_suffix(runs, r"p50_ms_(\d+)") == {1000.0: [0.05, 0.07], 10000.0: [0.2]}


def test_it_draws_a_figure_per_benchmark_with_results(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    _write(
        results / "placement.json",
        {"p50_ms_1000": 0.05, "p99_ms_1000": 0.1, "p50_ms_10000": 0.2, "p99_ms_10000": 0.3},
        {"p50_ms_1000": 0.06, "p99_ms_1000": 0.12, "p50_ms_10000": 0.25, "p99_ms_10000": 0.35},
    )
    _write(
        results / "worker.json",
        {"projector_claims_per_s_runs": [5000, 6000], "worker_1_claims_per_s_runs": [2600]},
    )
    _write(results / "projector.json", {"replay_records": 100_000, "replay_s": 1.9})
    out = tmp_path / "figures"
    done = subprocess.run(
        [sys.executable, "-m", "bench.plot", str(results), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    written = json.loads(done.stdout.splitlines()[-1])["figures"]
    names = sorted(Path(p).name for p in written)
    assert names == ["placement_latency.png", "replay.png", "throughput_writers.png"]
    for name in names:
        width, height = _png_size(out / name)
        assert (width, height) == (640, 400)
        assert (out / name).stat().st_size > 10_000  # axes, lines and labels, not a blank
    for missing in ("round_trip", "dashboard"):
        assert f"no results for {missing}" in done.stderr


def test_nothing_to_draw_is_an_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.plot", str(tmp_path), "--out", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert json.loads(done.stdout)["figures"] == []
