"""``berth group``: server groups as records of the log (create, delete,
show, list). A group lives in the partition of its id, whose writer decides
its members: ``--wait`` prints that writer's decision."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import get_args

from berth.app import App
from berth.cli.common import Commands, backend_options, remote_option, settings_from
from schemas.events import GroupPolicyName
from schemas.outcomes import Kind


def add_commands(commands: Commands) -> None:
    commands.group("server groups")
    group = commands.add("group", "create, delete, show, list server groups", cmd)
    sub = group.add_subparsers(dest="group_command", required=True)

    def command(name: str, help_: str, named: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_)
        backend_options(p)
        remote_option(p)
        if named:
            p.add_argument("group_id")
        if name in ("create", "delete"):
            p.add_argument(
                "--wait",
                action="store_true",
                help="print the group writer's decision; exit 1 unless it was applied",
            )
            p.add_argument("--timeout-s", type=float, default=30.0, help="how long --wait waits")
        return p

    create = command("create", "a server group with its policy")
    create.add_argument("--policy", required=True, choices=get_args(GroupPolicyName))
    create.add_argument(
        "--max-server-per-host",
        type=int,
        default=None,
        help="anti-affinity: members allowed on one provider (default 1)",
    )
    create.add_argument(
        "--project",
        default=None,
        help="the project that owns it: only its requests may join "
        "(default: none, a group any project's requests may join)",
    )
    create.add_argument("--user", default=None, help="the user who made it (with --project)")
    command("delete", "delete a server group; its memberships are released")
    command("show", "a group's policy, rule, owner and members, as the view holds them")
    listing = command("list", "every server group", named=False)
    listing.add_argument("--project", default=None, help="only the groups this project may join")


def cmd(args: argparse.Namespace) -> int:
    from consumers.server_groups import read_group_settled, read_rules

    if args.api is not None:
        from berth.api import remote

        return remote.group(args)
    with App(settings_from(args), migrate=False) as app:
        kind = args.group_command
        if kind == "list":
            for rule in read_rules(app.engine).values():
                if rule.seen_by(args.project):
                    print(json.dumps(rule.to_dict()))
            return 0
        topic, partitions = app.settings.topics.events, app.settings.partitions
        found = read_group_settled(app.engine, args.group_id, app.log, topic, partitions)
        if kind == "show":
            if found is None:
                return _refuse(args, "no such group", 1)
            print(json.dumps(found.to_dict()))
            return 0
        if kind == "delete" and found is None:
            return _refuse(args, "no such group (berth group list)")
        return _publish(app, args)


def _publish(app: App, args: argparse.Namespace) -> int:
    from berth.client import Decisions, Publisher, PublishError, wall_clock_ms
    from schemas.codec import EventDecodeError, validate_event

    gid = args.group_id
    event_id = f"group-{args.group_command}-{gid}-{uuid.uuid4().hex[:12]}"
    body = {"event_id": event_id, "ts_ms": wall_clock_ms(), "partition_key": gid, "group_id": gid}
    if args.group_command == "create":
        body |= {"type": "server_group_created", "policy": args.policy}
        if args.max_server_per_host is not None:
            body["max_server_per_host"] = args.max_server_per_host
        if args.project is not None:
            body["project_id"] = args.project
        if args.user is not None:
            body["user_id"] = args.user
    else:
        body["type"] = "server_group_deleted"
    decisions = Decisions(app.log, app.settings.topics) if args.wait else None
    try:
        event = validate_event(body)
        ((partition, offset),) = Publisher(app.log, app.settings.topics).publish([event])
    except (EventDecodeError, PublishError, ValueError) as error:
        return _refuse(args, str(error))
    print(json.dumps({"event_id": event_id, "partition": partition, "offset": offset}))
    if decisions is None:
        return 0
    if decisions.wait([event_id], args.timeout_s, partitions={partition}):
        print(
            f"berth: no decision after {args.timeout_s:g} s (are the writers running?)",
            file=sys.stderr,
        )
        return 3
    decided = decisions.found[event_id]
    for outcome in decided:  # a deletion's released memberships, then the group's decision
        print(json.dumps(outcome.to_dict()))
    return 0 if decided[-1].kind == Kind.APPLIED else 1


def _refuse(args: argparse.Namespace, why: str, code: int = 2) -> int:
    print(f"berth: group {args.group_id}: {why}", file=sys.stderr)
    return code
