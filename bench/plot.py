"""The benchmarks' JSON drawn as PNG figures.

Each benchmark prints one JSON object of figures on its last stdout line;
keep those lines, one file per benchmark, a line per run (so that alternating
runs can be kept side by side), then draw:

    python -m bench.placement | tail -n 1 >> results/placement.json
    python -m bench.plot results --out docs/figures

Figures, each drawn when its benchmark's file is there (the others are
named on stderr): ``placement_latency.png`` (decision latency against
providers: ``placement.json``, and ``scale.json`` for bounded mode),
``throughput_writers.png`` (claims/s against the processes writing:
``worker.json``), ``replay.png`` (replay time against records:
``projector.json``, runs with different ``--replay-records``),
``round_trip.png`` (a placement's round trip through the API under load:
``api.json``) and ``dashboard.png`` (the dashboard's first paint and its
server's CPU against providers: ``dashboard.json``). Several runs of one
size show as their median, with a bar from the least to the most."""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

Runs = list[dict[str, Any]]
Series = dict[float, list[float]]


def read_runs(path: Path) -> Runs:
    """Every JSON object in ``path``, one a line (other lines ignored)."""
    runs = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("{"):
            runs.append(json.loads(line))
    return runs


def by_suffix(runs: Runs, pattern: str) -> Series:
    """``{N: [value of each run]}`` for every key ``pattern`` matches, N the
    number its group captures (providers, say)."""
    found: Series = defaultdict(list)
    compiled = re.compile(pattern)
    for run in runs:
        for key, value in run.items():
            match = compiled.fullmatch(key)
            if match is None:
                continue
            values = value if isinstance(value, list) else [value]
            found[float(match[1])].extend(float(v) for v in values if isinstance(v, int | float))
    return dict(found)


def _line(axes: Axes, series: Series, label: str, marker: str, color: str | None = None) -> None:
    """The median of each x, with a bar from the least run to the most."""
    xs = sorted(series)
    if not xs:
        return
    medians = [statistics.median(series[x]) for x in xs]
    low = [m - min(series[x]) for m, x in zip(medians, xs, strict=True)]
    high = [max(series[x]) - m for m, x in zip(medians, xs, strict=True)]
    axes.errorbar(xs, medians, yerr=[low, high], label=label, marker=marker, capsize=3, color=color)


def placement_latency(results: Path, axes: Axes) -> bool:
    full = read_runs(results / "placement.json") if (results / "placement.json").exists() else []
    scale = read_runs(results / "scale.json") if (results / "scale.json").exists() else []
    if not full and not scale:
        return False
    _line(axes, by_suffix(full, r"p50_ms_(\d+)"), "full scan, p50", "o")
    _line(axes, by_suffix(full, r"p99_ms_(\d+)"), "full scan, p99", "s")
    _line(axes, by_suffix(scale, r"bounded_p50_ms_(\d+)"), "bounded, p50", "^")
    _line(axes, by_suffix(scale, r"bounded_p99_ms_(\d+)"), "bounded, p99", "v")
    axes.set(xscale="log", yscale="log", xlabel="providers", ylabel="one decision (ms)")
    axes.set_title("Placement latency against providers")
    return True


WRITERS = (
    ("projector", "berth projector\n(1 process)"),
    ("worker_1", "berth worker\n1 replica"),
    ("worker_2", "berth worker\n2 replicas"),
)


def throughput_writers(results: Path, axes: Axes) -> bool:
    if not (results / "worker.json").exists():
        return False
    runs = read_runs(results / "worker.json")
    labels, medians, spreads = [], [], []
    for mode, label in WRITERS:
        rates = [float(r) for run in runs for r in run.get(f"{mode}_claims_per_s_runs", ())]
        if rates:
            labels.append(label)
            medians.append(statistics.median(rates))
            spreads.append((medians[-1] - min(rates), max(rates) - medians[-1]))
    if not labels:
        return False
    errors = [[s[0] for s in spreads], [s[1] for s in spreads]]
    axes.bar(labels, medians, yerr=errors, capsize=4, color="#4c72b0")
    axes.set(ylabel="claims decided per second")
    axes.set_title("Throughput against the processes writing")
    return True


def replay(results: Path, axes: Axes) -> bool:
    if not (results / "projector.json").exists():
        return False
    series: Series = defaultdict(list)
    for run in read_runs(results / "projector.json"):
        if "replay_records" in run:
            series[float(run["replay_records"])].append(float(run["replay_s"]))
    if not series:
        return False
    _line(axes, dict(series), "replay into a fresh SQLite view", "o")
    axes.set(xlabel="records in the log", ylabel="seconds", xlim=(0, None), ylim=(0, None))
    axes.set_title("Replay time against records")
    return True


def round_trip(results: Path, axes: Axes) -> bool:
    if not (results / "api.json").exists():
        return False
    runs = read_runs(results / "api.json")
    p50 = by_suffix(runs, r"round_trip_p50_ms_idle_wait_([0-9.]+)_s")
    p99 = by_suffix(runs, r"round_trip_p99_ms_idle_wait_([0-9.]+)_s")
    if not p50:
        return False
    waits = sorted(p50)
    positions = range(len(waits))
    width = 0.4
    axes.bar(
        [p - width / 2 for p in positions],
        [statistics.median(p50[w]) for w in waits],
        width,
        label="p50",
    )
    axes.bar(
        [p + width / 2 for p in positions],
        [statistics.median(p99.get(w, [0.0])) for w in waits],
        width,
        label="p99",
        hatch="//",
    )
    axes.set_xticks(list(positions), [f"serve --idle-wait-s {w:g}" for w in waits])
    axes.set(ylabel="POST /v1/requests?wait until answered (ms)")
    axes.set_title("A placement's round trip through the API")
    return True


def dashboard(results: Path, axes: Axes) -> bool:
    if not (results / "dashboard.json").exists():
        return False
    runs = read_runs(results / "dashboard.json")
    paint = by_suffix(runs, r"first_paint_ms_runs_(\d+)")
    cells = by_suffix(runs, r"every_cell_ms_runs_(\d+)")
    cpu = by_suffix(runs, r"server_cpu_percent_(\d+)")
    if not paint:
        return False
    _line(axes, paint, "first paint of the grid", "o")
    _line(axes, cells, "every cell in the page", "s")
    axes.axhline(1000, color="grey", linestyle="--", linewidth=1, label="target: 1 s")
    axes.set(xscale="log", xlabel="providers", ylabel="ms from the navigation", ylim=(0, None))
    server = axes.twinx()
    _line(server, cpu, "server CPU, grid every 2 s", "^", color="#c44e52")
    server.set(ylabel="server CPU (% of a core)", ylim=(0, 10))
    lines = axes.get_legend_handles_labels()
    more = server.get_legend_handles_labels()
    axes.legend(lines[0] + more[0], lines[1] + more[1], fontsize="small", loc="upper left")
    axes.set_title("The dashboard against providers")
    return True


FIGURES: dict[str, Callable[[Path, Axes], bool]] = {
    "placement_latency": placement_latency,
    "throughput_writers": throughput_writers,
    "replay": replay,
    "round_trip": round_trip,
    "dashboard": dashboard,
}


def draw(results: Path, out: Path) -> list[Path]:
    """Every figure whose benchmark has results; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, plot in FIGURES.items():
        figure, axes = plt.subplots(figsize=(6.4, 4.0), dpi=100)
        try:
            if not plot(results, axes):
                print(f"bench.plot: no results for {name} in {results}", file=sys.stderr)
                continue
            if axes.get_legend_handles_labels()[0] and axes.get_legend() is None:
                axes.legend(fontsize="small")
            axes.grid(True, alpha=0.3)
            figure.tight_layout()
            path = out / f"{name}.png"
            figure.savefig(path)
            written.append(path)
        finally:
            plt.close(figure)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="folder of NAME.json, a JSON line per run")
    parser.add_argument("--out", type=Path, default=Path("figures"), help="folder for the PNGs")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        print(f"bench.plot: {args.results} is not a folder", file=sys.stderr)
        return 2
    written = draw(args.results, args.out)
    print(json.dumps({"figures": [str(p) for p in written]}))
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
