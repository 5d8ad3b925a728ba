"""``berth aggregate``: aggregates as first-class objects (create, set,
add, remove, show), through events. An aggregate's definition goes to
every partition; a member joins or leaves in its own partition."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

from berth.app import App
from berth.cli.common import Commands, backend_options, settings_from
from schemas.outcomes import Kind


def add_commands(commands: Commands) -> None:
    commands.group("aggregates")
    aggregate = commands.add(
        "aggregate", "create, set, add members to, remove members from, show an aggregate", cmd
    )
    sub = aggregate.add_subparsers(dest="aggregate_command", required=True)

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_)
        backend_options(p)
        p.add_argument("aggregate_id")
        if name != "show":
            p.add_argument(
                "--wait",
                action="store_true",
                help="print the writers' decisions; exit 1 unless each was applied",
            )
            p.add_argument("--timeout-s", type=float, default=30.0, help="how long --wait waits")
        return p

    command("create", "define a new aggregate with its metadata").add_argument(
        "metadata", nargs="*", metavar="KEY=VALUE", help="e.g. availability_zone=az1"
    )
    set_ = command("set", "change an aggregate's metadata: the keys given, and --unset ones")
    set_.add_argument("metadata", nargs="*", metavar="KEY=VALUE")
    set_.add_argument("--unset", action="append", default=[], metavar="KEY")
    command("add", "providers join the aggregate").add_argument("providers", nargs="+")
    command("remove", "providers leave the aggregate").add_argument("providers", nargs="+")
    command("show", "the aggregate's metadata and members, as the view holds them")


def cmd(args: argparse.Namespace) -> int:
    from consumers.snapshot_source import snapshot_from_view
    from projections.view.commits import read_settled

    with App(settings_from(args), migrate=False) as app:
        # an aggregate's decisions go out just before the view commits them:
        # one named right after them is found once the view has
        snapshot = read_settled(
            lambda: snapshot_from_view(app.engine, placements=False),
            lambda snapshot: args.aggregate_id in snapshot.aggregates,
            app.engine,
            app.log,
            app.settings.topics.events,
            app.settings.partitions,
        )
        known = snapshot.aggregates.get(args.aggregate_id)
        if args.aggregate_command == "show":
            if known is None:
                return _refuse(args, "no such aggregate")
            members = [p.provider_id for p in snapshot.providers if known.name in p.aggregates]
            shown = {"aggregate_id": known.name, "metadata": dict(known.metadata)}
            print(json.dumps({**shown, "members": members}))
            return 0
        try:
            events = _events(args, None if known is None else dict(known.metadata))
        except ValueError as error:
            return _refuse(args, str(error))
        return _publish(app, args, events)


def _events(args: argparse.Namespace, held: dict[str, str] | None) -> list[dict[str, Any]]:
    """The events the command appends (ValueError: why it appends none)."""
    from berth.client import wall_clock_ms

    aid = args.aggregate_id
    kind = args.aggregate_command
    if kind == "create" and held is not None:
        raise ValueError("exists already (berth aggregate set changes its metadata)")
    if kind != "create" and held is None:
        raise ValueError("no such aggregate (berth aggregate create defines one)")
    base = f"aggregate-{kind}-{aid}-{uuid.uuid4().hex[:12]}"
    if kind in ("add", "remove"):
        now = wall_clock_ms()
        type_ = "aggregate_member_added" if kind == "add" else "aggregate_member_removed"
        return [
            {
                "type": type_,
                "event_id": f"{base}-{pid}",
                "ts_ms": now,
                "partition_key": pid,
                "provider_id": pid,
                "aggregate_id": aid,
            }
            for pid in args.providers
        ]
    metadata = dict(held or {})
    for key in getattr(args, "unset", []):
        if key not in metadata:
            raise ValueError(f"--unset {key}: the aggregate has no such key")
        del metadata[key]
    for item in args.metadata:
        key, equals, value = item.partition("=")
        if not key or not equals:
            raise ValueError(f"metadata KEY=VALUE, not {item!r}")
        metadata[key] = value
    # one definition; the publisher appends a copy of it to every partition
    return [
        {"type": "aggregate_defined", "aggregate_id": aid, "metadata": metadata, "event_id": base}
    ]


def _publish(app: App, args: argparse.Namespace, events: list[dict[str, Any]]) -> int:
    from berth.client import Decisions, Publisher, PublishError
    from schemas.codec import EventDecodeError

    publisher = Publisher(app.log, app.settings.topics)
    decisions = Decisions(app.log, app.settings.topics) if args.wait else None
    try:
        if events[0]["type"] == "aggregate_defined":
            (defined,) = events
            placed = publisher.define_aggregate(
                defined["aggregate_id"], defined["metadata"], defined["event_id"]
            )
            ids = [f"{defined['event_id']}-{p}" for p, _ in placed]
        else:
            placed = publisher.publish(events)
            ids = [e["event_id"] for e in events]
    except (EventDecodeError, PublishError) as error:
        return _refuse(args, str(error))
    for event_id, (partition, offset) in zip(ids, placed, strict=True):
        print(json.dumps({"event_id": event_id, "partition": partition, "offset": offset}))
    if decisions is None:
        return 0
    missing = decisions.wait(ids, args.timeout_s, partitions={p for p, _ in placed})
    if missing:
        print(
            f"berth: no decision after {args.timeout_s:g} s (are the writers running?)",
            file=sys.stderr,
        )
        return 3
    applied = True
    for event_id in ids:
        decision = decisions.found[event_id][-1]  # expiries its clock released come first
        applied = applied and decision.kind == Kind.APPLIED
        print(json.dumps(decision.to_dict()))
    return 0 if applied else 1


def _refuse(args: argparse.Namespace, why: str) -> int:
    print(f"berth: aggregate {args.aggregate_id}: {why}", file=sys.stderr)
    return 2
