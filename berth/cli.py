"""The ``berth`` command: decode arguments, call the core, print results."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Never, get_args

from sqlalchemy.exc import DBAPIError, ProgrammingError
from tqdm import tqdm

from berth.app import DEFAULT_DATA_DIR, DEFAULT_PARTITIONS, App, Settings, tune_gc
from berth.client import DEFAULT_MAX_SKEW_MS
from berth.replay import default_jobs
from consumers.partition_writer import catch_up_all, step_all
from ledger.log import LogError
from projections.view.ownership import OwnershipLost
from schemas.events import DEFAULT_LEASE_MS, MAX_LEASE_MS, PoolKind, ProviderStateName
from schemas.outcomes import Kind

if TYPE_CHECKING:
    from consumers.balance_worker import MoveClaim
    from consumers.scheduler_worker import SchedulerWorker
    from placement.balance import Plan
    from placement.config import SchedulerConfig
    from placement.model import Request

DEMO_MARKER = ".berth-demo"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="berth", description="Event-sourced reservation ledger and placement scheduler."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def backend_options(p: argparse.ArgumentParser, data_dir: str = DEFAULT_DATA_DIR) -> None:
        p.add_argument("--data-dir", default=data_dir, help="embedded log and SQLite view")
        p.add_argument("--log", default="", help="kafka://HOST:PORT (default: embedded)")
        p.add_argument("--db", default="", help="SQLAlchemy URL (default: SQLite in data dir)")
        p.add_argument("--partitions", type=int, default=None, help="partitions of a new log")

    def worker_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--idle-wait-s", type=float, default=0.05)
        p.add_argument(
            "--ownership-check-s",
            type=float,
            default=5.0,
            help="how often a PostgreSQL view's server is asked whether this process "
            "still holds its partitions",
        )

    demo = sub.add_parser("demo", help="simulate a cluster end to end on the embedded default")
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

    replay = sub.add_parser("replay", help="rebuild the view from offset 0")
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

    projector = sub.add_parser("projector", help="run partition writers until interrupted")
    backend_options(projector)
    projector.add_argument("--owned", default="", help="comma-separated partitions (all)")
    worker_options(projector)

    serve = sub.add_parser(
        "serve", help="run the partition writers and a scheduler worker in one process"
    )
    backend_options(serve)
    serve.add_argument("--config", default=None, help="scheduler TOML (default: built in)")
    serve.add_argument(
        "--api",
        default=None,
        metavar="HOST:PORT",
        help="also serve the HTTP API (see berth api) from this process",
    )
    serve.add_argument(
        "--api-token-file", default=None, help="the API's bearer token, read from this file"
    )
    worker_options(serve)

    api = sub.add_parser(
        "api", help="the HTTP API: publish events and requests, read history, status, headroom"
    )
    backend_options(api)
    api.add_argument(
        "--listen", default="127.0.0.1:8480", help="HOST:PORT (127.0.0.1:8480; port 0: any free)"
    )
    api.add_argument("--config", default=None, help="scheduler TOML whose filters measure headroom")
    api.add_argument(
        "--token-file",
        default=None,
        help="answer only requests with Authorization: Bearer <the file's content> "
        "(or set BERTH_API_TOKEN)",
    )

    scheduler = sub.add_parser(
        "scheduler", help="run a scheduler worker (the writers run elsewhere, e.g. on Kafka)"
    )
    backend_options(scheduler)
    scheduler.add_argument("--config", default=None, help="scheduler TOML (default: built in)")
    scheduler.add_argument("--owned", default="", help="comma-separated request partitions")
    worker_options(scheduler)

    request = sub.add_parser(
        "request", help="submit placement requests and batches, one JSON per line"
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

    migrate = sub.add_parser("migrate", help="create or upgrade the view's schema")
    backend_options(migrate)

    publish = sub.add_parser("publish", help="publish JSON events, one per line")
    backend_options(publish)
    publish.add_argument(
        "--max-skew-ms",
        type=int,
        default=int(os.environ.get("BERTH_MAX_SKEW_MS", DEFAULT_MAX_SKEW_MS)),
        help="refuse an event whose ts_ms is further ahead of this clock "
        f"(default {DEFAULT_MAX_SKEW_MS}, or BERTH_MAX_SKEW_MS)",
    )
    publish.add_argument("file", nargs="?", default="-", help="JSON lines (default: stdin)")

    tick = sub.add_parser("tick", help="advance every partition's clock to now")
    backend_options(tick)

    queue = sub.add_parser(
        "queue", help="queue depth by resource shape: instances and batches waiting"
    )
    backend_options(queue)
    queue.add_argument("--json", action="store_true", help="print one JSON object")

    status = sub.add_parser(
        "status",
        help="each partition's log end, what the view applied and its clock; "
        "capacity and usage; dead letters",
    )
    backend_options(status)
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

    dead = sub.add_parser(
        "dead-letters", help="the records that did not decode, with the reason for each"
    )
    backend_options(dead)
    dead.add_argument("--partition", type=int, default=None, help="one partition (all)")
    dead.add_argument("--limit", type=int, default=20, help="the last N (default 20)")
    dead.add_argument("--json", action="store_true", help="print one JSON object per line")

    history = sub.add_parser(
        "history",
        help="every decision about a reservation, consumer, transaction, provider or pool, "
        "with the record each answered",
    )
    backend_options(history)
    history.add_argument("subject", help="a reservation, consumer, transaction, provider or pool")
    history.add_argument(
        "--no-records",
        action="store_true",
        help="the view alone: do not read each decision's record from the log",
    )
    history.add_argument("--json", action="store_true", help="print it as one JSON object")

    metrics = sub.add_parser(
        "metrics", help="serve the log's and the view's state as Prometheus metrics"
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

    reaper = sub.add_parser(
        "reaper", help="tick every partition on a schedule so abandoned holds expire"
    )
    backend_options(reaper)
    reaper.add_argument(
        "--interval", type=float, default=1.0, help="seconds between rounds of ticks (1)"
    )
    reaper.add_argument(
        "--rounds", type=int, default=None, help="stop after N rounds (default: when interrupted)"
    )

    delete = sub.add_parser(
        "delete-consumer", help="release everything a consumer holds, in every partition"
    )
    backend_options(delete)
    delete.add_argument("consumer_id")

    pool = sub.add_parser("pool", help="identifier pools (addresses, VNIs, VLANs, ranges, sets)")
    pool_sub = pool.add_subparsers(dest="pool_command", required=True)
    define = pool_sub.add_parser(
        "define", help="define a pool, or redefine one while none of it is taken"
    )
    backend_options(define)
    define.add_argument("pool_id")
    define.add_argument("--kind", required=True, choices=get_args(PoolKind))
    define.add_argument("--cidr", default=None, help="ipv4/ipv6: the network, e.g. 10.0.0.0/24")
    define.add_argument("--first", type=int, default=None, help="vni/vlan/range: first id")
    define.add_argument("--last", type=int, default=None, help="vni/vlan/range: last id")
    define.add_argument(
        "--member", action="append", default=[], help="set: a member (repeat for each)"
    )
    define.add_argument(
        "--exclude", action="append", default=[], help="never hand out this id (repeatable)"
    )

    prune = sub.add_parser(
        "prune", help="delete the view's outcome rows older than a time (the log keeps them)"
    )
    backend_options(prune)
    age = prune.add_mutually_exclusive_group(required=True)
    age.add_argument("--before-ms", type=int, help="decided at a partition clock before this")
    age.add_argument("--older-than-days", type=float, help="decided more than D days ago")
    prune.add_argument("--dry-run", action="store_true", help="count them, delete nothing")
    prune.add_argument("--json", action="store_true")

    provider = sub.add_parser(
        "provider", help="register, inventory, state, traits, aggregates, retire a provider"
    )
    provider_sub = provider.add_subparsers(dest="provider_command", required=True)

    def provider_command(name: str, help_: str) -> argparse.ArgumentParser:
        p = provider_sub.add_parser(name, help=help_)
        backend_options(p)
        p.add_argument("provider_id")
        p.add_argument(
            "--wait",
            action="store_true",
            help="print the writer's decision; exit 1 unless it was applied",
        )
        p.add_argument("--timeout-s", type=float, default=30.0, help="how long --wait waits")
        return p

    provider_command("register", "a provider joins").add_argument("--name", default=None)
    provider_command(
        "inventory", "replace the provider's whole inventory, as Placement's PUT does"
    ).add_argument(
        "classes",
        nargs="+",
        metavar="CLASS=TOTAL[,FIELD=VALUE...]",
        help="e.g. VCPU=32,allocation_ratio=4.0 MEMORY_MB=65536,reserved=512; fields: "
        "reserved, min_unit, max_unit, step_size, allocation_ratio",
    )
    provider_command("state", "enable, disable, take offline or evacuate").add_argument(
        "state", choices=get_args(ProviderStateName)
    )
    provider_command("traits", "replace the provider's traits").add_argument("traits", nargs="*")
    provider_command("aggregates", "replace the provider's aggregates").add_argument(
        "aggregates", nargs="*"
    )
    provider_command("retire", "the provider leaves (refused while it holds reservations)")

    def shape_options(p: argparse.ArgumentParser) -> None:
        backend_options(p)
        p.add_argument("--resources", required=True, help="e.g. VCPU=4,MEMORY_MB=8192")
        p.add_argument("--availability-zone", default=None)
        p.add_argument("--required-trait", action="append", default=[])
        p.add_argument("--forbidden-trait", action="append", default=[])
        p.add_argument("--config", default=None, help="scheduler TOML (default: built in)")
        p.add_argument("--json", action="store_true")

    explain = sub.add_parser("explain", help="rank providers for a request and say why not")
    shape_options(explain)
    explain.add_argument("--instances", type=int, default=1)

    headroom = sub.add_parser("headroom", help="how many more instances of a shape fit, and where")
    shape_options(headroom)

    balance = sub.add_parser(
        "balance", help="propose instance moves by the balance policy (oVirt-style)"
    )
    backend_options(balance)
    balance.add_argument("--config", default=None, help="scheduler TOML with a [balance] table")
    balance.add_argument("--max-moves", type=int, default=None, help="instead of max_moves")
    balance.add_argument(
        "--claim",
        action="store_true",
        help="also claim each move's destination (a new reservation per move)",
    )
    balance.add_argument(
        "--lease-ms", type=int, default=DEFAULT_LEASE_MS, help="lease of the destination claims"
    )
    balance.add_argument(
        "--every-s",
        type=float,
        default=None,
        help="plan again every S seconds until interrupted (default: once)",
    )
    balance.add_argument(
        "--rounds", type=int, default=None, help="with --every-s: stop after N rounds"
    )
    balance.add_argument("--json", action="store_true", help="one JSON object per plan")

    log_parsers(sub, backend_options)
    return parser


def log_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    backend_options: Callable[[argparse.ArgumentParser], None],
) -> None:
    """``berth log verify|truncate``, ``berth backup`` and ``berth restore``:
    the embedded log's integrity, and recovering it."""
    log = sub.add_parser("log", help="scrub the embedded log, or cut a damaged partition")
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
    backup = sub.add_parser(
        "backup", help="a consistent copy of the log and the view, while berth serve runs"
    )
    backend_options(backup)
    backup.add_argument("dest", help="a new or empty directory")
    restore = sub.add_parser(
        "restore", help="check a backup, then make it the data directory (--data-dir)"
    )
    backend_options(restore)
    restore.add_argument("source", help="a directory berth backup wrote")


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        data_dir=Path(args.data_dir) if args.data_dir else None,
        log_url=args.log,
        db_url=args.db,
        partitions=args.partitions,
    )


def _progress(total: int | None, desc: str, enabled: bool = True, unit: str = "rec") -> tqdm[Never]:
    # no monitor thread: the bars are updated often, and a replay forks its
    # workers only from a process with one thread
    tqdm.monitor_interval = 0
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit == "B",
        disable=not enabled,
        file=sys.stderr,
    )


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
    settings = _settings(args)
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
        with App(settings) as app, _progress(cfg.requests, "requests") as bar:
            summary = Demo(app, cfg, progress=bar.update).run()
    finally:
        workers.setLevel(level)
    print(to_json(summary) if args.json else render(summary))
    return 0 if summary["overcommitted_providers"] == 0 else 1


def cmd_replay(args: argparse.Namespace) -> int:
    from berth.replay import ReplayStopped, replay

    settings = _settings(args)
    tune_gc()
    started = time.perf_counter()
    # sized by the replay's processes as they index their partitions: counting
    # the records here first would read the whole log once more, on one core
    with _progress(0, "replay") as bar:

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
        except ReplayStopped as stopped:
            print(f"berth: replay stopped, the view left as it was: {stopped}", file=sys.stderr)
            return 1
    elapsed = time.perf_counter() - started
    print(
        json.dumps(
            {
                "records": result.records,
                "outcomes": result.outcomes,
                "elapsed_s": round(elapsed, 3),
                "view": result.view_url,
                "verified": args.verify and result.divergence is None,
                "verified_outcomes": result.verified,
                **({"until_ms": args.until_ms} if args.until_ms is not None else {}),
            }
        )
    )
    if result.divergence is not None:
        print(f"berth: first divergence: {result.divergence}", file=sys.stderr)
        return 1
    return 0


def _stop_on_sigterm() -> None:
    """``docker stop`` and ``kill`` send SIGTERM: a worker stops as on Ctrl-C
    (a batch interrupted before its commit is redone on restart), also when
    it was started in the background, where SIGINT is ignored."""

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():  # only it may set handlers
        signal.signal(signal.SIGTERM, stop)


def _run(app: App, args: argparse.Namespace, step: Callable[[], bool]) -> int:
    """A worker's loop: ``step`` until interrupted, waiting a little while it
    finds nothing to do, and every ``--ownership-check-s`` making sure the
    process still owns its partitions (exit 1 when it does not)."""
    check_every = args.ownership_check_s
    next_check = time.monotonic() + check_every
    try:
        while True:
            if not step():
                time.sleep(args.idle_wait_s)
            if time.monotonic() >= next_check:
                app.confirm_ownership()
                next_check = time.monotonic() + check_every
    except KeyboardInterrupt:
        return 0
    except OwnershipLost as error:
        print(f"berth: {error}", file=sys.stderr)
        return 1


def cmd_projector(args: argparse.Namespace) -> int:
    _stop_on_sigterm()
    settings = _settings(args)
    owned = [int(p) for p in args.owned.split(",")] if args.owned else None
    with App(settings) as app:
        writers = app.writers(owned)
        tune_gc()
        logging.info("projector: %d partitions owned", len(writers))
        return _run(app, args, lambda: step_all(writers))


def _scheduler_worker(
    app: App, args: argparse.Namespace, pump: Callable[[], object], owned: list[int] | None
) -> SchedulerWorker:
    from placement.config import SchedulerConfig

    config = SchedulerConfig.load(args.config) if args.config else SchedulerConfig.default()
    return app.scheduler_worker(config, pump, partitions=owned)


def cmd_scheduler(args: argparse.Namespace) -> int:
    from consumers.queue_projector import QueueProjector

    _stop_on_sigterm()
    owned = [int(p) for p in args.owned.split(",")] if args.owned else None
    with App(_settings(args)) as app:
        worker = _scheduler_worker(app, args, lambda: None, owned)
        queue = QueueProjector(app.log, app.settings.topics, app.engine)
        tune_gc()
        logging.info("scheduler: answering %d request partitions", len(worker.partitions))

        def step() -> bool:
            answered = bool(worker.step())
            return bool(queue.step()) or answered

        return _run(app, args, step)


def cmd_serve(args: argparse.Namespace) -> int:
    from consumers.queue_projector import QueueProjector

    _stop_on_sigterm()
    settings = _settings(args)
    with App(settings) as app:
        writers = app.writers()

        def pump() -> None:
            catch_up_all(writers)

        worker = _scheduler_worker(app, args, pump, None)
        queue = QueueProjector(app.log, app.settings.topics, app.engine)
        if (
            args.api is not None
            and _start_api(app, args.api, args.config, args.api_token_file) is None
        ):
            return 2
        tune_gc()
        logging.info("serving %d partitions", len(writers))

        def step() -> bool:
            busy = step_all(writers)
            busy = bool(worker.step()) or busy
            return bool(queue.step()) or busy

        return _run(app, args, step)


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
    with App(_settings(args), migrate=False) as app:
        try:
            pruned = prune_outcomes(app.write_engine, before_ms, dry_run=args.dry_run)
        except DBAPIError as error:
            return _no_view(error)
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


def _address(listen: str, what: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port); None, said
    on stderr as ``what`` HOST:PORT, when it is not one."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        print(f"berth: {what} HOST:PORT, not {listen!r}", file=sys.stderr)
        return None
    return host.strip("[]"), int(port)


def _api_token(token_file: str | None) -> str | None:
    """The API's bearer token: the file's content, else ``BERTH_API_TOKEN``,
    else none (ValueError for a file that is empty or cannot be read)."""
    if token_file is None:
        return os.environ.get("BERTH_API_TOKEN") or None
    try:
        token = Path(token_file).read_text().strip()
    except OSError as error:
        raise ValueError(f"the API token file: {error}") from None
    if not token:
        raise ValueError(f"the API token file {token_file} is empty")
    return token


def _start_api(
    app: App, listen: str, config_path: str | None, token_file: str | None = None
) -> tuple[str, int] | None:
    """Serve the HTTP API on ``app`` from a thread; where it listens, or None
    (said on stderr) when ``listen``, the configuration or the token cannot
    be used."""
    from berth.api import Api, serve
    from placement.config import ConfigError, SchedulerConfig

    address = _address(listen, "the API listens on")
    if address is None:
        return None
    host, port = address
    try:
        config = SchedulerConfig.load(config_path) if config_path else SchedulerConfig.default()
        token = _api_token(token_file)
    except (ConfigError, ValueError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return None
    if token is None and host not in ("127.0.0.1", "::1", "localhost"):
        logging.warning(
            "api: listening on %s without a token: anyone who reaches it may publish", host
        )
    server, _ = serve(Api(app, config, token), host, port)
    bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
    logging.info("api: serving http://%s:%d/v1/", bound_host, bound_port)
    return bound_host, bound_port


def cmd_api(args: argparse.Namespace) -> int:
    _stop_on_sigterm()
    # the API appends and reads; it owns no partition and leaves the schema to migrate
    with App(_settings(args), migrate=False) as app:
        if _start_api(app, args.listen, args.config, args.token_file) is None:
            return 2
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


def cmd_request(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from berth.client import Answers, Publisher
    from schemas.requests import request_from_json, request_key

    stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    with App(_settings(args)) as app, stream:
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
            partition, offset = publisher.submit([request])[0]
            submitted.append(request_key(request))
            partitions.add(partition)
            print(json.dumps({"line": number, "partition": partition, "offset": offset}))
        if answers is None:
            return 1 if failures else 0
        placed = True

        def show(answer: dict[str, object]) -> None:
            nonlocal placed
            placed = placed and bool(answer["placed"])
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


def cmd_migrate(args: argparse.Namespace) -> int:
    from projections.view.engine import make_engine
    from projections.view.migrate import upgrade

    settings = _settings(args)
    if not settings.db_url:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.view_url)
    upgrade(engine)
    engine.dispose()
    print(f"view schema is current: {settings.view_url}")
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from berth.client import Publisher, PublishError
    from schemas.codec import EventDecodeError

    settings = _settings(args)
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


def cmd_tick(args: argparse.Namespace) -> int:
    from berth.client import Publisher

    settings = _settings(args)
    with App(settings) as app:
        Publisher(app.log, settings.topics).tick()
    return 0


def cmd_queue(args: argparse.Namespace) -> int:
    from consumers.queue_projector import QueueProjector, read_depth

    with App(_settings(args)) as app:
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


def cmd_status(args: argparse.Namespace) -> int:
    from berth.status import read_status, render

    with App(_settings(args), migrate=False) as app:
        try:
            status = read_status(
                app.log,
                app.engine,
                app.settings.topics,
                app.settings.partitions,
                totals=not args.lag,
            )
        except DBAPIError as error:
            return _no_view(error)
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


def cmd_dead_letters(args: argparse.Namespace) -> int:
    from berth.status import read_dead_letters

    with App(_settings(args), migrate=False) as app:
        try:
            rows = read_dead_letters(app.engine, args.limit, args.partition)
        except DBAPIError as error:
            return _no_view(error)
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
    from berth.history import read_history, render

    with App(_settings(args), migrate=False) as app:
        try:
            found = read_history(
                app.engine,
                args.subject,
                None if args.no_records else app.log,
                app.settings.topics.events,
            )
        except DBAPIError as error:
            return _no_view(error)
    if not found.found:
        print(f"berth: the view holds nothing about {args.subject!r}", file=sys.stderr)
        return 1
    print(json.dumps(found.to_dict()) if args.json else render(found))
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    from prometheus_client import generate_latest

    from berth.metrics import LedgerCollector, registry_for, serve
    from consumers.batches import parse_shape
    from placement.config import ConfigError, SchedulerConfig
    from placement.model import Request

    address = _address(args.listen, "--listen wants")
    if address is None:
        return 2
    try:
        config = SchedulerConfig.load(args.config) if args.config else SchedulerConfig.default()
        shapes = [Request("headroom", parse_shape(shape)) for shape in args.headroom]
    except (ConfigError, ValueError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return 2
    _stop_on_sigterm()
    with App(_settings(args), migrate=False) as app:
        collector = LedgerCollector(
            app.log,
            app.engine,
            app.settings.topics,
            app.settings.partitions,
            not args.lag,
            shapes,
            config.engine(),
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


def _no_view(error: DBAPIError) -> int:
    from projections.view.engine import driver_message

    why = driver_message(error)
    # SQLite says so in words; PostgreSQL by the error's class
    missing = "no such table" in why or isinstance(error, ProgrammingError)
    hint = "; `berth migrate` creates its schema" if missing else ""
    print(f"berth: the view cannot be read ({why}){hint}", file=sys.stderr)
    return 2


def cmd_reaper(args: argparse.Namespace) -> int:
    from berth.client import Publisher
    from consumers.reaper import Reaper

    if args.interval <= 0:
        print("berth: --interval must be positive", file=sys.stderr)
        return 2
    settings = _settings(args)
    # the reaper only appends: it has no use for the view, so leave its schema alone
    _stop_on_sigterm()
    with App(settings, migrate=False) as app:
        reaper = Reaper(Publisher(app.log, app.settings.topics), args.interval)
        logging.info(
            "reaper: ticking %d partitions every %g s", len(reaper.partitions), args.interval
        )
        with contextlib.suppress(KeyboardInterrupt):
            reaper.run(threading.Event(), rounds=args.rounds)
    return 0


def cmd_delete_consumer(args: argparse.Namespace) -> int:
    from berth.client import Publisher
    from schemas.codec import EventDecodeError

    with App(_settings(args), migrate=False) as app:
        try:
            placed = Publisher(app.log, app.settings.topics).release_consumer(args.consumer_id)
        except EventDecodeError as error:
            print(f"berth: {error}", file=sys.stderr)
            return 2
    appended = [{"partition": partition, "offset": offset} for partition, offset in placed]
    print(json.dumps({"consumer_id": args.consumer_id, "appended": appended}))
    return 0


def cmd_pool(args: argparse.Namespace) -> int:
    from berth.client import Publisher, PublishError
    from schemas.codec import EventDecodeError

    with App(_settings(args), migrate=False) as app:
        try:
            partition, offset = Publisher(app.log, app.settings.topics).define_pool(
                args.pool_id,
                args.kind,
                cidr=args.cidr,
                first=args.first,
                last=args.last,
                members=args.member,
                excluded=args.exclude,
            )
        except (EventDecodeError, PublishError) as error:
            print(f"berth: pool {args.pool_id}: {error}", file=sys.stderr)
            return 2
    print(json.dumps({"pool_id": args.pool_id, "partition": partition, "offset": offset}))
    return 0


def _inventory(spec: str) -> tuple[str, dict[str, object]]:
    """``VCPU=32,allocation_ratio=4.0`` as (class, inventory fields); the
    fields and their types are the Inventory model's."""
    from schemas.events import Inventory

    known = {
        name: float if field.annotation is float else int
        for name, field in Inventory.model_fields.items()
        if name != "total"
    }
    head, *fields = spec.split(",")
    rc, _, total = head.partition("=")
    if not rc or not total:
        raise ValueError(f"an inventory is CLASS=TOTAL[,FIELD=VALUE...]: not {spec!r}")
    inventory: dict[str, object] = {"total": int(total)}
    for item in fields:
        name, _, value = item.partition("=")
        if name not in known:
            names = ", ".join(known)
            raise ValueError(f"{rc}: unknown inventory field {name!r} (known: {names})")
        inventory[name] = known[name](value)
    return rc.strip(), inventory


def _provider_event(args: argparse.Namespace) -> dict[str, object]:
    """The event ``berth provider ...`` publishes (ValueError when the
    arguments cannot make one)."""
    from berth.client import wall_clock_ms

    pid = args.provider_id
    kind = args.provider_command
    fields: dict[str, object]
    if kind == "register":
        fields = {"type": "provider_registered", "name": args.name or pid}
    elif kind == "inventory":
        inventories = dict(_inventory(spec) for spec in args.classes)
        fields = {"type": "inventory_set", "inventories": inventories}
    elif kind == "state":
        fields = {"type": "provider_state_set", "state": args.state}
    elif kind == "traits":
        fields = {"type": "traits_set", "traits": args.traits}
    elif kind == "aggregates":
        fields = {"type": "aggregates_set", "aggregates": args.aggregates}
    else:
        fields = {"type": "provider_retired"}
    return {
        **fields,
        "event_id": f"{kind}-{pid}-{uuid.uuid4().hex[:12]}",
        "ts_ms": wall_clock_ms(),
        "partition_key": pid,
        "provider_id": pid,
    }


def cmd_provider(args: argparse.Namespace) -> int:
    from berth.client import Decisions, Publisher, PublishError
    from schemas.codec import EventDecodeError, validate_event

    try:
        event = validate_event(_provider_event(args))
    except (EventDecodeError, ValueError) as error:
        print(f"berth: provider {args.provider_id}: {error}", file=sys.stderr)
        return 2
    with App(_settings(args), migrate=False) as app:
        decisions = Decisions(app.log, app.settings.topics) if args.wait else None
        try:
            partition, offset = Publisher(app.log, app.settings.topics).publish([event])[0]
        except PublishError as error:
            print(f"berth: provider {args.provider_id}: {error}", file=sys.stderr)
            return 2
        print(json.dumps({"event_id": event.event_id, "partition": partition, "offset": offset}))
        if decisions is None:
            return 0
        if decisions.wait([event.event_id], args.timeout_s, partitions={partition}):
            print(
                f"berth: no decision after {args.timeout_s:g} s (are the writers running?)",
                file=sys.stderr,
            )
            return 3
    (decision,) = [o for o in decisions.found[event.event_id] if o.subject == args.provider_id]
    print(json.dumps(decision.to_dict()))
    return 0 if decision.kind == Kind.APPLIED else 1


def _shape(args: argparse.Namespace, instances: int = 1) -> tuple[SchedulerConfig, Request]:
    """The scheduler configuration and the request that ``shape_options`` describe
    (:class:`ConfigError` or :class:`ValueError` when they cannot be read)."""
    from consumers.batches import parse_shape
    from placement.config import SchedulerConfig
    from placement.model import Request

    config = SchedulerConfig.load(args.config) if args.config else SchedulerConfig.default()
    request = Request(
        args.command,
        parse_shape(args.resources),
        num_instances=instances,
        availability_zone=args.availability_zone,
        required_traits=frozenset(args.required_trait),
        forbidden_traits=frozenset(args.forbidden_trait),
    )
    return config, request


def cmd_headroom(args: argparse.Namespace) -> int:
    from consumers.batches import shape_key
    from consumers.snapshot_source import snapshot_from_view
    from placement.config import ConfigError
    from placement.headroom import headroom

    try:
        config, request = _shape(args)
    except (ConfigError, ValueError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return 2
    with App(_settings(args)) as app:
        room = headroom(config.engine(), snapshot_from_view(app.engine), request)
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


def cmd_explain(args: argparse.Namespace) -> int:
    from consumers.snapshot_source import snapshot_from_view
    from placement.config import ConfigError

    try:
        config, request = _shape(args, args.instances)
    except (ConfigError, ValueError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return 2
    with App(_settings(args)) as app:
        placement = config.engine().place(snapshot_from_view(app.engine), request, explain=True)
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


def cmd_balance(args: argparse.Namespace) -> int:
    from berth.client import Publisher
    from consumers.balance_worker import BalanceWorker
    from placement.config import ConfigError, SchedulerConfig

    try:
        config = SchedulerConfig.load(args.config) if args.config else SchedulerConfig.default()
        if args.max_moves is not None:
            if args.max_moves < 0:
                raise ConfigError(f"--max-moves must be 0 or more, not {args.max_moves}")
            config.max_moves = args.max_moves
        if not 1 <= args.lease_ms <= MAX_LEASE_MS:
            raise ConfigError(f"--lease-ms must be from 1 to {MAX_LEASE_MS}, not {args.lease_ms}")
        if args.every_s is not None and args.every_s <= 0:
            raise ConfigError(f"--every-s must be positive, not {args.every_s}")
        if args.rounds is not None and args.every_s is None:
            raise ConfigError("--rounds counts the rounds of --every-s, which is not given")
    except ConfigError as error:
        print(f"berth: {error}", file=sys.stderr)
        return 2

    def report(plan: Plan, claims: list[MoveClaim]) -> None:
        print(_render_plan(plan, claims, args.json), flush=True)

    _stop_on_sigterm()
    with App(_settings(args)) as app:
        worker = BalanceWorker(
            app.engine,
            Publisher(app.log, app.settings.topics),
            config,
            claim=args.claim,
            lease_ms=args.lease_ms,
            report=report,
        )
        if args.every_s is None:
            _warn_if_behind(app)
            worker.step()
        else:
            with contextlib.suppress(KeyboardInterrupt):
                worker.run(args.every_s, threading.Event(), rounds=args.rounds)
    return 0


def _warn_if_behind(app: App) -> None:
    """A plan on a view behind its log may not see moves claimed moments ago
    (their holds are not applied yet) and propose them again."""
    from berth.status import read_status

    settings = app.settings
    status = read_status(app.log, app.engine, settings.topics, settings.partitions, totals=False)
    behind = sum(p.behind for p in status.partitions)
    if behind:
        print(
            f"berth: warning: the view is {behind} record{'' if behind == 1 else 's'} behind "
            "the log, so moves claimed since may not show and be proposed again "
            "(are the writers running?)",
            file=sys.stderr,
        )


def _render_plan(plan: Plan, claims: list[MoveClaim], as_json: bool) -> str:
    if as_json:
        out = plan.to_dict()
        for move, claim in zip(out["moves"], claims, strict=False):
            move["claim"] = {
                "reservation_id": claim.reservation_id,
                "partition": claim.partition,
                "offset": claim.offset,
            }
        return json.dumps(out)
    lines = []
    for number, move in enumerate(plan.moves):
        amounts = ",".join(f"{rc}={n}" for rc, n in sorted(move.instance.resources.items()))
        line = (
            f"move {move.instance.reservation_id} ({move.instance.consumer_id}, {amounts}): "
            f"{move.source} -> {move.destination}; {move.why}"
        )
        if number < len(claims):
            line += f"; claimed as {claims[number].reservation_id}"
        lines.append(line)
    count = len(plan.moves)
    lines.append(f"{count} move{'' if count == 1 else 's'}; {plan.stopped}")
    return "\n".join(lines)


def _recompute(spec: str) -> list[int] | Literal["all"] | None:
    if spec in ("", "all"):
        return None if spec == "" else "all"
    if spec == "none":
        return []
    return [int(p) for p in spec.split(",")]


def cmd_log(args: argparse.Namespace) -> int:
    from berth.recovery import RecoveryError

    try:
        if args.log_command == "verify":
            return _log_verify(args)
        return _log_truncate(args)
    except (RecoveryError, ValueError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return 2


def _log_verify(args: argparse.Namespace) -> int:
    from berth.client import wall_clock_ms
    from berth.scrub import log_bytes, render, scrub

    settings = _settings(args)
    if settings.log_url:
        raise ValueError("berth log verify checks the embedded log's files; not Kafka's")
    with _progress(log_bytes(settings), "verify", not args.json, unit="B") as bar:
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

    settings = _settings(args)
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
        manifest = backup(_settings(args), Path(args.dest), wall_clock_ms())
    except (RecoveryError, LogError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return 1
    summary = {k: v for k, v in manifest.items() if k != "files"}
    print(json.dumps({**summary, "files": len(manifest["files"]), "dest": args.dest}))
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from berth.recovery import RecoveryError, restore, verify_backup
    from berth.scrub import render

    settings = _settings(args)
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


COMMANDS = {
    "log": cmd_log,
    "backup": cmd_backup,
    "restore": cmd_restore,
    "demo": cmd_demo,
    "replay": cmd_replay,
    "projector": cmd_projector,
    "migrate": cmd_migrate,
    "publish": cmd_publish,
    "tick": cmd_tick,
    "queue": cmd_queue,
    "status": cmd_status,
    "dead-letters": cmd_dead_letters,
    "history": cmd_history,
    "metrics": cmd_metrics,
    "headroom": cmd_headroom,
    "provider": cmd_provider,
    "api": cmd_api,
    "prune": cmd_prune,
    "reaper": cmd_reaper,
    "delete-consumer": cmd_delete_consumer,
    "pool": cmd_pool,
    "explain": cmd_explain,
    "balance": cmd_balance,
    "serve": cmd_serve,
    "scheduler": cmd_scheduler,
    "request": cmd_request,
}


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
