"""The CLI's commands against a remote Berth, through its HTTP API
(``--api URL``, the token from ``BERTH_API_TOKEN``): an operator drives it
without its data directory. Each prints what the local command prints with
``--json``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

import httpx

from berth.api.client import ApiClient, ApiProblem
from schemas.events import Event


def _client(args: argparse.Namespace) -> ApiClient:
    return ApiClient(args.api, token=os.environ.get("BERTH_API_TOKEN") or None)


def _remote(run: Callable[[ApiClient], int]) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        try:
            with _client(args) as berth:
                return run(berth)
        except ApiProblem as problem:
            print(f"berth: {args.api}: {problem}", file=sys.stderr)
            return 1 if problem.status == 404 else 2
        except httpx.HTTPError as error:
            print(f"berth: {args.api}: {error}", file=sys.stderr)
            return 2

    return command


def provider(args: argparse.Namespace, event: Event) -> int:
    """Publish a provider event; with ``--wait`` print the writer's decision
    (exit 1 unless applied, 3 when none came in time)."""

    def run(berth: ApiClient) -> int:
        reply = berth.publish([event], wait=args.timeout_s if args.wait else None)
        partition, offset = reply.appended[0]
        print(json.dumps({"event_id": event.event_id, "partition": partition, "offset": offset}))
        if not args.wait:
            return 0
        decided = (reply.decisions or {}).get(event.event_id, [])
        mine = [o for o in decided if o.subject == args.provider_id]
        if not mine:
            print(f"berth: no decision after {args.timeout_s:g} s", file=sys.stderr)
            return 3
        print(mine[0].model_dump_json(exclude_none=True))
        return 0 if mine[0].kind == "applied" else 1

    return _remote(run)(args)


def history(args: argparse.Namespace) -> int:
    def run(berth: ApiClient) -> int:
        print(berth.history(args.subject, records=not args.no_records).model_dump_json())
        return 0

    return _remote(run)(args)


def status(args: argparse.Namespace) -> int:
    def run(berth: ApiClient) -> int:
        found = berth.status(lag=args.lag)
        print(json.dumps(found))
        if args.max_behind is not None and found["behind"] > args.max_behind:
            behind = found["behind"]
            print(f"berth: a partition's view is {behind:,} records behind", file=sys.stderr)
            return 1
        return 0

    return _remote(run)(args)


def queue(args: argparse.Namespace) -> int:
    def run(berth: ApiClient) -> int:
        print(json.dumps({shape: d.model_dump() for shape, d in berth.queue().items()}))
        return 0

    return _remote(run)(args)


def group(args: argparse.Namespace) -> int:
    """``berth group`` through the API: what the local command prints."""

    def run(berth: ApiClient) -> int:
        kind = args.group_command
        if kind == "list":
            for summary in berth.groups().groups:
                if args.project is None or summary.project_id in (None, args.project):
                    print(summary.model_dump_json())
            return 0
        if kind == "show":
            print(berth.group(args.group_id).model_dump_json())
            return 0
        wait = args.timeout_s if args.wait else None
        if kind == "create":
            reply = berth.create_group(
                args.group_id,
                args.policy,
                args.max_server_per_host,
                wait=wait,
                project_id=args.project,
                user_id=args.user,
            )
        else:
            reply = berth.delete_group(args.group_id, wait=wait)
        partition, offset = reply.appended[0]
        print(json.dumps({"partition": partition, "offset": offset}))
        if wait is None:
            return 0
        decided = [o for outcomes in (reply.decisions or {}).values() for o in outcomes]
        if not decided:
            print(f"berth: no decision after {args.timeout_s:g} s", file=sys.stderr)
            return 3
        for outcome in decided:
            print(outcome.model_dump_json(exclude_none=True))
        return 0 if decided[-1].kind == "applied" else 1

    return _remote(run)(args)
