"""The ``berth`` command: decode arguments, call the core, print results.

One module per group of commands, in the order ``berth --help`` lists them:
``workers`` (serve and the workers it combines), ``placement``
(OpenStack Placement's API served alone), ``publishing`` (publish
and request), ``admin`` (providers and pools), ``aggregates``, ``server_groups``, ``policies``
(scheduling policies set at run time), ``reading`` (the read side),
``view`` (replay, prune, migrate), ``integrity`` (log verify and truncate,
backup, restore) and ``demo``; ``common`` holds the options
and the helpers they share. A group is a module with ``add_commands``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from berth.cli import (
    admin,
    aggregates,
    demo,
    integrity,
    placement,
    policies,
    publishing,
    reading,
    server_groups,
    view,
    workers,
)
from berth.cli.common import Commands, Run

GROUPS = (
    workers,
    placement,
    publishing,
    admin,
    aggregates,
    server_groups,
    policies,
    reading,
    view,
    integrity,
    demo,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="berth",
        description="Event-sourced reservation ledger and placement scheduler.",
        # the epilog, the commands by group, is laid out already
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="one of the commands below; `berth COMMAND --help` lists its options",
    )
    commands = Commands(sub)
    for group in GROUPS:
        group.add_commands(commands)
    parser.epilog = commands.listing()
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # the time leads: a long-running worker's log is read for when things happened
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    run: Run = args.run
    return run(args)
