"""Administration through events: ``berth provider`` (register, inventory,
state, traits, aggregates, describe, metrics, retire) and ``berth pool define``."""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
import uuid
from pathlib import Path
from typing import get_args

from berth.app import App
from berth.cli.common import Commands, backend_options, remote_option, settings_from
from schemas.events import DescribedField, PoolKind, ProviderStateName
from schemas.outcomes import Kind


def add_commands(commands: Commands) -> None:
    commands.group("providers and pools")
    provider = commands.add(
        "provider",
        "register, inventory, state, traits, aggregates, describe, report metrics of, "
        "retire a provider",
        cmd_provider,
    )
    provider_sub = provider.add_subparsers(dest="provider_command", required=True)

    def provider_command(name: str, help_: str) -> argparse.ArgumentParser:
        p = provider_sub.add_parser(name, help=help_)
        backend_options(p)
        remote_option(p)
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
    describe = provider_command(
        "describe",
        "set the provider's zone, host, address, capabilities, metadata, NUMA cells or PCI "
        "devices (only those given)",
    )
    describe.add_argument("--availability-zone", default=None)
    describe.add_argument("--host", default=None, help="its host name (default: its name)")
    describe.add_argument("--host-ip", default=None, help="its address, for SimpleCIDRAffinity")
    describe.add_argument(
        "--capabilities",
        default=None,
        metavar="JSON",
        help='hypervisor facts, replacing the ones held, e.g. \'{"hypervisor_type": "QEMU", '
        '"hypervisor_version": 8002000, "supported_instances": [["x86_64", "qemu", "hvm"]], '
        '"cpu_info": {"arch": "x86_64"}}\'',
    )
    describe.add_argument(
        "--metadata",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="free-form metadata, replacing what is held (repeat for each key)",
    )
    describe.add_argument(
        "--topology",
        default=None,
        metavar="FILE",
        help="its NUMA cells and/or PCI devices, each replacing what is held: a JSON or TOML "
        "(.toml) file with numa_cells = [{cell_id, cpus, siblings, dedicated, shared, "
        "memory_mb, huge_pages = [{size_kb, total}]}] and pci_devices = [{address, vendor_id, "
        "product_id, device_type, parent_address, numa_node, physical_network, tags}] "
        "(docs/scheduling.md, NUMA cells and PCI devices)",
    )
    describe.add_argument(
        "--unset",
        action="append",
        default=[],
        choices=get_args(DescribedField),
        help="clear a field (repeatable)",
    )
    metrics = provider_command(
        "metrics", "report the provider's metrics, as of now (replacing the ones held)"
    )
    metrics.add_argument("metrics", nargs="*", metavar="NAME=VALUE", help="e.g. cpu.percent=12.5")
    metrics.add_argument("--io-ops", type=int, default=None, help="I/O operations in flight")
    metrics.add_argument("--build-failures", type=int, default=None, help="recent build failures")
    provider_command("retire", "the provider leaves (refused while it holds reservations)")

    pool = commands.add("pool", "identifier pools (addresses, VNIs, VLANs, ranges, sets)", cmd_pool)
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


def cmd_provider(args: argparse.Namespace) -> int:
    from berth.client import Decisions, Publisher, PublishError
    from schemas.codec import EventDecodeError, validate_event

    try:
        event = validate_event(_provider_event(args))
    except (EventDecodeError, ValueError) as error:
        print(f"berth: provider {args.provider_id}: {error}", file=sys.stderr)
        return 2
    if args.api is not None:
        from berth.api import remote

        return remote.provider(args, event)
    with App(settings_from(args), migrate=False) as app:
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
    elif kind == "describe":
        fields = _description(args)
    elif kind == "metrics":
        fields = _metrics(args)
    else:
        fields = {"type": "provider_retired"}
    return {
        **fields,
        "event_id": f"{kind}-{pid}-{uuid.uuid4().hex[:12]}",
        "ts_ms": wall_clock_ms(),
        "partition_key": pid,
        "provider_id": pid,
    }


def _description(args: argparse.Namespace) -> dict[str, object]:
    fields: dict[str, object] = {"type": "provider_described", "unset": args.unset}
    given = {
        "availability_zone": args.availability_zone,
        "host": args.host,
        "host_ip": args.host_ip,
    }
    fields.update({name: value for name, value in given.items() if value is not None})
    if args.capabilities is not None:
        try:
            fields["capabilities"] = json.loads(args.capabilities)
        except json.JSONDecodeError as error:
            raise ValueError(f"--capabilities is not JSON: {error}") from None
    if args.metadata is not None:
        fields["metadata"] = dict(_pair(item, "--metadata KEY=VALUE") for item in args.metadata)
    if args.topology is not None:
        fields.update(read_topology(Path(args.topology)))
    return fields


TOPOLOGY_KEYS = ("numa_cells", "pci_devices")


def read_topology(path: Path) -> dict[str, object]:
    """A topology file's ``numa_cells`` and ``pci_devices`` (ValueError
    naming the file when it cannot be read or says anything else)."""
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as error:  # JSON's and TOML's errors are ValueErrors
        raise ValueError(f"--topology {path}: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"--topology {path}: a table of {' and '.join(TOPOLOGY_KEYS)}")
    other = sorted(set(data) - set(TOPOLOGY_KEYS))
    if other or not data:
        said = f"not {', '.join(other)}" if other else "neither is given"
        raise ValueError(f"--topology {path}: gives numa_cells or pci_devices, {said}")
    return dict(data)


def _metrics(args: argparse.Namespace) -> dict[str, object]:
    fields: dict[str, object] = {"type": "metrics_reported"}
    if args.metrics:
        fields["metrics"] = {
            name: _number(value, name)
            for name, value in (_pair(item, "a metric NAME=VALUE") for item in args.metrics)
        }
    if args.io_ops is not None:
        fields["num_io_ops"] = args.io_ops
    if args.build_failures is not None:
        fields["build_failures"] = args.build_failures
    return fields


def _pair(text: str, what: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not name or not equals:
        raise ValueError(f"{what}: not {text!r}")
    return name.strip(), value.strip()


def _number(text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"metric {name}: {text!r} is not a number") from None


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


def cmd_pool(args: argparse.Namespace) -> int:
    from berth.client import Publisher, PublishError
    from schemas.codec import EventDecodeError

    with App(settings_from(args), migrate=False) as app:
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
