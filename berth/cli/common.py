"""What the ``berth`` commands share: the options that name the log and
the view (every command takes them) and a worker's, reading them into
:class:`Settings`, the groups ``berth --help`` lists the commands in, and
the helpers of more than one group."""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Never

from sqlalchemy.exc import DBAPIError, ProgrammingError
from tqdm import tqdm

from berth.app import DEFAULT_DATA_DIR, Settings

Run = Callable[[argparse.Namespace], int]
"""A command's body: its arguments in, its exit status out."""


class Commands:
    """The ``berth`` commands, added group by group: each one's parser knows
    the function that runs it (``args.run``), and :meth:`listing` lists
    them under their groups' titles, for ``berth --help``."""

    def __init__(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        self._sub = sub
        self._groups: list[tuple[str, list[tuple[str, str]]]] = []

    def group(self, title: str) -> None:
        """The commands added from now on are listed under ``title``."""
        self._groups.append((title, []))

    def add(self, name: str, help_: str, run: Run) -> argparse.ArgumentParser:
        """The parser of command ``name``, listed with ``help_`` in the group."""
        self._groups[-1][1].append((name, help_))
        parser = self._sub.add_parser(name)
        parser.set_defaults(run=run)
        return parser

    def listing(self) -> str:
        """Every command with its help, under its group's title, aligned and
        wrapped as argparse lays out options."""
        names = max(len(name) for _, group in self._groups for name, _ in group)
        width = max(shutil.get_terminal_size().columns - 2, names + 24)
        sections = []
        for title, group in self._groups:
            lines = [f"{title}:"]
            for name, help_ in group:
                lead = f"  {name:<{names}}  "
                lines.append(
                    textwrap.fill(
                        help_,
                        width,
                        initial_indent=lead,
                        subsequent_indent=" " * len(lead),
                        # an option such as --data-dir stays whole
                        break_on_hyphens=False,
                    )
                )
            sections.append("\n".join(lines))
        return "\n\n".join(sections)


def remote_option(p: argparse.ArgumentParser) -> None:
    """``--api URL``: the command asks a remote Berth's HTTP API (berth.api.remote)."""
    p.add_argument(
        "--api",
        default=None,
        metavar="URL",
        help="ask a remote Berth's HTTP API instead (token from BERTH_API_TOKEN; prints JSON)",
    )


def backend_options(p: argparse.ArgumentParser, data_dir: str | None = None) -> None:
    """Where the log and the view are: every command takes these. Without
    --data-dir, BERTH_DATA_DIR says where, and without it berth-data."""
    p.add_argument(
        "--data-dir",
        default=data_dir,
        help=f"embedded log and SQLite view (default: $BERTH_DATA_DIR or {DEFAULT_DATA_DIR})",
    )
    p.add_argument("--log", default="", help="kafka://HOST:PORT (default: embedded)")
    p.add_argument("--db", default="", help="SQLAlchemy URL (default: SQLite in data dir)")
    p.add_argument("--partitions", type=int, default=None, help="partitions of a new log")


def worker_options(p: argparse.ArgumentParser) -> None:
    """How a long-running worker (serve, projector, scheduler) paces itself."""
    p.add_argument("--idle-wait-s", type=float, default=0.05)
    p.add_argument(
        "--ownership-check-s",
        type=float,
        default=5.0,
        help="how often a PostgreSQL view's server is asked whether this process "
        "still holds its partitions",
    )


def checkpoint_options(p: argparse.ArgumentParser, every: bool = True) -> None:
    """How many checkpoints of the view to keep, and how often to take one."""
    from berth.checkpoints import DEFAULT_EVERY, DEFAULT_KEEP

    p.add_argument(
        "--checkpoint-keep",
        "--keep",
        dest="checkpoint_keep",
        type=int,
        default=DEFAULT_KEEP,
        help=f"checkpoints of the view kept, spread over the log ({DEFAULT_KEEP})",
    )
    if every:
        p.add_argument(
            "--checkpoint-every",
            type=int,
            default=DEFAULT_EVERY,
            metavar="RECORDS",
            help="checkpoint a SQLite view each time it has applied this many more "
            f"records, for explain --request ({DEFAULT_EVERY}; 0: never)",
        )


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        data_dir=Path(args.data_dir) if args.data_dir else None,
        log_url=args.log,
        db_url=args.db,
        partitions=args.partitions,
    )


def progress(total: int | None, desc: str, enabled: bool = True, unit: str = "rec") -> tqdm[Never]:
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


def stop_on_sigterm() -> None:
    """``docker stop`` and ``kill`` send SIGTERM: a worker stops as on Ctrl-C
    (a batch interrupted before its commit is redone on restart), also when
    it was started in the background, where SIGINT is ignored."""

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():  # only it may set handlers
        signal.signal(signal.SIGTERM, stop)


def parse_address(listen: str, what: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port); None, said
    on stderr as ``what`` HOST:PORT, when it is not one."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        print(f"berth: {what} HOST:PORT, not {listen!r}", file=sys.stderr)
        return None
    return host.strip("[]"), int(port)


def no_view(error: DBAPIError) -> int:
    from projections.view.engine import driver_message

    why = driver_message(error)
    # SQLite says so in words; PostgreSQL by the error's class
    missing = "no such table" in why or isinstance(error, ProgrammingError)
    hint = "; `berth migrate` creates its schema" if missing else ""
    print(f"berth: the view cannot be read ({why}){hint}", file=sys.stderr)
    return 2
