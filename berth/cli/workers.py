"""``berth serve`` and the workers it combines, each of which may also run
alone: ``projector`` (the partition writers), ``scheduler``, ``api``,
``reaper`` and ``balance``; and ``worker``, which runs the writers and the
scheduler on Kafka in a consumer group (:mod:`berth.worker`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from berth.app import App, tune_gc
from berth.cli.common import (
    Commands,
    backend_options,
    checkpoint_options,
    parse_address,
    settings_from,
    stop_on_sigterm,
    worker_options,
)
from berth.cli.placement import placement_options, start_placement_api
from berth.history import fit_text
from consumers.partition_writer import (
    REPORT_LINGER_S,
    catch_up_all,
    flush_all,
    held_appended,
    held_appends,
    held_outcomes,
    lingering_until,
    locked,
    step_all,
)
from ledger.log import Append, Watches, merged
from projections.view.ownership import OwnershipLost
from schemas.events import DEFAULT_LEASE_MS, MAX_LEASE_MS

if TYPE_CHECKING:
    from berth.api.handoff import AnswerHub
    from consumers.balance_worker import MoveClaim
    from consumers.scheduler_worker import SchedulerWorker
    from consumers.snapshot_source import ChangeFeed
    from scheduling.balance import Plan
    from schemas.topology import TopologyFit


REPLIES_OUT_WAIT_S = 0.02
"""How long ``berth serve --api``'s loop, its work answered, lets the API's
replies go out before it reads the view's changes for the next request."""


def add_commands(commands: Commands) -> None:
    commands.group("serve and workers")
    serve = commands.add(
        "serve", "run the partition writers and a scheduler worker in one process", cmd_serve
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
        "--placement-api",
        default=None,
        metavar="HOST:PORT",
        help="also serve OpenStack Placement's API (docs/placement.md) from this process",
    )
    placement_options(serve)
    serve.add_argument(
        "--api-token-file", default=None, help="the API's admin bearer token, read from this file"
    )
    serve.add_argument(
        "--api-credentials",
        default=None,
        metavar="FILE",
        help="the API's credentials: ROLE sha256:HEX lines (see berth api --credentials)",
    )
    worker_options(serve)
    checkpoint_options(serve)

    projector = commands.add("projector", "run partition writers until interrupted", cmd_projector)
    backend_options(projector)
    projector.add_argument("--owned", default="", help="comma-separated partitions (all)")
    worker_options(projector)
    checkpoint_options(projector)

    worker = commands.add(
        "worker",
        "writers and scheduler in a Kafka consumer group (faust): scale by replicas",
        cmd_worker,
    )
    backend_options(worker)
    worker.add_argument("--group", default="", help="consumer group (berth-<events topic>)")
    worker.add_argument(
        "--session-timeout-s",
        type=float,
        default=10.0,
        help="how long the group waits for a silent worker before moving its partitions",
    )
    worker.add_argument("--config", default=None, help="scheduler TOML (default: built in)")
    worker.add_argument("--writers-only", action="store_true", help="answer no requests")
    worker.add_argument(
        "--tick-every-s", type=float, default=0.0, help="tick the partitions written here (0: off)"
    )

    scheduler = commands.add(
        "scheduler",
        "run a scheduler worker (the writers run elsewhere, e.g. on Kafka)",
        cmd_scheduler,
    )
    backend_options(scheduler)
    scheduler.add_argument("--config", default=None, help="scheduler TOML (default: built in)")
    scheduler.add_argument("--owned", default="", help="comma-separated request partitions")
    worker_options(scheduler)

    api = commands.add(
        "api",
        "the HTTP API: publish events and requests, read history, status, headroom",
        cmd_api,
    )
    backend_options(api)
    api.add_argument(
        "--listen", default="127.0.0.1:8480", help="HOST:PORT (127.0.0.1:8480; port 0: any free)"
    )
    api.add_argument("--config", default=None, help="scheduler TOML whose filters measure headroom")
    api.add_argument(
        "--token-file",
        default=None,
        help="an admin's bearer token, the file's content (or set BERTH_API_TOKEN)",
    )
    api.add_argument(
        "--credentials",
        default=None,
        metavar="FILE",
        help="tokens by role, one 'ROLE sha256:HEX' a line, ROLE admin, operator or "
        "project:ID (or set BERTH_API_CREDENTIALS); python -m berth.api.credentials "
        "ROLE makes a token and its line",
    )

    reaper = commands.add(
        "reaper", "tick every partition on a schedule so abandoned holds expire", cmd_reaper
    )
    backend_options(reaper)
    reaper.add_argument(
        "--interval", type=float, default=1.0, help="seconds between rounds of ticks (1)"
    )
    reaper.add_argument(
        "--rounds", type=int, default=None, help="stop after N rounds (default: when interrupted)"
    )

    balance = commands.add(
        "balance", "propose instance moves by the balance policy (oVirt-style)", cmd_balance
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


def cmd_serve(args: argparse.Namespace) -> int:
    from consumers.queue_projector import QueueProjector
    from consumers.state_snapshot import WriterFeed

    stop_on_sigterm()
    settings = settings_from(args)
    with App(settings) as app:
        writers = app.writers()

        def pump() -> None:
            catch_up_all(writers)

        def decide() -> None:
            # the outcomes are appended with the answers (append_answers), the
            # view's commit waits until those are out (flush_all below)
            catch_up_all(writers, hold=True)
            worker.scheduler.follower.learn(held_outcomes(writers))

        def append_answers(topic: str, answers: list[Append]) -> list[int]:
            # locked: a Placement write driving its writer's round meanwhile
            # would otherwise append the same held outcomes, flushing them
            with locked(writers):
                offsets = app.log.append_many([*held_appends(writers), (topic, answers)])
                held_appended(writers)
            return offsets[-1]

        # the writers of every partition are these: the view moves only with
        # them, and what they commit is told from their states (no read back)
        worker = _scheduler_worker(
            app,
            args,
            pump,
            None,
            lambda: [w.next_offset for w in writers],
            decide,
            WriterFeed(writers),
        )
        worker.append_answers = append_answers
        queue = QueueProjector(app.log, app.settings.topics, app.engine)
        hub: AnswerHub | None = None

        def replies_out() -> None:
            if hub is not None:
                hub.replies_out(REPLIES_OUT_WAIT_S)

        if args.api is not None:
            # this worker answers every request partition: it hands the
            # API's waiting callers their answers once durable, and lets
            # their replies go out before it reads the view's changes
            from berth.api.handoff import AnswerHub

            hub = AnswerHub()
            worker.on_answers = hub.hand_over
            worker.before_idle = replies_out
            token, credentials = args.api_token_file, args.api_credentials
            if _start_api(app, args.api, args.config, token, credentials, hub) is None:
                return 2
        if (
            args.placement_api is not None
            and start_placement_api(app, args, args.placement_api, writers) is None
        ):
            return 2
        tune_gc()
        logging.info("serving %d partitions", len(writers))

        scheduled = False  # the scheduler worker answered requests since it last idled

        def step() -> bool:
            nonlocal scheduled
            busy = step_all(writers)
            answered = bool(worker.step())
            if answered:
                # the replies those answers woke go out before anything
                # else this loop does (the view's commit of the claims they
                # decided, the queue's step, the next round)
                replies_out()
            flush_all(writers)
            scheduled = scheduled or answered
            return bool(queue.step()) or answered or busy

        def idle() -> None:
            # the scheduler's view read ahead for its next request, when it
            # has requests to answer: not after writes alone (the Placement
            # API's), which would read it again after every batch
            nonlocal scheduled
            if scheduled:
                scheduled = False
                worker.idle()

        def watches() -> Watches:
            return merged(*(w.watches() for w in writers), worker.watches(), queue.watches())

        with _checkpointing(app, args):
            return _run(app, args, step, watches, idle, worker.tick, worker.pending)


def cmd_worker(args: argparse.Namespace) -> int:
    from berth.worker import WorkerOptions, run_worker

    options = WorkerOptions(
        group=args.group,
        session_timeout_s=args.session_timeout_s,
        schedule=not args.writers_only,
        config=args.config,
        tick_every_s=args.tick_every_s,
    )
    return run_worker(settings_from(args), options)


def cmd_projector(args: argparse.Namespace) -> int:
    stop_on_sigterm()
    settings = settings_from(args)
    owned = [int(p) for p in args.owned.split(",")] if args.owned else None
    with App(settings) as app:
        # metrics reports arriving alone wait a little for other records:
        # one append and one view transaction for several rounds' worth
        writers = app.writers(owned, linger_s=REPORT_LINGER_S)
        tune_gc()
        logging.info("projector: %d partitions owned", len(writers))
        with _checkpointing(app, args):
            return _run(
                app,
                args,
                lambda: step_all(writers),
                lambda: merged(*(w.watches() for w in writers)),
                due=lambda: lingering_until(writers),
            )


@contextlib.contextmanager
def _checkpointing(app: App, args: argparse.Namespace) -> Iterator[None]:
    """Checkpoints of the view every ``--checkpoint-every`` records, while
    the block runs."""
    from berth.checkpoints import Checkpointer

    if args.checkpoint_every <= 0:
        yield
        return
    checkpointer = Checkpointer(app.settings, args.checkpoint_every, args.checkpoint_keep).start()
    try:
        yield
    finally:
        checkpointer.stop()


def cmd_scheduler(args: argparse.Namespace) -> int:
    from consumers.queue_projector import QueueProjector

    stop_on_sigterm()
    owned = [int(p) for p in args.owned.split(",")] if args.owned else None
    with App(settings_from(args)) as app:
        worker = _scheduler_worker(app, args, lambda: None, owned)
        queue = QueueProjector(app.log, app.settings.topics, app.engine)
        tune_gc()
        logging.info("scheduler: answering %d request partitions", len(worker.partitions))

        def step() -> bool:
            answered = bool(worker.step())
            return bool(queue.step()) or answered

        def watches() -> Watches:
            return merged(worker.watches(), queue.watches())

        return _run(app, args, step, watches, worker.idle, worker.tick, worker.pending)


def _scheduler_worker(
    app: App,
    args: argparse.Namespace,
    pump: Callable[[], object],
    owned: list[int] | None,
    view_version: Callable[[], object] | None = None,
    decide: Callable[[], object] | None = None,
    feed: ChangeFeed | None = None,
) -> SchedulerWorker:
    from scheduling.config import SchedulerConfig

    config = SchedulerConfig.load(args.config) if args.config else SchedulerConfig.default()
    return app.scheduler_worker(
        config, pump, partitions=owned, view_version=view_version, decide=decide, feed=feed
    )


def _run(
    app: App,
    args: argparse.Namespace,
    step: Callable[[], bool],
    watches: Callable[[], Watches],
    idle: Callable[[], object] = lambda: None,
    tick: Callable[[], object] | None = None,
    pending: Callable[[], bool] = lambda: False,
    due: Callable[[], float | None] = lambda: None,
) -> int:
    """A worker's loop: ``step`` until interrupted. When a step finds nothing
    to do it waits for the next record of what it reads (``watches``) to
    arrive. A step may also have work no record announces (``pending``: a
    queued batch, tried again as others' decisions arrive and failed past
    its deadline): while it has, a wait lasts ``--idle-wait-s`` at most, and
    one that ends with nothing arrived calls ``tick`` alone, stepping again
    only if it did some. Otherwise a wait lasts until the next ownership
    check: an idle worker wakes for nothing else, and uses no CPU. The
    first time after some work, it calls ``idle`` before it waits (what
    can be made ready for the next record); and every
    ``--ownership-check-s`` it makes sure the process still owns its
    partitions (exit 1 when it does not). A wait also ends at ``due``
    (a :func:`time.monotonic`, if any: a writer's lingering batch), when
    the next step has work that no record announces."""
    check_every = args.ownership_check_s
    next_check = time.monotonic() + check_every
    worked = False
    stepping = True
    try:
        while True:
            if stepping and step():
                worked = True
            else:
                if worked:
                    idle()  # a record arriving meanwhile ends the wait at once
                    worked = False
                timed = tick is not None and pending()
                wait_s = args.idle_wait_s if timed else next_check - time.monotonic()
                if (until := due()) is not None:
                    wait_s = min(wait_s, until - time.monotonic())
                arrived = app.log.wait(watches(), wait_s)
                stepping = arrived or tick is None or bool(tick())
            if time.monotonic() >= next_check:
                app.confirm_ownership()
                next_check = time.monotonic() + check_every
    except KeyboardInterrupt:
        return 0
    except OwnershipLost as error:
        print(f"berth: {error}", file=sys.stderr)
        return 1


def cmd_api(args: argparse.Namespace) -> int:
    stop_on_sigterm()
    # the API appends and reads; it owns no partition and leaves the schema to migrate
    with App(settings_from(args), migrate=False) as app:
        if _start_api(app, args.listen, args.config, args.token_file, args.credentials) is None:
            return 2
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


def _start_api(
    app: App,
    listen: str,
    config_path: str | None,
    token_file: str | None = None,
    credentials_file: str | None = None,
    hub: AnswerHub | None = None,
) -> tuple[str, int] | None:
    """Serve the HTTP API on ``app`` from a thread; where it listens, or None
    (said on stderr) when ``listen``, the configuration or the credentials
    cannot be used."""
    from berth.api import Api, serve
    from berth.api.credentials import Credentials
    from scheduling.config import ConfigError, SchedulerConfig

    address = parse_address(listen, "the API listens on")
    if address is None:
        return None
    host, port = address
    try:
        config = SchedulerConfig.load(config_path) if config_path else SchedulerConfig.default()
        credentials = Credentials.load(credentials_file, token_file)
    except (ConfigError, ValueError) as error:
        print(f"berth: {error}", file=sys.stderr)
        return None
    if not credentials.required and host not in ("127.0.0.1", "::1", "localhost"):
        logging.warning(
            "api: listening on %s without credentials: anyone who reaches it may publish", host
        )
    try:
        _, (bound_host, bound_port) = serve(Api(app, config, credentials, hub), host, port)
    except RuntimeError as error:
        print(f"berth: {error} on {listen}", file=sys.stderr)
        return None
    logging.info("api: serving http://%s:%d/v1/", bound_host, bound_port)
    return bound_host, bound_port


def cmd_reaper(args: argparse.Namespace) -> int:
    from berth.client import Publisher
    from consumers.reaper import Reaper

    if args.interval <= 0:
        print("berth: --interval must be positive", file=sys.stderr)
        return 2
    settings = settings_from(args)
    # the reaper only appends: it has no use for the view, so leave its schema alone
    stop_on_sigterm()
    with App(settings, migrate=False) as app:
        reaper = Reaper(Publisher(app.log, app.settings.topics), args.interval)
        logging.info(
            "reaper: ticking %d partitions every %g s", len(reaper.partitions), args.interval
        )
        with contextlib.suppress(KeyboardInterrupt):
            reaper.run(threading.Event(), rounds=args.rounds)
    return 0


def cmd_balance(args: argparse.Namespace) -> int:
    from berth.client import Publisher
    from consumers.balance_worker import BalanceWorker
    from consumers.policies import PolicyBook
    from scheduling.config import ConfigError, SchedulerConfig

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

    stop_on_sigterm()
    with App(settings_from(args)) as app:
        worker = BalanceWorker(
            app.engine,
            Publisher(app.log, app.settings.topics),
            config,
            claim=args.claim,
            lease_ms=args.lease_ms,
            report=report,
            policies=PolicyBook(app.log, app.settings.topics, config),
            max_moves=args.max_moves,
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


def _fit_text(fit: TopologyFit) -> str:
    """``guest cell 0 on host cell 1 (CPUs 6,7), PCI 0000:81:00.2``."""
    return fit_text(fit.model_dump(mode="json"))


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
        if move.fit is not None:
            line += f"; fit {_fit_text(move.fit)}"
        if number < len(claims):
            line += f"; claimed as {claims[number].reservation_id}"
        lines.append(line)
    count = len(plan.moves)
    lines.append(f"{count} move{'' if count == 1 else 's'}; {plan.stopped}")
    return "\n".join(lines)
