"""Writes a batch of decisions to the read model, with the offset they reflect,
in one transaction: a batch that was already committed changes nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain
from operator import attrgetter
from typing import Any

from sqlalchemy import Connection, Engine, Executable, bindparam, delete, update

from projections.batch import Batch
from projections.state import PartitionState, ProviderState
from projections.view.engine import begin_writing
from projections.view.tables import (
    dead_letters,
    inventories,
    pools,
    providers,
)
from schemas.events import (
    Claim,
    ClaimItem,
    ClaimSet,
    ClaimSpec,
    PoolDefined,
    TransactionRef,
)
from schemas.outcomes import Kind, Outcome, Reason

_CREATING = frozenset({Kind.ACCEPTED, Kind.PREPARED})
_STATUS_OF_KIND = {
    Kind.CONSUMED: "consumed",
    Kind.RELEASED: "released",
    Kind.EXPIRED: "expired",
    Kind.ABORTED: "aborted",
}


class StaleBatch(Exception):
    """The view's committed offset is not where this batch starts: another
    writer owns the partition, or records were skipped. A broken invariant."""


class ViewWriter:
    """Commits batches of one or more partitions to the read model.

    A writer that ``holds_back`` (a number of rows) is a rebuild's, into a
    file that nothing reads until it is complete: it writes a reservation's
    row once, when the reservation is final (released, expired or aborted),
    and providers' usage once, rather than updating both batch after batch
    (a twentieth of a rebuild's instructions). :meth:`write_held_back` writes
    the rest when a partition's last batch is in, and a batch writes every
    row held once more than ``holds_back`` are (a few hundred bytes each;
    what is written is updated from then on, as a live writer does). Claims
    with identifiers or a transaction are written as a live writer does.

    A rebuild's writer also does not wait for the write lock, which the
    other replay processes and the index build take in turn: a batch whose
    lock is taken waits in memory, in order, while the process decides the
    next, and goes in the next transaction that gets the lock (at most
    :data:`_MOST_WAITING` wait; :meth:`flush` writes what still does)."""

    def __init__(self, engine: Engine, holds_back: int | None = None) -> None:
        self.engine = engine
        self.held_back = None if holds_back is None else _HeldBack(holds_back)
        self.waiting: list[_Planned | _Plan] = []

    def commit(self, state: PartitionState, batch: Batch) -> bool:
        """Write ``batch`` and its end offset atomically. False if the view
        already holds it (a redelivery); :class:`StaleBatch` on a gap. A
        rebuild's batch may wait for the lock (see the class)."""
        # rows are made before the transaction: with several writer processes
        # on one SQLite file, the write lock is then held only while writing
        plan = _Plan()
        held = self.held_back
        _write_outcomes(plan, batch)
        _write_reservations(plan, state, batch, None if held is None else held.reservations)
        _write_providers(plan, state, batch.end, None if held is None else held.usage)
        if held is not None and len(held.reservations) > held.at_most:
            held.write_reservations(plan)
        _write_pools(plan, state, batch)
        _write_dead_letters(plan, batch)
        planned = _Planned(plan, batch, state)
        if held is None:
            with self.engine.begin() as conn:
                return planned.run(conn)
        self._wait(planned)
        return True

    def write_held_back(self, state: PartitionState) -> None:
        """Write what was held back of ``state``'s partition (see the class):
        the rows of the reservations still active, and the usage of the
        providers, each with the offset of the batch that last changed it.
        Like a batch, they may wait for the lock."""
        held = self.held_back
        if held is None or not (held.reservations or held.usage):
            return
        plan = _Plan()
        held.write_reservations(plan)
        _write_usage(plan, state, sorted(held.usage.items()))
        held.usage.clear()
        self._wait(plan)

    def flush(self) -> None:
        """Write every batch still waiting for the lock, waiting for it."""
        self._write_waiting(wait=True)

    def _wait(self, writes: _Planned | _Plan) -> None:
        """Queue ``writes`` and write the queue if the lock is free, or
        once it is if the queue is full."""
        self.waiting.append(writes)
        self._write_waiting(wait=len(self.waiting) >= _MOST_WAITING)

    def _write_waiting(self, wait: bool) -> None:
        if not self.waiting:
            return
        conn = begin_writing(self.engine, wait)
        if conn is None:
            return
        with conn:
            for writes in self.waiting:
                writes.run(conn)
            conn.commit()
        self.waiting.clear()


_MOST_WAITING = 8
"""Batches a rebuild's writer keeps waiting for the write lock at most: the
lock is taken for well under the time a batch takes to decide, except by
the index build (about two seconds, some three batches of a process)."""


class _Planned:
    """A batch's writes, made ready, and the offset they take its partition to."""

    __slots__ = ("clock_ms", "end", "partition", "partitions", "plan", "start")

    def __init__(self, plan: _Plan, batch: Batch, state: PartitionState) -> None:
        self.plan = plan
        self.partition, self.start, self.end = batch.partition, batch.start, batch.end
        self.partitions, self.clock_ms = state.partitions, state.clock_ms

    def run(self, conn: Connection) -> bool:
        """Run the plan and move the offset, in ``conn``'s transaction. False
        if the view already holds the batch."""
        current = _lock_offset(conn, self.partition)
        if current is not None and current >= self.end:
            return False  # the plan consumed the state's change sets all the same
        if (current or 0) != self.start:
            raise StaleBatch(
                f"partition {self.partition}: view is at offset {current}, "
                f"batch starts at {self.start}"
            )
        self.plan.run(conn)
        row = (self.partitions, self.end, self.clock_ms, self.partition)
        _bulk(conn, _INSERT_OFFSET if current is None else _UPDATE_OFFSET, [row])
        return True


class _HeldBack:
    """What a rebuild's writer has not written yet, of one partition."""

    __slots__ = ("at_most", "reservations", "usage")

    def __init__(self, at_most: int) -> None:
        self.at_most = at_most
        self.reservations: dict[str, list[Any]] = {}
        """Rows of active reservations (no identifiers, no transaction), by id."""
        self.usage: dict[str, int] = {}
        """Providers whose usage changed -> end offset of the batch it last did."""

    def write_reservations(self, plan: _Plan) -> None:
        """Insert the rows held back, and hold them no longer."""
        _insert_reservations(plan, list(self.reservations.values()))
        self.reservations.clear()


# the offset row is read and written once per commit: plain SQL, without
# SQLAlchemy's statement compilation and result processing
_SELECT_OFFSET = 'SELECT next_offset FROM partition_offsets WHERE "partition" = ?'
_INSERT_OFFSET = (
    'INSERT INTO partition_offsets (partitions, next_offset, clock_ms, "partition") '
    "VALUES (?, ?, ?, ?)"
)
_UPDATE_OFFSET = (
    "UPDATE partition_offsets SET partitions = ?, next_offset = ?, clock_ms = ? "
    'WHERE "partition" = ?'
)


def _lock_offset(conn: Connection, partition: int) -> int | None:
    sql = _SELECT_OFFSET
    if conn.dialect.paramstyle != "qmark":
        sql = sql.replace("?", "%s")
    if conn.dialect.name == "postgresql":
        sql += " FOR UPDATE"
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, (partition,))
        row = cursor.fetchone()
    finally:
        cursor.close()
    return None if row is None else int(row[0])


class _Plan:
    """A batch's writes, in order, made ready before its transaction begins."""

    __slots__ = ("steps",)

    def __init__(self) -> None:
        self.steps: list[tuple[Any, Any]] = []

    def bulk(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """``sql`` with ``?`` placeholders, once per row (see :func:`_bulk`)."""
        if rows:
            self.steps.append((sql, rows))

    def execute(self, statement: Executable, parameters: Any = None) -> None:
        """A SQLAlchemy statement, for the rare changes (providers reshaped,
        pools defined, dead letters)."""
        self.steps.append((statement, parameters))

    def run(self, conn: Connection) -> None:
        for what, parameters in self.steps:
            if isinstance(what, str):
                _bulk(conn, what, parameters)
            else:
                conn.execute(what, parameters)


def _bulk(conn: Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """executemany straight on the driver's cursor: the hot path writes up to
    millions of rows per replay, and SQLAlchemy's per-row parameter processing
    costs more than the database does. ``sql`` uses ``?`` placeholders.

    An INSERT goes as statements of many rows each: the database then prepares,
    steps and resets a statement per group of rows rather than per row, which
    cuts SQLite's cost per inserted row by about a third."""
    if not rows:
        return
    qmark = conn.dialect.paramstyle == "qmark"
    width = len(rows[0])
    per = _PARAMETERS_PER_STATEMENT // width
    full = len(rows) // per * per if sql.startswith("INSERT") else 0
    cursor = conn.connection.cursor()
    try:
        if full:
            flat = list(chain.from_iterable(rows))
            step = per * width
            cursor.executemany(
                _multi_row(sql, per, qmark),
                [flat[i : i + step] for i in range(0, full * width, step)],
            )
            rows = rows[full:]
        if rows:
            cursor.executemany(sql if qmark else sql.replace("?", "%s"), rows)
    finally:
        cursor.close()


_PARAMETERS_PER_STATEMENT = 900
"""Under 999, the most parameters a statement may have on old SQLite builds."""

_MULTI_ROW: dict[tuple[str, int, bool], str] = {}


def _multi_row(sql: str, rows: int, qmark: bool) -> str:
    """``sql``, an ``INSERT ... VALUES (?, ...)``, inserting ``rows`` rows at once."""
    key = (sql, rows, qmark)
    statement = _MULTI_ROW.get(key)
    if statement is None:
        head, _, values = sql.rpartition(" VALUES ")
        statement = f"{head} VALUES {', '.join([values] * rows)}"
        if not qmark:
            statement = statement.replace("?", "%s")
        statement = _MULTI_ROW[key] = statement
    return statement


# The sqlite3 module binds None through its adapter lookup, which costs as
# much as three other values: a column the hot rows leave empty is a NULL in
# the statement, or a sentinel the statement turns into NULL (no expiry is -1,
# no anti-affinity group is ""; neither is a valid value).
_NO_EXPIRY = -1
_NO_GROUP = ""
_OUTCOME_COLUMNS = (
    '"partition", "offset", seq, kind, event_id, subject, clock_ms, reasons, expires_at_ms'
)
_INSERT_OUTCOME = (
    f"INSERT INTO outcomes ({_OUTCOME_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULLIF(?, -1))"
)
_INSERT_OUTCOME_WITH_REASONS = (
    f"INSERT INTO outcomes ({_OUTCOME_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, -1))"
)
_INSERT_OUTCOME_WITH_IDENTIFIERS = (
    f"INSERT INTO outcomes ({_OUTCOME_COLUMNS}, identifiers) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_RESERVATION_COLUMNS = (
    'reservation_id, "partition", status, consumer_id, project_id, '
    "items, lease_ms, expires_at_ms, created_offset, updated_offset, "
    # the local rules last: most claims have none, and their rows stop before
    "anti_affinity_group, tags, require_with_tags, require_without_tags"
)
_INSERT_PLAIN_RESERVATION = (
    f"INSERT INTO reservations ({_RESERVATION_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, '[]', '[]', '[]')"
)
_INSERT_RESERVATION = (
    f"INSERT INTO reservations ({_RESERVATION_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), ?, ?, ?)"
)
_INSERT_RESERVATION_WITH_EXTRAS = (
    f"INSERT INTO reservations ({_RESERVATION_COLUMNS}, identifiers, transaction_id, "
    "transaction_priority, transaction_position) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE_RESERVATION = (
    "UPDATE reservations SET status = ?, "
    "expires_at_ms = COALESCE(NULLIF(?, -1), expires_at_ms), "
    # no update leaves a hold pending: what only a pending hold has goes
    "updated_offset = ?, transaction_priority = NULL, transaction_position = NULL "
    "WHERE reservation_id = ?"
)
_END_TRANSACTION = "UPDATE reservations SET transaction_id = NULL WHERE reservation_id = ?"
_INSERT_IDENTIFIER = (
    'INSERT INTO reservation_identifiers (pool_id, value, reservation_id, "partition", '
    "position) VALUES (?, ?, ?, ?, ?)"
)
_DELETE_IDENTIFIER = "DELETE FROM reservation_identifiers WHERE pool_id = ? AND value = ?"
_EMPTY_JSON_LIST = "[]"


_json = json.JSONEncoder(separators=(",", ":")).encode
_string = json.encoder.encode_basestring
_RESOURCES_JSON: dict[tuple[tuple[str, int], ...], str] = {}


def _resources_json(resources: dict[str, int]) -> str:
    """A request shape as JSON; shapes repeat, so their JSON is cached."""
    key = tuple(resources.items())
    text = _RESOURCES_JSON.get(key)
    if text is None:
        if len(_RESOURCES_JSON) > 10_000:
            _RESOURCES_JSON.clear()
        text = _RESOURCES_JSON[key] = _json(resources)
    return text


_REASONS_JSON: dict[tuple[Reason, ...], str] = {}


def _reasons_json(reasons: tuple[Reason, ...]) -> str:
    """A decision's reasons as JSON; most repeat (every consume or release of
    a reservation already final says the same), so their JSON is cached."""
    text = _REASONS_JSON.get(reasons)
    if text is None:
        if len(_REASONS_JSON) > 10_000:
            _REASONS_JSON.clear()
        text = _REASONS_JSON[reasons] = _json([r.to_dict() for r in reasons])
    return text


def _items_json(items: tuple[ClaimItem, ...]) -> str:
    """A claim's items as JSON."""
    if len(items) == 1:  # the common case, without the list and join
        item = items[0].__dict__
        return (
            f'[{{"provider_id":{_string(item["provider_id"])},'
            f'"resources":{_resources_json(item["resources"])}}}]'
        )
    parts = [
        f'{{"provider_id":{_string(item.provider_id)},"resources":{_resources_json(item.resources)}}}'
        for item in items
    ]
    return f"[{','.join(parts)}]"


_OUTCOMES_OF = attrgetter("outcomes")


def _write_outcomes(plan: _Plan, batch: Batch) -> None:
    # an Outcome is a NamedTuple in the table's column order: the common row
    # (no reasons, no identifiers) is sliced out by unpacking, in C
    no_expiry = _NO_EXPIRY
    plain = [
        (
            partition,
            offset,
            seq,
            kind,
            event,
            subject,
            clock,
            no_expiry if expires is None else expires,
        )
        for applied in batch.applied
        for partition, offset, seq, kind, event, subject, clock, why, expires, ids in (
            applied.outcomes
        )
        if not why and not ids
    ]
    if len(plain) < sum(map(len, map(_OUTCOMES_OF, batch.applied))):
        rejected: list[tuple[Any, ...]] = []
        given: list[tuple[Any, ...]] = []  # outcomes that give or give back identifiers
        for applied in batch.applied:
            for o in applied.outcomes:
                if not o.reasons and not o.identifiers:
                    continue
                reasons = _reasons_json(o.reasons) if o.reasons else None
                if o.identifiers:
                    given.append((*o[:7], reasons, o.expires_at_ms, _json(o.identifiers)))
                else:
                    expires = o.expires_at_ms
                    rejected.append((*o[:7], reasons, no_expiry if expires is None else expires))
        plan.bulk(_INSERT_OUTCOME_WITH_REASONS, rejected)
        plan.bulk(_INSERT_OUTCOME_WITH_IDENTIFIERS, given)
    plan.bulk(_INSERT_OUTCOME, plain)


def _tags(tags: frozenset[str]) -> str:
    return _json(sorted(tags))


def _claim_row(claim: ClaimSpec, partition: int, offset: int, expires_at_ms: int) -> list[Any]:
    """A new reservation's row; without the local rules' columns when it has
    none, as most claims (the statement fills them in rather than binding four
    more values a row)."""
    f = claim.__dict__  # one lookup a field: pydantic's attribute hook costs two
    row = [
        f["reservation_id"],
        partition,
        "held",
        f["consumer_id"],
        f["project_id"],
        _items_json(f["items"]),
        f["lease_ms"],
        expires_at_ms,
        offset,
        offset,
    ]
    group, tags = f["anti_affinity_group"], f["tags"]
    with_tags, without_tags = f["require_with_tags"], f["require_without_tags"]
    if group is not None or tags or with_tags or without_tags:
        row += (
            group or _NO_GROUP,
            _tags(tags) if tags else _EMPTY_JSON_LIST,
            _tags(with_tags) if with_tags else _EMPTY_JSON_LIST,
            _tags(without_tags) if without_tags else _EMPTY_JSON_LIST,
        )
    return row


# positions in a reservation row: a plain row ends with the updated offset,
# one with rules after the four rules, and one with extras after those
_STATUS, _EXPIRES, _UPDATED = 2, 7, 9
_TRANSACTION, _PRIORITY, _POSITION = 15, 16, 17
_PLAIN_ROW = 10
_RULES_ROW = 14
_NO_RULES = (_NO_GROUP, _EMPTY_JSON_LIST, _EMPTY_JSON_LIST, _EMPTY_JSON_LIST)


def _spec_row(
    spec: ClaimSpec, transaction: TransactionRef | None, partition: int, o: Outcome
) -> list[Any]:
    """The row of a reservation a claim set, or a claim taking identifiers, created."""
    assert o.expires_at_ms is not None
    row = _claim_row(spec, partition, o.offset, o.expires_at_ms)
    if not spec.identifiers and transaction is None:
        return row
    if len(row) == _PLAIN_ROW:
        row += _NO_RULES
    row.append(
        _json([i.model_dump(exclude_none=True) for i in spec.identifiers])
        if spec.identifiers
        else None
    )
    if transaction is None:
        row.extend((None, None, None))
    else:
        row[_STATUS] = "pending"
        # its priority and place among the transaction's holds: as the state
        # has them at the end of the batch, if it is pending still
        row.extend((transaction.transaction_id, None, None))
    return row


class _Members:
    """The member claims of the claim set being written, by reservation id."""

    __slots__ = ("by_id", "event")

    def __init__(self) -> None:
        self.event: ClaimSet | None = None
        self.by_id: dict[str, ClaimSpec] = {}

    def of(self, event: ClaimSet, rid: str) -> ClaimSpec:
        if event is not self.event:
            self.event = event
            self.by_id = {spec.reservation_id: spec for spec in event.claims}
        return self.by_id[rid]


def _write_reservations(
    plan: _Plan, state: PartitionState, batch: Batch, held: dict[str, list[Any]] | None
) -> None:
    """Insert the reservations this batch created and update the others, each
    once, with its state at the end of the batch; likewise the identifiers they
    hold (a row per identifier held at the end of the batch). Rows ``held``
    back are changed where they are (see :func:`_hold_back`)."""
    partition = batch.partition
    creating, renewed, committed_ = _CREATING, Kind.RENEWED, Kind.COMMITTED
    created: dict[str, list[Any]] = {}
    with_extras: list[str] = []  # created rows with identifiers or a transaction
    changed: dict[str, list[Any]] = {}  # [status, expires_at_ms | None, offset, id]
    committed: list[str] = []  # created before this batch, no longer pending
    taken: dict[tuple[str, str], tuple[Any, ...]] = {}  # identifier rows to insert
    given: set[tuple[str, str]] = set()  # identifier rows to delete
    members = _Members()
    for applied in batch.applied:
        for o in applied.outcomes:
            kind = o.kind
            if kind in creating:
                event = applied.event
                identifiers = o.identifiers
                if not identifiers and type(event) is Claim:  # the hot path
                    assert o.expires_at_ms is not None
                    created[o.subject] = _claim_row(event, partition, o.offset, o.expires_at_ms)
                    continue
                if isinstance(event, ClaimSet):
                    spec: ClaimSpec = members.of(event, o.subject)
                    transaction = event.transaction
                else:
                    assert isinstance(event, Claim)
                    spec, transaction = event, None
                new_row = created[o.subject] = _spec_row(spec, transaction, partition, o)
                if len(new_row) > _RULES_ROW:  # not a claim set's member without any
                    with_extras.append(o.subject)
                for position, identifier in enumerate(identifiers):
                    taken[identifier] = (*identifier, o.subject, partition, position)
                continue
            if kind == renewed:
                status, expires = "held", o.expires_at_ms
            elif kind in _STATUS_OF_KIND:
                status, expires = _STATUS_OF_KIND[kind], None
                if o.identifiers:
                    for identifier in o.identifiers:
                        if taken.pop(identifier, None) is None:
                            given.add(identifier)  # in the view since an earlier batch
            elif kind == committed_:
                status, expires = "held", o.expires_at_ms
                row = created.get(o.subject)
                if row is not None:
                    row[_TRANSACTION : _POSITION + 1] = (None, None, None)
                else:
                    committed.append(o.subject)
            else:
                continue
            row = created.get(o.subject)
            if row is not None:
                row[_STATUS] = status
                if expires is not None:
                    row[_EXPIRES] = expires
                row[_UPDATED] = o.offset
                continue
            known = changed.get(o.subject)
            if known is not None and expires is None:
                expires = known[1]
            changed[o.subject] = [status, expires, o.offset, o.subject]
    if with_extras:
        _insert_with_extras(plan, state, created, with_extras)
    if held is not None:
        _hold_back(created, changed, held)
    _insert_reservations(plan, list(created.values()))
    plan.bulk(
        _UPDATE_RESERVATION,
        [
            (status, _NO_EXPIRY if expires is None else expires, offset, rid)
            for status, expires, offset, rid in changed.values()
        ],
    )
    plan.bulk(_END_TRANSACTION, [(rid,) for rid in committed])
    # given back first: an identifier given back may be taken again in the batch
    plan.bulk(_DELETE_IDENTIFIER, sorted(given))
    plan.bulk(_INSERT_IDENTIFIER, list(taken.values()))


def _insert_reservations(plan: _Plan, rows: list[list[Any]]) -> None:
    """Insert new reservations' rows: plain ones, and ones with local rules."""
    plain = [row for row in rows if len(row) == _PLAIN_ROW]
    plan.bulk(_INSERT_PLAIN_RESERVATION, plain)
    if len(plain) < len(rows):
        plan.bulk(_INSERT_RESERVATION, [row for row in rows if len(row) == _RULES_ROW])


_FINAL_STATUSES = frozenset({"released", "expired", "aborted"})


def _hold_back(
    created: dict[str, list[Any]], changed: dict[str, list[Any]], held: dict[str, list[Any]]
) -> None:
    """Move the rows of reservations still active from ``created`` to
    ``held``, and back once final, applying ``changed`` to the rows held as
    the UPDATE would. Only rows in ``created`` are held: a row with
    identifiers or a transaction is already written."""
    for rid in [rid for rid in changed if rid in held]:
        status, expires, offset, _ = changed.pop(rid)
        row = held[rid]
        row[_STATUS] = status
        if expires is not None:
            row[_EXPIRES] = expires
        row[_UPDATED] = offset
        if status in _FINAL_STATUSES:
            created[rid] = held.pop(rid)
    for rid in [rid for rid, row in created.items() if row[_STATUS] not in _FINAL_STATUSES]:
        held[rid] = created.pop(rid)


def _insert_with_extras(
    plan: _Plan, state: PartitionState, created: dict[str, list[Any]], rids: list[str]
) -> None:
    """Insert the created rows that have extras (identifiers asked for, or a
    transaction), taking them out of ``created``; plain claims' rows stay."""
    rows: list[tuple[Any, ...]] = []
    places: dict[str, tuple[int, dict[str, int]]] = {}
    for rid in rids:
        row = created.pop(rid)
        if row[_STATUS] == "pending":
            priority, place = _pending_places(state, row[_TRANSACTION], places)
            row[_PRIORITY] = priority
            row[_POSITION] = place[rid]
        else:
            row[_PRIORITY] = None
        rows.append(tuple(row))
    plan.bulk(_INSERT_RESERVATION_WITH_EXTRAS, rows)


def _pending_places(
    state: PartitionState, transaction_id: str, known: dict[str, tuple[int, dict[str, int]]]
) -> tuple[int, dict[str, int]]:
    """A pending transaction's priority and the place of each of its holds, as
    the projector keeps them at the end of the batch: the priority is the one
    the transaction's first set here gave, and the holds are committed or
    aborted in the order they were held. The holds a batch creates follow those
    of earlier batches, so (created_offset, place) orders them all."""
    entry = known.get(transaction_id)
    if entry is None:
        pending = state.transactions[transaction_id]
        places = {rid: i for i, rid in enumerate(pending.reservation_ids)}
        entry = known[transaction_id] = (pending.priority[0], places)
    return entry


_UPDATE_USAGE = (
    "UPDATE inventories SET held = ?, consumed = ?, free = ? "
    "WHERE provider_id = ? AND resource_class = ?"
)
_UPDATE_ACTIVE = (
    "UPDATE providers SET active_reservations = ?, updated_offset = ? WHERE provider_id = ?"
)


def _write_providers(
    plan: _Plan, state: PartitionState, offset: int, held: dict[str, int] | None
) -> None:
    """Rewrite the providers that changed shape; update usage of the others,
    or note in ``held`` that it changed in the batch ending at ``offset``."""
    reshaped = sorted(state.reshaped)
    used = state.touched - state.reshaped
    state.reshaped.clear()
    state.touched.clear()
    if reshaped:
        _rewrite_providers(plan, state, reshaped, offset)
    if held is None:
        _write_usage(plan, state, [(pid, offset) for pid in sorted(used)])
        return
    for pid in reshaped:
        held.pop(pid, None)  # rewritten as it is now
    for pid in used:
        held[pid] = offset


def _write_usage(plan: _Plan, state: PartitionState, changed: list[tuple[str, int]]) -> None:
    """Update the usage of providers, each with the offset of the batch that
    changed it last."""
    usage: list[tuple[Any, ...]] = []
    active: list[tuple[Any, ...]] = []
    for pid, offset in changed:
        provider = state.providers.get(pid)
        if provider is None:
            continue
        layout = provider.layout
        held, consumed = provider.held, provider.consumed
        for i, rc in enumerate(layout.classes):
            free = layout.limits[i].capacity - held[i] - consumed[i]
            usage.append((held[i], consumed[i], free, pid, rc))
        active.append((provider.active, offset, pid))
    plan.bulk(_UPDATE_USAGE, usage)
    plan.bulk(_UPDATE_ACTIVE, active)


_INSERT_PROVIDER = (
    'INSERT INTO providers (provider_id, "partition", name, state, traits, aggregates, '
    "active_reservations, updated_offset) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_INVENTORY = (
    'INSERT INTO inventories (provider_id, resource_class, "partition", total, reserved, '
    "min_unit, max_unit, step_size, allocation_ratio, capacity, held, consumed, free) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# SQLAlchemy's JSON type writes json.dumps' default form: rows written here
# read back the same as rows it wrote
_json_column = json.dumps


def _rewrite_providers(
    plan: _Plan, state: PartitionState, reshaped: list[str], offset: int
) -> None:
    for chunk in _chunks(reshaped, 500):
        plan.execute(delete(inventories).where(inventories.c.provider_id.in_(chunk)))
        plan.execute(delete(providers).where(providers.c.provider_id.in_(chunk)))
    present = [state.providers[pid] for pid in reshaped if pid in state.providers]
    partition = state.partition
    plan.bulk(_INSERT_PROVIDER, [_provider_row(p, partition, offset) for p in present])
    plan.bulk(
        _INSERT_INVENTORY,
        [row for p in present for row in _inventory_rows(p, partition)],
    )


def _provider_row(provider: ProviderState, partition: int, offset: int) -> tuple[Any, ...]:
    return (
        provider.provider_id,
        partition,
        provider.name,
        provider.state,
        _json_column(sorted(provider.traits)),
        _json_column(sorted(provider.aggregates)),
        provider.active,
        offset,
    )


def _inventory_rows(provider: ProviderState, partition: int) -> list[tuple[Any, ...]]:
    layout = provider.layout
    held, consumed = provider.held, provider.consumed
    pid = provider.provider_id
    rows = []
    for i, rc in enumerate(layout.classes):
        limits = layout.limits[i]
        rows.append(
            (
                pid,
                rc,
                partition,
                limits.total,
                limits.reserved,
                limits.min_unit,
                limits.max_unit,
                limits.step_size,
                limits.allocation_ratio,
                limits.capacity,
                held[i],
                consumed[i],
                limits.capacity - held[i] - consumed[i],
            )
        )
    return rows


def _definition(event: PoolDefined) -> dict[str, Any]:
    """What :meth:`PoolSpace.of` needs to rebuild the pool."""
    return {
        "kind": event.kind,
        "cidr": event.cidr,
        "first": event.first,
        "last": event.last,
        "members": list(event.members),
        "excluded": sorted(event.excluded),
    }


def _write_pools(plan: _Plan, state: PartitionState, batch: Batch) -> None:
    """Rewrite the pools (re)defined in this batch; update the counts of the others."""
    if not state.pools_touched:
        return
    touched = sorted(state.pools_touched)
    state.pools_touched.clear()
    defined: dict[str, PoolDefined] = {}
    for applied in batch.applied:
        event = applied.event
        if type(event) is PoolDefined and applied.outcomes[-1].kind == Kind.APPLIED:
            defined[event.pool_id] = event  # the last definition of the batch stands
    if defined:
        ids = sorted(defined)
        for chunk in _chunks(ids, 500):
            plan.execute(delete(pools).where(pools.c.pool_id.in_(chunk)))
        plan.execute(
            pools.insert(),
            [
                {
                    "pool_id": pid,
                    "partition": state.partition,
                    "kind": defined[pid].kind,
                    "definition": _definition(defined[pid]),
                    "size": state.pools[pid].space.size,
                    "taken": state.pools[pid].taken,
                    "free": state.pools[pid].free.count,
                    "updated_offset": batch.end,
                }
                for pid in ids
            ],
        )
    counts = [
        {
            "b_pool_id": pid,
            "taken": pool.taken,
            "free": pool.free.count,
            "updated_offset": batch.end,
        }
        for pid in touched
        if pid not in defined and (pool := state.pools.get(pid)) is not None
    ]
    if counts:
        plan.execute(
            update(pools)
            .where(pools.c.pool_id == bindparam("b_pool_id"))
            .values(
                taken=bindparam("taken"),
                free=bindparam("free"),
                updated_offset=bindparam("updated_offset"),
            ),
            counts,
        )


def _write_dead_letters(plan: _Plan, batch: Batch) -> None:
    if batch.dead:
        plan.execute(
            dead_letters.insert(),
            [
                {
                    "partition": batch.partition,
                    "offset": d.offset,
                    "reason": d.reason,
                    "value": d.value.decode("utf-8", errors="replace"),
                }
                for d in batch.dead
            ],
        )


def _chunks(items: Sequence[str], size: int) -> list[Sequence[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
