"""The view's upkeep: ``berth replay`` (rebuild it from the log, verify
every decision, or the view as of a time), ``prune`` (retention for its
outcome rows), ``migrate`` (its schema) and ``checkpoint`` (its writers'
states saved, for ``explain --request`` to start from)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from sqlalchemy.exc import DBAPIError

from berth.app import App, Settings, tune_gc
from berth.cli.common import (
    Commands,
    backend_options,
    checkpoint_options,
    no_view,
    progress,
    settings_from,
)
from berth.replay import default_jobs
from ledger.log import LogError


def add_commands(commands: Commands) -> None:
    commands.group("the view: replay, prune, migrate, checkpoint")
    replay = commands.add("replay", "rebuild the view from offset 0", cmd_replay)
    backend_options(replay)
    replay.add_argument("--verify", action="store_true", help="compare every decision")
    replay.add_argument(
        "--until-ms",
        type=int,
        default=None,
        help="the view as it was when each partition's clock reached this time "
        "(ms since the epoch), into a database of its own (--db)",
    )
    replay.add_argument(
        "--jobs",
        type=int,
        default=default_jobs(),
        help="processes replaying partitions in parallel (default: one per core)",
    )

    prune = commands.add(
        "prune",
        "delete the view's outcome rows older than a time (the log keeps them)",
        cmd_prune,
    )
    backend_options(prune)
    age = prune.add_mutually_exclusive_group(required=True)
    age.add_argument("--before-ms", type=int, help="decided at a partition clock before this")
    age.add_argument("--older-than-days", type=float, help="decided more than D days ago")
    prune.add_argument("--dry-run", action="store_true", help="count them, delete nothing")
    prune.add_argument("--json", action="store_true")

    migrate = commands.add("migrate", "create or upgrade the view's schema", cmd_migrate)
    backend_options(migrate)

    checkpoint = commands.add(
        "checkpoint",
        "save the view's writer states now, for explain --request to start from "
        "(see docs/operations.md)",
        cmd_checkpoint,
    )
    backend_options(checkpoint)
    checkpoint_options(checkpoint, every=False)
    checkpoint.add_argument("--list", action="store_true", help="list them, take none")


def cmd_checkpoint(args: argparse.Namespace) -> int:
    from berth.checkpoints import CheckpointError, Checkpoints

    checkpoints = Checkpoints(settings_from(args), keep=args.checkpoint_keep)
    if args.list:
        print(json.dumps([c.to_dict() for c in checkpoints.all()]))
        return 0
    try:
        taken = checkpoints.take()
    except CheckpointError as error:
        print(f"berth: {error}", file=sys.stderr)
        return 2
    print(json.dumps({"taken": taken.to_dict() if taken else None, "kept": len(checkpoints.all())}))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from berth.replay import ReplayStopped, replay

    settings = settings_from(args)
    tune_gc()
    started = time.perf_counter()
    # sized by the replay's processes as they index their partitions: counting
    # the records here first would read the whole log once more, on one core
    with progress(0, "replay") as bar:

        def sized(records: int) -> None:
            bar.total = (bar.total or 0) + records
            bar.refresh()

        try:
            result = replay(
                settings,
                verify=args.verify,
                progress=bar.update,
                jobs=args.jobs,
                sized=sized,
                until_ms=args.until_ms,
            )
        except ValueError as error:
            print(f"berth: {error}", file=sys.stderr)
            return 2
        except LogError as error:  # the log held by a running berth serve, say
            print(f"berth: {error}: stop the processes using it, then replay", file=sys.stderr)
            return 2
        except ReplayStopped as stopped:
            print(f"berth: replay stopped, the view left as it was: {stopped}", file=sys.stderr)
            return 1
    divergence = None if result.divergence is None else str(result.divergence)
    checked: dict[str, int] = {}
    if args.verify and divergence is None:
        divergence = _verify_policies(settings, checked)
    elapsed = time.perf_counter() - started
    print(
        json.dumps(
            {
                "records": result.records,
                "outcomes": result.outcomes,
                "elapsed_s": round(elapsed, 3),
                "view": result.view_url,
                "verified": args.verify and divergence is None,
                "verified_outcomes": result.verified,
                **checked,
                **({"until_ms": args.until_ms} if args.until_ms is not None else {}),
            }
        )
    )
    if divergence is not None:
        print(f"berth: first divergence: {divergence}", file=sys.stderr)
        return 1
    return 0


def _verify_policies(settings: Settings, checked: dict[str, int]) -> str | None:
    """The policies' part of ``--verify`` (:func:`berth.audit.verify_policies`)."""
    from berth.app import open_log
    from berth.audit import verify_policies

    log = open_log(settings, read_only=True)
    try:
        policies, answers, divergence = verify_policies(log, settings.topics)
    finally:
        log.close()
    checked.update(verified_policies=policies, verified_answers=answers)
    return divergence


def cmd_prune(args: argparse.Namespace) -> int:
    from berth.client import wall_clock_ms
    from berth.prune import prune_outcomes

    if args.older_than_days is not None and args.older_than_days < 0:
        print("berth: --older-than-days must not be negative", file=sys.stderr)
        return 2
    before_ms = (
        args.before_ms
        if args.before_ms is not None
        else wall_clock_ms() - int(args.older_than_days * 86_400_000)
    )
    with App(settings_from(args), migrate=False) as app:
        try:
            pruned = prune_outcomes(app.write_engine, before_ms, dry_run=args.dry_run)
        except DBAPIError as error:
            return no_view(error)
    rows = sum(p.rows for p in pruned)
    if args.json:
        print(
            json.dumps(
                {
                    "before_ms": before_ms,
                    "dry_run": args.dry_run,
                    "rows": rows,
                    "partitions": [dataclasses.asdict(p) for p in pruned],
                }
            )
        )
    else:
        verb = "would delete" if args.dry_run else "deleted"
        print(f"{verb} {rows:,} outcome rows decided before {before_ms}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from projections.view.engine import make_engine
    from projections.view.migrate import upgrade

    settings = settings_from(args)
    if not settings.db_url:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.view_url)
    upgrade(engine)
    engine.dispose()
    print(f"view schema is current: {settings.view_url}")
    return 0
