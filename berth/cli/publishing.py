"""Putting things in the log: ``berth publish`` (events), ``request``
(placement requests and batches), ``delete-consumer`` and ``tick``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from berth.app import App
from berth.cli.common import Commands, backend_options, settings_from
from berth.client import DEFAULT_MAX_SKEW_MS
from ledger.log import LogError

if TYPE_CHECKING:
    from schemas.requests import BatchRequest, PlacementRequest


def add_commands(commands: Commands) -> None:
    commands.group("publish and request")
    publish = commands.add("publish", "publish JSON events, one per line", cmd_publish)
    backend_options(publish)
    publish.add_argument(
        "--max-skew-ms",
        type=int,
        default=int(os.environ.get("BERTH_MAX_SKEW_MS", DEFAULT_MAX_SKEW_MS)),
        help="refuse an event whose ts_ms is further ahead of this clock "
        f"(default {DEFAULT_MAX_SKEW_MS}, or BERTH_MAX_SKEW_MS)",
    )
    publish.add_argument("file", nargs="?", default="-", help="JSON lines (default: stdin)")

    request = commands.add(
        "request", "submit placement requests and batches, one JSON per line", cmd_request
    )
    backend_options(request)
    request.add_argument("file", nargs="?", default="-", help="JSON lines (default: stdin)")
    request.add_argument(
        "--wait",
        action="store_true",
        help="print each request's answer as the scheduler gives it; exit 1 if one "
        "was not placed, 3 if one is still unanswered after --timeout-s",
    )
    request.add_argument("--timeout-s", type=float, default=60.0, help="how long --wait waits (60)")

    delete = commands.add(
        "delete-consumer",
        "release everything a consumer holds, in every partition",
        cmd_delete_consumer,
    )
    backend_options(delete)
    delete.add_argument("consumer_id")

    tick = commands.add("tick", "advance every partition's clock to now", cmd_tick)
    backend_options(tick)


def cmd_publish(args: argparse.Namespace) -> int:
    from berth.client import Publisher, PublishError
    from schemas.codec import EventDecodeError

    settings = settings_from(args)
    stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    if args.max_skew_ms < 0:
        print("berth: --max-skew-ms must not be negative", file=sys.stderr)
        return 2
    with App(settings) as app, stream:
        publisher = Publisher(app.log, settings.topics, max_skew_ms=args.max_skew_ms)
        failures = 0
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                placed = publisher.publish([json.loads(line)])
            except (json.JSONDecodeError, EventDecodeError, PublishError, LogError) as error:
                print(f"line {number}: {error}", file=sys.stderr)
                failures += 1
                continue
            partition, offset = placed[0]
            print(json.dumps({"line": number, "partition": partition, "offset": offset}))
    return 1 if failures else 0


def cmd_request(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from berth.client import Answers, Publisher
    from schemas.ranked import expand
    from schemas.requests import request_from_json, request_key

    stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    with App(settings_from(args)) as app, stream:
        publisher = Publisher(app.log, app.settings.topics)
        # made before the first submission: an answer cannot come before it
        answers = Answers(app.log, app.settings.topics) if args.wait else None
        failures = 0
        submitted: list[str] = []
        partitions: set[int] = set()
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                request = request_from_json(line)
            except ValidationError as error:
                print(f"line {number}: {error.errors(include_url=False)}", file=sys.stderr)
                failures += 1
                continue
            except ValueError as error:
                print(f"line {number}: not JSON: {error}", file=sys.stderr)
                failures += 1
                continue
            foreign = another_projects_group(app, request)
            if foreign:
                print(f"line {number}: {foreign}; not submitted", file=sys.stderr)
                failures += 1
                continue
            partition, offset = publisher.submit([request])[0]
            submitted.append(request_key(request))
            partitions.add(partition)
            print(json.dumps({"line": number, "partition": partition, "offset": offset}))
        if answers is None:
            return 1 if failures else 0
        placed = True

        def show(answer: dict[str, Any]) -> None:
            nonlocal placed
            placed = placed and bool(answer["placed"])
            if "ranked" in answer:  # a person reads this: the candidates spelled out
                answer["candidates"] = expand(answer.pop("ranked"))
            print(json.dumps(answer), flush=True)

        unanswered = answers.wait(submitted, args.timeout_s, show, partitions=partitions)
    if unanswered:
        print(
            f"berth: no answer after {args.timeout_s:g} s to {', '.join(unanswered)} "
            "(is a scheduler running?)",
            file=sys.stderr,
        )
        return 3
    return 1 if failures or not placed else 0


def another_projects_group(app: App, request: PlacementRequest | BatchRequest) -> str:
    """Why a request may not join the server group it names, which belongs
    to another project ("": it may, or names none). As the API does, the
    edge refuses it rather than leave it to the scheduler's answer."""
    from consumers.server_groups import read_group
    from schemas.requests import BatchRequest

    members = request.members if isinstance(request, BatchRequest) else (request,)
    for member in members:
        if member.group_id is None:
            continue
        found = read_group(app.engine, member.group_id)
        if found is not None and not found.rule.seen_by(member.project_id):
            return (
                f"{member.request_id}: server group {member.group_id} is another project's, "
                f"not project {member.project_id}'s"
            )
    return ""


def cmd_delete_consumer(args: argparse.Namespace) -> int:
    from berth.client import Publisher
    from schemas.codec import EventDecodeError

    with App(settings_from(args), migrate=False) as app:
        try:
            placed = Publisher(app.log, app.settings.topics).release_consumer(args.consumer_id)
        except EventDecodeError as error:
            print(f"berth: {error}", file=sys.stderr)
            return 2
    appended = [{"partition": partition, "offset": offset} for partition, offset in placed]
    print(json.dumps({"consumer_id": args.consumer_id, "appended": appended}))
    return 0


def cmd_tick(args: argparse.Namespace) -> int:
    from berth.client import Publisher

    settings = settings_from(args)
    with App(settings) as app:
        Publisher(app.log, settings.topics).tick()
    return 0
