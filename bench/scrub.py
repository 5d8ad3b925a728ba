"""How long ``berth log verify`` takes on the benchmark's log.

Run ``python -m bench.scrub [--records N] [--runs R]``. It writes the log
``bench.projector`` replays (10,000 providers, 8 partitions), has the
partition writers decide it with their outcomes published (as a live
deployment's log holds them), then times the scrub: every record of every
topic checked, the view against the log, one partition's decisions
recomputed (the nightly default), and every partition recomputed. Progress
goes to stderr; the last stdout line is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from bench.common import note
from bench.projector import _write_log
from berth.app import App, Settings, tune_gc
from berth.scrub import log_bytes, scrub
from consumers.partition_writer import catch_up_all


def bench_scrub(directory: Path, records: int, runs: int) -> dict[str, Any]:
    note(f"writing a {records}-record log ...")
    written = _write_log(directory, records, providers=10_000, partitions=8)
    note("deciding it, outcomes published ...")
    settings = Settings(data_dir=directory)
    with App(settings) as app:
        catch_up_all(app.writers())
    figures: dict[str, Any] = {"events": written, "log_bytes": log_bytes(settings)}
    plans: list[tuple[str, Literal["all"] | None]] = [
        ("one_partition", None),
        ("all_partitions", "all"),
    ]
    for name, recompute in plans:
        seconds = []
        for run in range(runs):
            note(f"verify, recomputing {name.replace('_', ' ')} ({run + 1} of {runs}) ...")
            started = time.perf_counter()
            result = scrub(settings, recompute=recompute)
            seconds.append(time.perf_counter() - started)
            assert result.sound, result.to_dict()
        figures[f"verify_{name}_s"] = round(statistics.median(seconds), 2)
        figures[f"verify_{name}_s_range"] = [round(min(seconds), 2), round(max(seconds), 2)]
        figures["records_checked"] = sum(f.records for f in result.files)
        figures[f"decisions_recomputed_{name}"] = sum(r.verified for r in result.recomputed)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tune_gc()
    work = Path(tempfile.mkdtemp(prefix="berth-bench-scrub-"))
    try:
        figures = bench_scrub(work / "log", args.records, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
