"""The read side: ``berth status``, ``queue``, ``dead-letters``,
``history``, ``explain``, ``headroom`` and ``metrics``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import sys
import threading
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DBAPIError

from berth.app import App
from berth.cli.common import (
    Commands,
    backend_options,
    no_view,
    parse_address,
    remote_option,
    settings_from,
    stop_on_sigterm,
)

if TYPE_CHECKING:
    from scheduling.config import SchedulerConfig
    from scheduling.engine import Engine
    from scheduling.model import Request
    from schemas.events import SriovPortSpec
    from schemas.requests import PlacementRequest


def add_commands(commands: Commands) -> None:
    commands.group("read side")
    status = commands.add(
        "status",
        "each partition's log end, what the view applied and its clock; "
        "capacity and usage; dead letters",
        cmd_status,
    )
    backend_options(status)
    remote_option(status)
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument(
        "--lag",
        action="store_true",
        help="each partition's progress only, without scanning the view's tables "
        "(for a frequent health check)",
    )
    status.add_argument(
        "--max-behind",
        type=int,
        default=None,
        help="exit 1 if a partition's view is more than N records behind its log",
    )

    queue = commands.add(
        "queue", "queue depth by resource shape: instances and batches waiting", cmd_queue
    )
    backend_options(queue)
    remote_option(queue)
    queue.add_argument("--json", action="store_true", help="print one JSON object")

    dead = commands.add(
        "dead-letters",
        "the records that did not decode, with the reason for each",
        cmd_dead_letters,
    )
    backend_options(dead)
    dead.add_argument("--partition", type=int, default=None, help="one partition (all)")
    dead.add_argument("--limit", type=int, default=20, help="the last N (default 20)")
    dead.add_argument("--json", action="store_true", help="print one JSON object per line")

    history = commands.add(
        "history",
        "every decision about a reservation, consumer, transaction, provider or pool, "
        "with the record each answered",
        cmd_history,
    )
    backend_options(history)
    remote_option(history)
    history.add_argument("subject", help="a reservation, consumer, transaction, provider or pool")
    history.add_argument(
        "--no-records",
        action="store_true",
        help="the view alone: do not read each decision's record from the log",
    )
    history.add_argument("--json", action="store_true", help="print it as one JSON object")

    explain = commands.add("explain", "rank providers for a request and say why not", cmd_explain)
    shape_options(explain, shape_required=False)
    explain.add_argument("--instances", type=int, default=1)
    explain.add_argument(
        "--request",
        default=None,
        metavar="ID",
        help="a past request, from the log alone: the view as its answer saw it, "
        "the policy that placed it, and whether the pick is the same again",
    )
    explain.add_argument(
        "--provider", default=None, help="with --request: why this provider was not chosen"
    )

    headroom = commands.add(
        "headroom", "how many more instances of a shape fit, and where", cmd_headroom
    )
    shape_options(headroom)

    metrics = commands.add(
        "metrics", "serve the log's and the view's state as Prometheus metrics", cmd_metrics
    )
    backend_options(metrics)
    metrics.add_argument(
        "--listen",
        default="127.0.0.1:9480",
        help="HOST:PORT to serve /metrics on (127.0.0.1:9480; port 0 picks a free one)",
    )
    metrics.add_argument(
        "--lag",
        action="store_true",
        help="each partition's progress only, without scanning the view's tables",
    )
    metrics.add_argument(
        "--once", action="store_true", help="print the metrics once to stdout and exit"
    )
    metrics.add_argument(
        "--headroom",
        action="append",
        default=[],
        metavar="SHAPE",
        help="also measure how many more instances of SHAPE (e.g. VCPU=4,MEMORY_MB=8192) "
        "fit; may be given several times",
    )
    metrics.add_argument(
        "--config", default=None, help="scheduler TOML whose filters measure the headroom"
    )


def shape_options(p: argparse.ArgumentParser, shape_required: bool = True) -> None:
    """A request's shape, for explain and headroom."""
    backend_options(p)
    p.add_argument("--resources", required=shape_required, help="e.g. VCPU=4,MEMORY_MB=8192")
    p.add_argument("--availability-zone", default=None)
    p.add_argument("--required-trait", action="append", default=[])
    p.add_argument("--forbidden-trait", action="append", default=[])
    p.add_argument("--project", default="", help="the project asking (for the tenancy filters)")
    p.add_argument("--flavor", default="", help="the flavor's name (AggregateTypeAffinity)")
    p.add_argument(
        "--extra-spec", action="append", default=[], metavar="KEY=VALUE", help="repeatable"
    )
    p.add_argument(
        "--image-property", action="append", default=[], metavar="KEY=VALUE", help="repeatable"
    )
    p.add_argument("--same-host", action="append", default=[], metavar="INSTANCE")
    p.add_argument("--different-host", action="append", default=[], metavar="INSTANCE")
    p.add_argument("--build-near-host-ip", default=None, metavar="IP")
    p.add_argument("--cidr", default=None, help="with --build-near-host-ip (default /24)")
    p.add_argument("--query", default=None, help="a JsonFilter query, as JSON")
    p.add_argument(
        "--sriov-port",
        action="append",
        default=[],
        metavar="PHYSNET[:VNIC_TYPE]",
        help="an SR-IOV port on that physical network (vnic_type direct by default); repeatable",
    )
    p.add_argument(
        "--move-from",
        default=None,
        metavar="PROVIDER",
        help="a move (reason relocation) off this provider (CrossCellWeigher)",
    )
    p.add_argument(
        "--group", default=None, metavar="GROUP", help="a server group: its policy and members"
    )
    p.add_argument("--config", default=None, help="scheduler TOML (default: built in)")
    p.add_argument("--json", action="store_true")


def cmd_status(args: argparse.Namespace) -> int:
    from berth.status import read_status, render

    if args.api is not None:
        from berth.api import remote

        return remote.status(args)
    with App(settings_from(args), migrate=False) as app:
        try:
            status = read_status(
                app.log,
                app.engine,
                app.settings.topics,
                app.settings.partitions,
                totals=not args.lag,
            )
        except DBAPIError as error:
            return no_view(error)
    print(json.dumps(status.to_dict()) if args.json else render(status))
    if status.damaged or status.ahead:
        print(
            "berth: the log cannot be trusted as it is: berth log verify says what is "
            "wrong; docs/recovery.md says how to recover",
            file=sys.stderr,
        )
        return 1
    if args.max_behind is not None and status.behind > args.max_behind:
        print(
            f"berth: a partition's view is {status.behind:,} records behind its log "
            f"(more than {args.max_behind:,})",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_queue(args: argparse.Namespace) -> int:
    from consumers.queue_projector import QueueProjector, read_depth

    if args.api is not None:
        from berth.api import remote

        return remote.queue(args)
    with App(settings_from(args)) as app:
        QueueProjector(app.log, app.settings.topics, app.engine).catch_up()
        depth = read_depth(app.engine)
    if args.json:
        print(json.dumps(depth, sort_keys=True))
    elif not depth:
        print("no batch is waiting")
    else:
        for shape, counts in depth.items():
            print(f"{counts['instances']:>8} instances in {counts['batches']:>5} batches  {shape}")
    return 0


def cmd_dead_letters(args: argparse.Namespace) -> int:
    from berth.status import read_dead_letters

    with App(settings_from(args), migrate=False) as app:
        try:
            rows = read_dead_letters(app.engine, args.limit, args.partition)
        except DBAPIError as error:
            return no_view(error)
    for row in rows:
        if args.json:
            print(json.dumps(dataclasses.asdict(row)))
        else:
            value = row.value if len(row.value) <= 200 else row.value[:200] + "..."
            print(f"partition {row.partition} offset {row.offset}: {row.reason}\n  {value}")
    if not rows and not args.json:
        print("no dead letters")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from berth.history import read_history_settled, render

    if args.api is not None:
        from berth.api import remote

        return remote.history(args)
    with App(settings_from(args), migrate=False) as app:
        try:
            # asked right after an answer, it waits for the view to commit it
            found = read_history_settled(
                app.engine,
                args.subject,
                app.log,
                app.settings.topics.events,
                app.settings.partitions,
                records=not args.no_records,
            )
        except DBAPIError as error:
            return no_view(error)
    if not found.found:
        print(f"berth: the view holds nothing about {args.subject!r}", file=sys.stderr)
        return 1
    print(json.dumps(found.to_dict()) if args.json else render(found))
    return 0


def _shape(args: argparse.Namespace, instances: int = 1) -> tuple[SchedulerConfig, Request]:
    """The scheduler configuration and the request that ``shape_options`` describe
    (:class:`ConfigError` or :class:`ValueError` when they cannot be read)."""
    from pydantic import ValidationError

    from consumers.scheduler import engine_request
    from scheduling.config import SchedulerConfig

    config = SchedulerConfig.load(args.config) if args.config else SchedulerConfig.default()
    # the request's own checks (an address, a query, a cidr with its address)
    try:
        asked = _placement_request(args)
    except ValidationError as error:
        raise ValueError(
            "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}"
                for e in error.errors(include_url=False)
            )
        ) from None
    request: Request = engine_request(asked, instances, frozenset())
    if not args.project:
        request = dataclasses.replace(request, project_id="")
    return config, request


def _placement_request(args: argparse.Namespace) -> PlacementRequest:
    """The request ``shape_options`` describe, as a service would submit it now."""
    from berth.client import wall_clock_ms
    from consumers.batches import parse_shape
    from schemas.requests import PlacementRequest

    return PlacementRequest(
        request_id=args.command,
        ts_ms=wall_clock_ms(),
        project_id=args.project or "-",
        resources=parse_shape(args.resources),
        flavor_name=args.flavor,
        extra_specs=dict(_pairs(args.extra_spec, "--extra-spec")),
        image_properties=dict(_pairs(args.image_property, "--image-property")),
        availability_zone=args.availability_zone,
        required_traits=frozenset(args.required_trait),
        forbidden_traits=frozenset(args.forbidden_trait),
        same_host=frozenset(args.same_host),
        different_host=frozenset(args.different_host),
        build_near_host_ip=args.build_near_host_ip,
        cidr=args.cidr,
        query=args.query,
        sriov_ports=tuple(_port(text) for text in args.sriov_port),
        reason="relocation" if args.move_from else "new",
        source_provider=args.move_from,
    )


def _port(text: str) -> SriovPortSpec:
    """``--sriov-port PHYSNET[:VNIC_TYPE]``."""
    from schemas.events import SriovPortSpec

    network, _, vnic = text.partition(":")
    return SriovPortSpec.model_validate(
        {"physical_network": network, "vnic_type": vnic or "direct"}
    )


def _in_group(app: App, args: argparse.Namespace, request: Request) -> Request:
    """``request`` in the server group ``--group`` names, with its policy and
    rule from the view (ValueError when the view has no such group)."""
    if args.group is None:
        return request
    from consumers.server_groups import read_rules

    rule = read_rules(app.engine).get(args.group)
    if rule is None:
        raise ValueError(f"--group {args.group}: no such server group (berth group list)")
    return dataclasses.replace(
        request,
        group_id=rule.group_id,
        group_policy=rule.policy,
        max_server_per_host=rule.max_server_per_host,
    )


def _pairs(items: list[str], what: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        key, equals, value = item.partition("=")
        if not key or not equals:
            raise ValueError(f"{what} KEY=VALUE, not {item!r}")
        pairs.append((key, value))
    return pairs


def _policy_engine(app: App, config: SchedulerConfig) -> Engine:
    """The default policy's engine: the one set at run time (berth policy
    set default), or ``config``'s until there is one."""
    from consumers.policies import PolicyBook

    return PolicyBook(app.log, app.settings.topics, config).default().engine


def cmd_explain(args: argparse.Namespace) -> int:
    from consumers.snapshot_source import snapshot_from_view
    from scheduling.config import ConfigError

    if args.request is not None:
        return _explain_past(args)
    if args.resources is None or args.provider is not None:
        print("berth: explain needs --resources (or --request ID [--provider X])", file=sys.stderr)
        return 2
    try:
        config, request = _shape(args, args.instances)
    except (ConfigError, ValueError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return 2
    with App(settings_from(args)) as app:
        engine = _policy_engine(app, config)
        try:
            request = _in_group(app, args, request)
        except ValueError as error:
            print(f"berth: {error}", file=sys.stderr)
            return 2
        placement = engine.place(snapshot_from_view(app.engine), request, explain=True)
    trace = placement.trace
    story = trace.lines() if trace else []
    if args.json:
        print(
            json.dumps(
                {
                    "placed": placement.placed,
                    "providers": list(placement.providers),
                    "reason": placement.reason,
                    "counts": dict(trace.counts) if trace else {},
                    "eliminations": [
                        {"provider_id": e.provider_id, "filter": e.filter, "reason": e.reason}
                        for e in (trace.eliminations if trace else ())
                    ],
                }
            )
        )
    else:
        verdict = ", ".join(placement.providers) if placement.placed else placement.reason
        print("\n".join([f"choice: {verdict}", *story]))
    return 0 if placement.placed else 1


def _explain_past(args: argparse.Namespace) -> int:
    from berth.audit import AuditError, explain_request
    from scheduling.config import ConfigError, SchedulerConfig

    try:
        configured = SchedulerConfig.load(args.config) if args.config else None
        with App(settings_from(args)) as app:
            story = explain_request(app, args.request, args.provider, configured)
    except (AuditError, ConfigError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(story))
    else:
        print("\n".join(_past_lines(story)))
    return 0 if story["same"] else 3


def _rebuilt_from(rebuilt: dict[str, Any]) -> str:
    start = rebuilt["checkpoint"]
    where = f"checkpoint {start}" if start else "offset 0 (no checkpoint before it)"
    return f" (from {where}, {rebuilt['replayed']} records replayed)"


def _past_lines(story: dict[str, Any]) -> list[str]:
    verdict = ", ".join(story["recorded"]) if story["placed"] else f"failed: {story['reason']}"
    again = ", ".join(story["recomputed"]) or "nothing"
    lines = [
        f"request {story['request_id']}: {verdict} (attempts: {story['attempts']})",
        f"policy {story['policy']}"
        + ("" if story["policy_in_log"] else " (the scheduler's file, not in the log)"),
        "view as of offsets "
        + ", ".join(f"{p}:{o}" for p, o in story["offsets"].items())
        + _rebuilt_from(story["rebuilt_from"]),
        f"placed again on that view: {again} ({'same' if story['same'] else 'DIFFERENT'})",
        f"{story['considered']} providers considered; "
        + ", ".join(f"{name} removed {n}" for name, n in story["removed"].items() if n),
    ]
    group = story.get("server_group")
    if group is not None:
        members = ", ".join(f"{pid} {n}" for pid, n in group["hosts"].items()) or "none"
        lines.insert(
            3,
            f"server group {group['group_id']} ({group.get('policy', 'not in the view')}): "
            f"members then on {members}"
            + (f"; refused: {group['refused']}" if group["refused"] else ""),
        )
    for n, c in enumerate(story["candidates"], start=1):
        parts = ", ".join(f"{w} {v:.3f} x {m:g}" for w, (v, m) in c["weighers"].items())
        lines.append(f"  {n}. {c['provider_id']} score {c['score']:.3f}: {parts}")
    shown = story.get("provider")
    if shown is not None:
        pid = shown["provider_id"]
        if "filtered_by" in shown:
            lines.append(f"{pid}: removed by {shown['filtered_by']}: {shown['why']}")
        elif "rank" in shown:
            parts = ", ".join(f"{w} {v:.3f} x {m:g}" for w, (v, m) in shown["weighers"].items())
            lines.append(f"{pid}: ranked {shown['rank']}, score {shown['score']:.3f}: {parts}")
        else:
            lines.append(f"{pid}: {shown['absent']}")
    return lines


def cmd_headroom(args: argparse.Namespace) -> int:
    from consumers.batches import shape_key
    from consumers.snapshot_source import snapshot_from_view
    from scheduling.config import ConfigError
    from scheduling.headroom import headroom

    try:
        config, request = _shape(args)
    except (ConfigError, ValueError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return 2
    with App(settings_from(args)) as app:
        try:
            request = _in_group(app, args, request)
        except ValueError as error:
            print(f"berth: {error}", file=sys.stderr)
            return 2
        room = headroom(_policy_engine(app, config), snapshot_from_view(app.engine), request)
    if args.json:
        print(json.dumps(room.to_dict()))
        return 0
    shape = shape_key(dict(request.resources))
    on = len(room.providers)
    where = f"{on:,} provider{'' if on == 1 else 's'}"
    print(f"{room.instances:,} more instances of {shape} fit, on {where}")
    for pid, n in sorted(room.providers.items(), key=lambda item: (-item[1], item[0]))[:10]:
        print(f"  {pid}: {n:,}")
    if len(room.providers) > 10:
        print(f"  ... and {len(room.providers) - 10:,} more providers (--json lists them all)")
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    from prometheus_client import generate_latest

    from berth.metrics import LedgerCollector, registry_for, serve
    from consumers.batches import parse_shape
    from consumers.policies import PolicyBook
    from scheduling.config import ConfigError, SchedulerConfig
    from scheduling.model import Request

    address = parse_address(args.listen, "--listen wants")
    if address is None:
        return 2
    try:
        config = SchedulerConfig.load(args.config) if args.config else SchedulerConfig.default()
        shapes = [Request("headroom", parse_shape(shape)) for shape in args.headroom]
    except (ConfigError, ValueError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return 2
    stop_on_sigterm()
    with App(settings_from(args), migrate=False) as app:
        collector = LedgerCollector(
            app.log,
            app.engine,
            app.settings.topics,
            app.settings.partitions,
            not args.lag,
            shapes,
            policies=PolicyBook(app.log, app.settings.topics, config),
        )
        if args.once:
            sys.stdout.write(generate_latest(registry_for(collector)).decode())
            return 0
        collector.warm()
        bound_host, bound_port, _ = serve(collector, *address)
        logging.info("metrics: serving http://%s:%d/metrics", bound_host, bound_port)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0
