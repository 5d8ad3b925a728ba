"""Scheduling policies set at run time (``consumers/policies.py``):
``berth policy set|show|list|delete|use`` and ``berth config set
scheduler.scriptlet``, LXD's habit for the default policy's scriptlet."""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from berth.app import App
from berth.cli.common import Commands, backend_options, settings_from
from ledger.log import LogError


def add_commands(commands: Commands) -> None:
    commands.group("scheduling policies, set at run time")
    policy = commands.add("policy", "set, show, list, delete or assign scheduling policies", run)
    sub = policy.add_subparsers(dest="policy_command", required=True)
    set_ = sub.add_parser("set", help="set a policy from a TOML file (the configuration's tables)")
    set_.add_argument("name")
    set_.add_argument("--file", required=True, help="TOML: [scheduler], [filters], ...")
    show = sub.add_parser("show", help="a policy's version and tables")
    show.add_argument("name")
    list_ = sub.add_parser("list", help="every policy and which project uses which")
    delete = sub.add_parser("delete", help="delete a policy (not the default)")
    delete.add_argument("name")
    use = sub.add_parser(
        "use", help="the policy a project's requests, or an aggregate's (its zone's), are placed by"
    )
    use.add_argument("name", help="a policy name, or default")
    whose = use.add_mutually_exclusive_group(required=True)
    whose.add_argument("--project")
    whose.add_argument(
        "--aggregate", help="an aggregate: requests for its availability zone (oVirt's cluster)"
    )
    for each in (set_, show, list_, delete, use):
        backend_options(each)
        each.add_argument("--json", action="store_true", help="print JSON")
    config = commands.add("config", "set one setting of the default policy (LXD's habit)", run)
    config_sub = config.add_subparsers(dest="config_command", required=True)
    config_set = config_sub.add_parser("set", help="scheduler.scriptlet SOURCE")
    config_set.add_argument("key", choices=["scheduler.scriptlet"])
    config_set.add_argument("value", help="the scriptlet's Starlark source")
    backend_options(config_set)


def run(args: argparse.Namespace) -> int:
    from consumers.policies import PolicyError

    with App(settings_from(args)) as app:
        try:
            return _run(app, args)
        except (PolicyError, LogError, OSError, tomllib.TOMLDecodeError) as error:
            print(f"berth: {error}", file=sys.stderr)
            return 2


def _run(app: App, args: argparse.Namespace) -> int:
    from consumers.policies import DEFAULT, PolicyBook, PolicyError, publish_policy
    from scheduling.config import SchedulerConfig

    topics = app.settings.topics
    book = PolicyBook(app.log, topics, SchedulerConfig.default())
    command = getattr(args, "policy_command", None) or "config"
    if command == "set":
        policy = tomllib.loads(Path(args.file).read_text(encoding="utf-8"))
        record = {"type": "policy_set", "name": args.name, "policy": policy}
        return _appended(publish_policy(app.log, topics, record), args)
    if command == "delete":
        if args.name not in book.policies:
            raise PolicyError(f"no policy {args.name!r}")
        record = {"type": "policy_deleted", "name": args.name}
        return _appended(publish_policy(app.log, topics, record), args)
    if command == "use":
        if args.name != DEFAULT and args.name not in book.policies:
            raise PolicyError(f"no policy {args.name!r}: set it first")
        name = None if args.name == DEFAULT else args.name
        whose = {"project_id": args.project} if args.project else {"aggregate_id": args.aggregate}
        record = {"type": "policy_assigned", **whose, "name": name}
        return _appended(publish_policy(app.log, topics, record), args)
    if command == "show":
        found = book.policies.get(args.name)
        if found is None:
            raise PolicyError(f"no policy {args.name!r}")
        shown = {"name": found.name, "version": found.version, "policy": dict(found.mapping)}
        print(json.dumps(shown, indent=None if args.json else 2))
        return 0
    if command == "list":
        listing: dict[str, Any] = {
            "policies": {name: p.version for name, p in sorted(book.policies.items())},
            "projects": dict(sorted(book.projects.items())),
            "aggregates": dict(sorted(book.aggregates.items())),
        }
        print(json.dumps(listing, indent=None if args.json else 2))
        return 0
    # berth config set scheduler.scriptlet SOURCE: a new version of default
    current = dict(book.policies[DEFAULT].mapping) if DEFAULT in book.policies else {}
    scriptlet = dict(current.get("scriptlet", {}))
    scriptlet.pop("path", None)
    scriptlet["source"] = args.value
    record = {"type": "policy_set", "name": DEFAULT, "policy": {**current, "scriptlet": scriptlet}}
    return _appended(publish_policy(app.log, topics, record), args)


def _appended(version: int, _args: argparse.Namespace) -> int:
    print(json.dumps({"version": version}))
    return 0
