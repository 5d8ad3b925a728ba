"""OpenStack Placement's API (docs/placement.md): its options, served from
``berth serve --placement-api`` beside the writers, or by ``berth
placement-api`` processes of their own, as many as the load wants, on one
address."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import sys
import threading
from pathlib import Path

from berth.app import App, tune_gc
from berth.cli.common import (
    Commands,
    backend_options,
    parse_address,
    settings_from,
    stop_on_sigterm,
)
from consumers.partition_writer import PartitionWriter, step_all


def add_commands(commands: Commands) -> None:
    commands.group("OpenStack Placement")
    api = commands.add(
        "placement-api",
        "serve OpenStack Placement's API alone: the writers (berth serve, berth worker) "
        "decide its writes in other processes",
        cmd_placement_api,
    )
    backend_options(api)
    api.add_argument(
        "--listen", default="127.0.0.1:8778", help="HOST:PORT (127.0.0.1:8778; port 0: any free)"
    )
    api.add_argument(
        "--reuse-port",
        action="store_true",
        help="listen with SO_REUSEPORT: several placement-api processes share the address",
    )
    placement_options(api)


def placement_options(p: argparse.ArgumentParser) -> None:
    """How the Placement API authorises, and whom it lets call from a browser."""
    p.add_argument(
        "--placement-policy",
        choices=("legacy", "secure"),
        default="legacy",
        help="the Placement API's default policy: Placement's legacy defaults, or its "
        "secure-RBAC defaults (oslo.policy's enforce_new_defaults)",
    )
    p.add_argument(
        "--placement-policy-file",
        default=None,
        metavar="FILE",
        help="Placement policy overrides in oslo.policy's format (YAML or JSON)",
    )
    p.add_argument(
        "--placement-cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="an origin (scheme://host[:port]) whose browsers may call the Placement API "
        "(CORS; repeat for several)",
    )
    p.add_argument(
        "--placement-cors-allow-header",
        action="append",
        default=[],
        metavar="HEADER",
        help="a header those origins may send beyond CORS's simple ones (repeat for several)",
    )
    p.add_argument(
        "--placement-keystone-config",
        default=None,
        metavar="FILE",
        help="verify the Placement API's tokens with Keystone (keystonemiddleware's "
        "auth_token), configured by this file's [keystone_authtoken] section "
        "(default: noauth2)",
    )


def cmd_placement_api(args: argparse.Namespace) -> int:
    stop_on_sigterm()
    # it appends and reads; it owns no partition and leaves the schema to migrate
    with App(settings_from(args), migrate=False) as app:
        if start_placement_api(app, args, args.listen, [], args.reuse_port) is None:
            return 2
        tune_gc()
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


def start_placement_api(
    app: App,
    args: argparse.Namespace,
    listen: str,
    writers: list[PartitionWriter],
    reuse_port: bool = False,
) -> tuple[str, int] | None:
    """Serve the Placement API on ``app`` at ``listen`` from a thread, with
    the options of :func:`placement_options`; where it listens, or None
    (said on stderr). The writer of Placement's partition, if one of
    ``writers``, hands the API's writes their decisions as it commits
    them; otherwise a write waits for its outcome on the log."""
    from berth.placement_api.cors import Cors
    from berth.placement_api.keystone import KeystoneVerifier, read_options
    from berth.placement_api.policy import Policy
    from berth.placement_api.server import PlacementServer
    from berth.placement_api.service import Handoff, PlacementService
    from consumers.state_snapshot import then

    address = parse_address(listen, "the Placement API listens on")
    if address is None:
        return None
    policy_file = args.placement_policy_file
    if policy_file is not None and not Path(policy_file).is_file():
        print(f"berth: no policy file {policy_file}", file=sys.stderr)
        return None
    policy = Policy(args.placement_policy == "secure", policy_file and Path(policy_file))
    origins = args.placement_cors_origin
    cors = Cors(origins, args.placement_cors_allow_header) if origins else None
    verifier: KeystoneVerifier | None = None
    if args.placement_keystone_config is not None:
        try:
            options = read_options(Path(args.placement_keystone_config))
        except ValueError as error:
            print(f"berth: {error}", file=sys.stderr)
            return None
        verifier = KeystoneVerifier(options)
    service = PlacementService(app)  # with no handoff: decided in another process
    for writer in writers:
        if writer.partition == service.partition:
            # the API's writes drive this writer themselves and are answered
            # once it decided them; its reads wait for the view (see Handoff)
            handoff = Handoff(functools.partial(step_all, [writer]))
            writer.on_decided = then(writer.on_decided, handoff.decided)
            writer.on_commit = then(writer.on_commit, handoff.committed)
            service.handoff = handoff
            break
    try:
        server = PlacementServer(
            service, *address, policy, cors, verifier.caller if verifier else None, reuse_port
        )
        bound = server.start()
    except RuntimeError as error:
        print(f"berth: {error} on {listen}", file=sys.stderr)
        return None
    logging.info("placement-api: serving http://%s:%d/", *bound)
    return bound
