"""``berth explain --request`` on a large log: how long a past answer takes
to explain, for requests answered early, midway and late in the log.

    python -m bench.explain [--records 1000000] [--dir DIR] [--runs 3] [--full-replay]
                            [--checkpoint-every 50000] [--checkpoint-keep 40]

The log is the replay benchmark's (``bench.projector``'s registrations and
claim churn, 8 partitions), written while its writers run, with a placement
request answered by the real scheduler worker every ``records / requests``
records, and the view checkpointed every ``--checkpoint-every`` records as
``berth serve`` does, ``--checkpoint-keep`` of them kept (its default:
evenly spread, so an answer may lie up to about ``records / keep`` records
past the newest checkpoint before it). ``--dir`` keeps the log, its view and checkpoints, and
reuses them when they were built with the same options. ``--full-replay``
also times the early, mid and late requests with checkpoints ignored (the
replay from offset 0 explain falls back to). Each is timed cold (a new
app each time, as the ``berth explain`` command) and warm (one app whose
log has read the records already, as ``berth serve --api``).

Progress goes to stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import note, timed
from bench.projector import Churn, _populate
from berth.app import App, Settings, tune_gc
from berth.audit import explain_request
from berth.checkpoints import DEFAULT_KEEP, Checkpoints
from berth.client import Answers, Publisher
from consumers.partition_writer import catch_up_all
from scheduling.config import SchedulerConfig
from schemas.requests import PlacementRequest

PARTITIONS = 8
BUILT = "bench-explain.json"


def build(directory: Path, options: dict[str, int]) -> list[str]:
    """Write the log into ``directory`` with its writers and a scheduler
    worker running; the ids of the requests answered, in log order."""
    records, requests = options["records"], options["requests"]
    every = options["checkpoint_every"]
    settings = Settings(data_dir=directory, partitions=PARTITIONS)
    placed: list[str] = []
    with App(settings) as app:
        writers = app.writers()
        worker = app.scheduler_worker(SchedulerConfig.default(), lambda: catch_up_all(writers))
        publisher = Publisher(app.log, app.settings.topics)
        answers = Answers(app.log, app.settings.topics)
        checkpoints = Checkpoints(app.settings, keep=options["checkpoint_keep"])
        churn = Churn(_populate(app, options["providers"]), PARTITIONS)
        written = 2 * options["providers"]
        spacing = records // requests
        next_request, next_checkpoint = spacing // 2, every
        while written < records:
            appends = churn.next(min(10_000, records - written, next_request - written))
            app.log.append(app.settings.topics.events, appends)
            written += len(appends)
            if written >= next_request:
                placed.append(_place(app, publisher, worker, writers, answers, churn.k))
                next_request += spacing
            if written >= next_checkpoint:
                catch_up_all(writers)
                checkpoints.take()
                next_checkpoint += every
                note(f"{written} records, {len(placed)} requests answered")
        catch_up_all(writers)
    return placed


def _place(
    app: App,
    publisher: Publisher,
    worker: Any,
    writers: list[Any],
    answers: Answers,
    k: int,
) -> str:
    """One request placed by the scheduler worker on the view as it is."""
    rid = f"req-{k}"
    request = PlacementRequest(
        request_id=rid,
        ts_ms=5_000 + k,
        project_id="bench",
        resources={"VCPU": 2, "MEMORY_MB": 4_096, "DISK_GB": 20},
    )
    catch_up_all(writers)
    publisher.submit([request])
    while worker.step():
        pass
    if answers.wait([rid], 60.0):
        raise RuntimeError(f"{rid} was not answered")
    if not answers.found[rid].get("placed"):
        raise RuntimeError(f"{rid} was not placed: {answers.found[rid]}")
    return rid


def time_explain(settings: Settings, rid: str, runs: int, warm: bool) -> dict[str, Any]:
    """``runs`` explanations of ``rid``: the median and range of their
    seconds, and the median CPU seconds (less at the mercy of a shared
    machine's other work). Cold, each opens the data directory anew, as ``berth explain``
    does (the embedded log checks every record of a partition on its first
    read); warm, one app explains them all after an untimed first, as
    ``berth serve --api`` does (its log has read them already)."""
    seconds, cpu = [], []
    same = True
    with App(settings) as server:
        if warm:
            explain_request(server, rid)
        for _ in range(runs):
            with contextlib.ExitStack() as stack:
                app = server if warm else stack.enter_context(App(settings))
                before = time.process_time()
                with timed() as t:
                    story = explain_request(app, rid)
                cpu.append(time.process_time() - before)
            seconds.append(t[0])
            same = same and story["same"]
    return {
        "s": round(statistics.median(seconds), 3),
        "s_range": [round(min(seconds), 3), round(max(seconds), 3)],
        "cpu_s": round(statistics.median(cpu), 3),
        "same": same,
        "rebuilt_from": story["rebuilt_from"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--providers", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--checkpoint-every", type=int, default=50_000)
    parser.add_argument("--checkpoint-keep", type=int, default=DEFAULT_KEEP)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="keep (and reuse) the log here")
    parser.add_argument("--full-replay", action="store_true")
    args = parser.parse_args()
    tune_gc()
    options = {
        "records": args.records,
        "providers": args.providers,
        "requests": args.requests,
        "checkpoint_every": args.checkpoint_every,
        "checkpoint_keep": args.checkpoint_keep,
    }
    directory = args.dir or Path(tempfile.mkdtemp(prefix="berth-bench-explain-"))
    built = directory / BUILT
    try:
        # a log built before --checkpoint-keep was kept the default
        if built.exists() and _built_with(built) == options:
            placed = json.loads(built.read_text())["placed"]
            note(f"reusing the log in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            note(f"writing a {args.records}-record log into {directory} ...")
            with timed() as t:
                placed = build(directory, options)
            note(f"written in {t[0]:.0f} s")
            built.write_text(json.dumps({"options": options, "placed": placed}))
        figures = _figures(Settings(data_dir=directory), placed, args.runs, args.full_replay)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps({"explain": {**options, **figures}}))


def _built_with(built: Path) -> dict[str, int]:
    options: dict[str, int] = json.loads(built.read_text())["options"]
    return {"checkpoint_keep": DEFAULT_KEEP, **options}


def _figures(settings: Settings, placed: list[str], runs: int, full_replay: bool) -> dict[str, Any]:
    chosen = {"early": placed[0], "mid": placed[len(placed) // 2], "late": placed[-1]}
    figures: dict[str, Any] = {}
    for when, rid in chosen.items():
        figures[when] = {"request_id": rid}
        for how in ("cold", "warm"):
            note(f"explaining the {when} request {rid}, {how} ({runs} runs) ...")
            figures[when][how] = time_explain(settings, rid, runs, how == "warm")
        if full_replay:
            note(f"explaining {rid} by a full replay, cold ...")
            with Checkpoints.ignored():
                figures[when]["full_replay_cold"] = time_explain(settings, rid, 1, False)
    return figures


if __name__ == "__main__":
    main()
