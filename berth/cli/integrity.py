"""The embedded log's integrity and recovering it: ``berth log verify``
(every record, the metadata, the view against the log), ``log truncate``
(cut a damaged partition on purpose), ``backup`` and ``restore``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from pathlib import Path
from typing import Literal

from berth.cli.common import Commands, backend_options, progress, settings_from
from ledger.log import LogError


def add_commands(commands: Commands) -> None:
    commands.group("the log: verify, truncate, backup, restore")
    log = commands.add("log", "scrub the embedded log, or cut a damaged partition", cmd_log)
    log_sub = log.add_subparsers(dest="log_command", required=True)
    verify = log_sub.add_parser(
        "verify", help="check every record, the metadata and the view against the log"
    )
    backend_options(verify)
    verify.add_argument("--partition", type=int, default=None, help="only this partition")
    verify.add_argument(
        "--recompute",
        default="",
        help="events partitions whose decisions are recomputed and compared: "
        "N[,N...], all or none (default: one, a different one each day)",
    )
    verify.add_argument("--json", action="store_true", help="the findings as one JSON object")
    truncate = log_sub.add_parser(
        "truncate", help="cut a partition at an offset on purpose, then rebuild the view"
    )
    backend_options(truncate)
    truncate.add_argument("--topic", default="berth.events")
    truncate.add_argument("--partition", type=int, required=True)
    truncate.add_argument(
        "--offset", type=int, required=True, help="the first record to cut (the damaged one)"
    )
    truncate.add_argument(
        "--i-understand",
        action="store_true",
        help="that every record from --offset on is removed from the log (kept aside)",
    )
    backup = commands.add(
        "backup", "a consistent copy of the log and the view, while berth serve runs", cmd_backup
    )
    backend_options(backup)
    backup.add_argument("dest", help="a new or empty directory")
    restore = commands.add(
        "restore", "check a backup, then make it the data directory (--data-dir)", cmd_restore
    )
    backend_options(restore)
    restore.add_argument("source", help="a directory berth backup wrote")


def cmd_log(args: argparse.Namespace) -> int:
    from berth.recovery import RecoveryError

    try:
        if args.log_command == "verify":
            return _log_verify(args)
        return _log_truncate(args)
    except (RecoveryError, ValueError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return 2


def _recompute(spec: str) -> list[int] | Literal["all"] | None:
    if spec in ("", "all"):
        return None if spec == "" else "all"
    if spec == "none":
        return []
    return [int(p) for p in spec.split(",")]


def _log_verify(args: argparse.Namespace) -> int:
    from berth.client import wall_clock_ms
    from berth.scrub import log_bytes, render, scrub

    settings = settings_from(args)
    if settings.log_url:
        raise ValueError("berth log verify checks the embedded log's files; not Kafka's")
    with progress(log_bytes(settings), "verify", not args.json, unit="B") as bar:
        result = scrub(
            settings,
            partition=args.partition,
            recompute=_recompute(args.recompute),
            progress=bar.update,
            today_ms=wall_clock_ms(),
        )
    print(json.dumps(result.to_dict()) if args.json else render(result))
    return 0 if result.sound else 1


def _log_truncate(args: argparse.Namespace) -> int:
    from berth.client import wall_clock_ms
    from berth.recovery import cut
    from berth.replay import replay

    settings = settings_from(args)
    if not args.i_understand:
        print(
            f"berth: this removes every record of {args.topic} partition {args.partition} "
            f"from offset {args.offset} on (and their outcomes), keeping the bytes aside, "
            "and rebuilds the view; run again with --i-understand to do it",
            file=sys.stderr,
        )
        return 2
    for done in cut(settings, args.topic, args.partition, args.offset, wall_clock_ms()):
        print(json.dumps({"cut": dataclasses.asdict(done)}))
    result = replay(settings, verify=True, jobs=1)
    print(
        json.dumps(
            {
                "rebuilt": result.view_url,
                "records": result.records,
                "verified": result.divergence is None,
            }
        )
    )
    return 0 if result.divergence is None else 1


def cmd_backup(args: argparse.Namespace) -> int:
    from berth.client import wall_clock_ms
    from berth.recovery import RecoveryError, backup

    try:
        manifest = backup(settings_from(args), Path(args.dest), wall_clock_ms())
    except (RecoveryError, LogError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return 1
    summary = {k: v for k, v in manifest.items() if k != "files"}
    print(json.dumps({**summary, "files": len(manifest["files"]), "dest": args.dest}))
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from berth.recovery import RecoveryError, restore, verify_backup
    from berth.scrub import render

    settings = settings_from(args)
    try:
        checked = restore(Path(args.source), settings.data_dir)
    except RecoveryError as error:
        with contextlib.suppress(RecoveryError):
            print(render(verify_backup(Path(args.source))), file=sys.stderr)
        print(f"berth: {error}", file=sys.stderr)
        return 1
    print(render(checked))
    print(f"restored into {settings.data_dir}: start berth serve there and the writers catch up")
    return 0
