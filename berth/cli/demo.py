"""``berth demo``: a simulated cluster end to end on the embedded default."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

from berth.app import DEFAULT_PARTITIONS, App, Settings, tune_gc
from berth.cli.common import Commands, backend_options, progress, settings_from

DEMO_MARKER = ".berth-demo"
"""The file that marks a data directory as a demo's, which the next demo
may delete."""


def add_commands(commands: Commands) -> None:
    commands.group("demo")
    demo = commands.add("demo", "simulate a cluster end to end on the embedded default", cmd_demo)
    backend_options(demo, data_dir="berth-demo-data")
    demo.add_argument("--providers", type=int, default=200)
    demo.add_argument("--requests", type=int, default=10_000)
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="requests arrive as all-or-nothing batches of K, some with an address and a VNI",
    )
    demo.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def cmd_demo(args: argparse.Namespace) -> int:
    from berth.demo import Demo, DemoConfig, render, to_json

    data_dir = Path(args.data_dir)
    if data_dir.exists() and any(data_dir.iterdir()):
        if not (data_dir / DEMO_MARKER).exists():
            print(
                f"berth: {data_dir} is not empty and not a demo's; choose another --data-dir",
                file=sys.stderr,
            )
            return 2
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    (data_dir / DEMO_MARKER).touch()
    settings = settings_from(args)
    if args.partitions is None:
        settings = Settings(
            data_dir=settings.data_dir,
            log_url=settings.log_url,
            db_url=settings.db_url,
            partitions=DEFAULT_PARTITIONS,
        )
    cfg = DemoConfig(
        batch_size=args.batch_size,
        providers=args.providers,
        requests=args.requests,
        partitions=settings.partitions,
        seed=args.seed,
    )
    tune_gc()
    # the summary tells what became of the requests: one log line each would
    # bury the progress bar
    workers = logging.getLogger("consumers")
    level = workers.level
    workers.setLevel(logging.WARNING)
    try:
        with App(settings) as app, progress(cfg.requests, "requests") as bar:
            summary = Demo(app, cfg, progress=bar.update).run()
    finally:
        workers.setLevel(level)
    print(to_json(summary) if args.json else render(summary))
    return 0 if summary["overcommitted_providers"] == 0 else 1
