"""An audit of one id: what the view holds of it, and every decision about it
in log order, each with the record that caused it.

An id may name a reservation, a consumer (all its reservations), a
transaction (its holds while they are pending, or once aborted: the view
forgets the transaction of a committed hold, which is then an ordinary
one), a provider or a pool; whatever it names, its
history is the outcomes recorded in the view under it or under its
reservations. With the log at hand, each decision also shows the record it
answered, read at the offset the outcome names: the audit trail runs from
the view back to the log, not to a copy of it. Nothing here writes.

An answer goes out just before the view commits what it decided, so an id
asked about at once may not be in the view yet: :func:`read_history_settled`
(``berth history``, ``GET /v1/history``) then waits for the view to commit
what the log held when asked, and reads again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, Row, select

from consumers.snapshot_source import ACTIVE_STATUSES
from ledger.log import Log
from projections.view.commits import VIEW_WAIT_S, read_settled
from projections.view.engine import one_snapshot
from projections.view.tables import (
    inventories,
    outcomes,
    pools,
    provider_row,
    provider_rows,
    providers,
    reservations,
)
from schemas.codec import EventDecodeError, decode_event
from schemas.outcomes import Outcome

_ENVELOPE = ("type", "event_id", "ts_ms", "correlation_id", "causation_id", "idempotency_key")


@dataclass(frozen=True, slots=True)
class Step:
    """One decision, and the record it answered (when the log was read)."""

    outcome: Outcome
    record: dict[str, Any] | None = None
    """The record's envelope (type, event id, producer timestamp,
    correlation, causation and idempotency ids); None when the log was not
    read, or ``{"error": ...}`` when it cannot show the record."""

    def to_dict(self) -> dict[str, Any]:
        data = self.outcome.to_dict()
        if self.record is not None:
            data["record"] = self.record
        return data


@dataclass(slots=True)
class History:
    subject: str
    names: list[str] = field(default_factory=list)
    """What the id names: ``reservation``, ``consumer``, ``transaction``,
    ``request`` (a placement request: its instances' reservations),
    ``provider``, ``pool``; empty when the view holds nothing of it but
    decisions (a claim that was rejected has no reservation)."""
    reservations: list[dict[str, Any]] = field(default_factory=list)
    provider: dict[str, Any] | None = None
    pool: dict[str, Any] | None = None
    steps: list[Step] = field(default_factory=list)
    """Every decision, by partition clock, then position in the log."""

    @property
    def found(self) -> bool:
        return bool(self.names or self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "names": self.names,
            "reservations": self.reservations,
            "provider": self.provider,
            "pool": self.pool,
            "history": [step.to_dict() for step in self.steps],
        }


def read_history(engine: Engine, subject: str, log: Log | None = None, topic: str = "") -> History:
    """``subject``'s history from the view; with ``log``, each decision's
    record read from ``topic`` as well."""
    found = History(subject)
    with one_snapshot(engine) as conn:  # a decision and its reservation, or neither
        rc = reservations.c
        instance = re.compile(re.escape(subject) + r"\.[0-9]+")
        for name, where in (
            ("reservation", rc.reservation_id == subject),
            ("consumer", rc.consumer_id == subject),
            ("transaction", rc.transaction_id == subject),
            # a placement request's instances are its consumers "ID.0", "ID.1", ...:
            # a range of the consumer index ('/' follows '.')
            ("request", (rc.consumer_id > f"{subject}.") & (rc.consumer_id < f"{subject}/")),
        ):
            rows = conn.execute(select(reservations).where(where)).all()
            if name == "request":
                rows = [row for row in rows if instance.fullmatch(row.consumer_id)]
            if rows:
                found.names.append(name)
                held = {r["reservation_id"] for r in found.reservations}
                found.reservations += [
                    _reservation(row) for row in rows if row.reservation_id not in held
                ]
        found.reservations.sort(key=lambda r: (r["partition"], r["created_offset"]))
        found.provider = _provider(conn, subject)
        if found.provider is not None:
            found.names.append("provider")
        pool = conn.execute(select(pools).where(pools.c.pool_id == subject)).first()
        if pool is not None:
            found.names.append("pool")
            found.pool = _plain(pool)
        subjects = {subject, *(r["reservation_id"] for r in found.reservations)}
        decided = [Outcome.from_dict(row._asdict()) for row in _outcome_rows(conn, subjects)]
    decided.sort(key=lambda o: (o.clock_ms, o.partition, o.offset, o.seq))
    records = _records(log, topic, decided) if log is not None else {}
    found.steps = [Step(o, records.get((o.partition, o.offset))) for o in decided]
    return found


def read_history_settled(
    engine: Engine,
    subject: str,
    log: Log,
    topic: str,
    partitions: int,
    records: bool = True,
    wait_s: float = VIEW_WAIT_S,
) -> History:
    """:func:`read_history` (each decision's record from ``topic`` of ``log``
    if ``records``), read again when it finds nothing while the view is
    behind what ``topic`` held when asked, once the view has committed that
    (``wait_s`` at most: :func:`~projections.view.commits.read_settled`)."""
    shown = log if records else None
    return read_settled(
        lambda: read_history(engine, subject, shown, topic),
        lambda history: history.found,
        engine,
        log,
        topic,
        partitions,
        wait_s,
    )


def _outcome_rows(conn: Connection, subjects: set[str]) -> list[Row[Any]]:
    rows: list[Row[Any]] = []
    ordered = sorted(subjects)
    # in slices: a consumer may hold more reservations than a statement binds
    for start in range(0, len(ordered), 500):
        chunk = ordered[start : start + 500]
        rows.extend(conn.execute(select(outcomes).where(outcomes.c.subject.in_(chunk))))
    return rows


def _reservation(row: Row[Any]) -> dict[str, Any]:
    data = _plain(row)
    # the columns a reservation never had
    for key in ("identifiers", "transaction_id", "transaction_priority", "transaction_position"):
        if data[key] is None:
            del data[key]
    return data


def _provider(conn: Connection, provider_id: str) -> dict[str, Any] | None:
    row = conn.execute(
        select(*provider_row())
        .select_from(provider_rows)
        .where(providers.c.provider_id == provider_id)
    ).first()
    if row is None:
        return None
    data = _plain(row)
    ic = inventories.c
    held = conn.execute(
        select(inventories).where(ic.provider_id == provider_id).order_by(ic.resource_class)
    )
    data["inventories"] = {
        r.resource_class: {k: v for k, v in _plain(r).items() if k not in _INVENTORY_KEYS}
        for r in held
    }
    # a claim lives in its providers' partition: the active reservations of
    # that partition are all the candidates (Placement's allocations of a provider)
    rc = reservations.c
    active = conn.execute(
        select(rc.reservation_id, rc.consumer_id, rc.status, rc["items"])
        .where(rc.partition == data["partition"], rc.status.in_(ACTIVE_STATUSES))
        .order_by(rc.reservation_id)
    )
    data["allocations"] = [
        {
            "reservation_id": row.reservation_id,
            "consumer_id": row.consumer_id,
            "status": row.status,
            "resources": item["resources"],
        }
        for row in active
        for item in row.items
        if item["provider_id"] == provider_id
    ]
    return data


_INVENTORY_KEYS = frozenset({"provider_id", "resource_class", "partition"})


def _plain(row: Row[Any]) -> dict[str, Any]:
    return dict(row._mapping)


def _records(log: Log, topic: str, decided: list[Outcome]) -> dict[tuple[int, int], dict[str, Any]]:
    """The envelope of each record the decisions answered, read once each."""
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for o in decided:
        at = (o.partition, o.offset)
        if at in found:
            continue
        read = log.read(topic, o.partition, o.offset, 1)
        if not read or read[0].offset != o.offset:
            found[at] = {"error": "the log no longer holds this record"}
            continue
        try:
            event = decode_event(read[0].value)
        except EventDecodeError as error:
            found[at] = {"error": f"the record does not decode: {error}"}
            continue
        found[at] = {
            key: value
            for key, value in event.model_dump(include=set(_ENVELOPE)).items()
            if value is not None
        }
    return found


def render(history: History) -> str:
    """The history as an operator reads it."""
    lines: list[str] = []
    if history.names:
        lines.append(f"{history.subject}: {', '.join(history.names)}")
    else:
        lines.append(f"{history.subject}: no reservation, provider or pool in the view")
    for r in history.reservations:
        lines.append(
            f"  reservation {r['reservation_id']} ({r['status']}): consumer {r['consumer_id']}, "
            f"project {r['project_id']}, partition {r['partition']}"
        )
        for item in r["items"]:
            amounts = ",".join(f"{rc}={n}" for rc, n in sorted(item["resources"].items()))
            lines.append(f"    {item['provider_id']}: {amounts}")
            if item.get("fit"):
                lines.append(f"      fit: {fit_text(item['fit'])}")
        lines.append(f"    lease {r['lease_ms']} ms, expires at {r['expires_at_ms']}")
    if history.provider is not None:
        p = history.provider
        lines.append(
            f"  provider {p['provider_id']} ({p['state']}), partition {p['partition']}, "
            f"{p['active_reservations']} active reservations"
        )
        lines.extend(_described(p))
        for rc, inv in p["inventories"].items():
            lines.append(
                f"    {rc}: capacity {inv['capacity']}, held {inv['held']}, "
                f"consumed {inv['consumed']}, free {inv['free']}"
            )
        for a in p["allocations"]:
            amounts = ",".join(f"{rc}={n}" for rc, n in sorted(a["resources"].items()))
            lines.append(
                f"    {a['status']} by {a['consumer_id']}: {amounts} ({a['reservation_id']})"
            )
    if history.pool is not None:
        pool = history.pool
        lines.append(
            f"  pool {pool['pool_id']} ({pool['kind']}), partition {pool['partition']}: "
            f"{pool['taken']} taken, {pool['free']} free"
        )
    count = len(history.steps)
    lines.append(f"history ({count} decision{'' if count == 1 else 's'}):")
    for step in history.steps:
        lines.append("  " + _step_line(step))
    return "\n".join(lines)


def _described(p: dict[str, Any]) -> list[str]:
    """A provider's description and latest metrics, the lines that have something to say."""
    lines = []
    where = {"zone": p["availability_zone"], "host": p["host"], "host_ip": p["host_ip"]}
    if any(where.values()):
        lines.append("    " + ", ".join(f"{k} {v}" for k, v in where.items() if v))
    if p["capabilities"]:
        lines.append(f"    capabilities {json.dumps(p['capabilities'], sort_keys=True)}")
    if p["metadata"]:
        lines.append(f"    metadata {json.dumps(p['metadata'], sort_keys=True)}")
    lines.extend(_cells(p["numa_cells"]))
    lines.extend(_devices(p["pci_devices"]))
    lines.extend(_held(p.get("topology_use") or {}))
    if p["metrics_at_ms"] is not None:
        shown = ", ".join(f"{k}={v:g}" for k, v in sorted(p["metrics"].items())) or "none"
        lines.append(
            f"    metrics as of {p['metrics_at_ms']}: {shown}; {p['num_io_ops']} I/O ops, "
            f"{p['build_failures']} build failures"
        )
    return lines


def _cells(cells: list[dict[str, Any]]) -> list[str]:
    """One line per NUMA cell: its CPUs as ranges, how they are set apart,
    its memory and huge pages, its socket when known."""
    lines = []
    for c in cells:
        parts = [f"cpus {_ranges(c['cpus']) or 'none'}"]
        for name in ("dedicated", "shared"):
            if c[name]:
                parts.append(f"{name} {_ranges(c[name])}")
        if c["siblings"]:
            parts.append("siblings " + " ".join(_ranges(g) for g in c["siblings"]))
        parts.append(f"{c['memory_mb']} MiB")
        parts.extend(f"{p['total']} pages of {p['size_kb']} KiB" for p in c["huge_pages"])
        if c.get("socket") is not None:
            parts.append(f"socket {c['socket']}")
        lines.append(f"    NUMA cell {c['cell_id']}: " + ", ".join(parts))
    return lines


def _devices(devices: list[dict[str, Any]]) -> list[str]:
    """One line per PCI device: address, type, ids, and what places it."""
    lines = []
    for d in devices:
        parts = [f"{d['vendor_id']}:{d['product_id']}"]
        if d["parent_address"] is not None:
            parts.append(f"of {d['parent_address']}")
        if d["numa_node"] is not None:
            parts.append(f"cell {d['numa_node']}")
        if d["physical_network"] is not None:
            parts.append(f"network {d['physical_network']}")
        if d["tags"]:
            parts.append(f"tags {json.dumps(d['tags'], sort_keys=True)}")
        lines.append(f"    PCI {d['address']} {d['device_type']}: " + ", ".join(parts))
    return lines


def _held(use: dict[str, Any]) -> list[str]:
    """What reservations hold of the cells and devices (the claims' fits):
    a line per reservation, and the huge pages held per cell."""
    cpus: dict[str, list[int]] = {}
    devices: dict[str, list[str]] = {}
    for cpu, rid in use.get("cpus", ()):
        cpus.setdefault(rid, []).append(cpu)
    for address, rid in use.get("devices", ()):
        devices.setdefault(rid, []).append(address)
    lines = []
    for rid in sorted(cpus.keys() | devices.keys()):
        parts = []
        if rid in cpus:
            parts.append(f"pinned CPUs {_ranges(sorted(cpus[rid]))}")
        if rid in devices:
            parts.append("PCI " + " ".join(devices[rid]))
        lines.append(f"    held by {rid}: " + ", ".join(parts))
    for cell, size_kb, count in use.get("pages", ()):
        lines.append(f"    NUMA cell {cell}: {count} pages of {size_kb} KiB held")
    memory = dict(use.get("memory", ()))
    vcpus = dict(use.get("vcpus", ()))
    for cell in sorted(memory.keys() | vcpus.keys()):
        lines.append(
            f"    NUMA cell {cell}: {memory.get(cell, 0)} MB of small pages and "
            f"{vcpus.get(cell, 0)} floating vCPUs held"
        )
    return lines


def fit_text(fit: dict[str, Any]) -> str:
    """A claim's fit (its JSON form) in a line: ``guest cell 0 on host cell
    1 (CPUs 6,7, 1024 MB of small pages), PCI 0000:81:00.2``."""
    parts = []
    for c in fit.get("cells", ()):
        held = [f"CPUs {','.join(str(cpu) for cpu in c['cpus'])}"] if c.get("cpus") else []
        held += [f"{p['count']} pages of {p['size_kb']} KiB" for p in c.get("pages", ())]
        if c.get("memory_mb"):
            held.append(f"{c['memory_mb']} MB of small pages")
        if c.get("vcpus"):
            held.append(f"{c['vcpus']} floating vCPUs")
        parts.append(
            f"guest cell {c['guest_cell']} on host cell {c['host_cell']}"
            + (f" ({', '.join(held)})" if held else "")
        )
    if fit.get("devices"):
        parts.append("PCI " + " ".join(fit["devices"]))
    return ", ".join(parts)


def _ranges(ids: list[int]) -> str:
    """Sorted CPU ids as ranges: ``0-3,8,10-11``."""
    spans: list[list[int]] = []
    for cpu in ids:
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _step_line(step: Step) -> str:
    o = step.outcome
    parts = [f"{o.partition}:{o.offset}.{o.seq}", f"clock {o.clock_ms}", o.kind]
    parts.append(o.subject)
    if o.expires_at_ms is not None:
        parts.append(f"expires at {o.expires_at_ms}")
    if o.identifiers:
        parts.append(" ".join(f"{pool}={value}" for pool, value in o.identifiers))
    if o.reasons:
        parts.append("; ".join(str(reason) for reason in o.reasons))
    record = step.record
    if record is not None:
        if "error" in record:
            parts.append(f"[{record['error']}]")
        else:
            ids = " ".join(
                f"{key}={record[key]}"
                for key in ("correlation_id", "causation_id", "idempotency_key")
                if key in record
            )
            parts.append(
                f"<- {record['type']} {record['event_id']} at {record['ts_ms']}"
                + (f" ({ids})" if ids else "")
            )
    return "  ".join(parts)
