"""The view's reservation rows, and the identifiers each holds: a row
inserted per reservation a batch created and updated per one it changed,
each once, with its state at the end of the batch."""

from __future__ import annotations

import json
from typing import Any

from projections.batch import Batch
from projections.state import PartitionState
from projections.view.plan import NO_EXPIRY, Plan, compact_json
from schemas.events import Claim, ClaimItem, ClaimSet, ClaimSpec, GuestAsks, TransactionRef
from schemas.outcomes import Kind, Outcome
from schemas.topology import TopologyFit

_CREATING = frozenset({Kind.ACCEPTED, Kind.PREPARED})
_STATUS_OF_KIND = {
    Kind.CONSUMED: "consumed",
    Kind.RELEASED: "released",
    Kind.EXPIRED: "expired",
    Kind.ABORTED: "aborted",
}

# a sentinel for NULL, as plan.NO_EXPIRY is (see there why)
_NO_GROUP = ""
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

_string = json.encoder.encode_basestring
_RESOURCES_JSON: dict[tuple[tuple[str, int], ...], str] = {}


def _resources_json(resources: dict[str, int]) -> str:
    """A request shape as JSON; shapes repeat, so their JSON is cached."""
    key = tuple(resources.items())
    text = _RESOURCES_JSON.get(key)
    if text is None:
        if len(_RESOURCES_JSON) > 10_000:
            _RESOURCES_JSON.clear()
        text = _RESOURCES_JSON[key] = compact_json(resources)
    return text


def _items_json(items: tuple[ClaimItem, ...]) -> str:
    """A claim's items as JSON; an item's fit, when it carries one, after
    its resources (``schemas.topology.TopologyFit`` without its defaults),
    then what the request asked that gave it (``guest``)."""
    if len(items) == 1 and items[0].__dict__["fit"] is None and items[0].__dict__["guest"] is None:
        # the common case, without the list and join
        item = items[0].__dict__
        return (
            f'[{{"provider_id":{_string(item["provider_id"])},'
            f'"resources":{_resources_json(item["resources"])}}}]'
        )
    parts = [
        f'{{"provider_id":{_string(item.provider_id)},"resources":{_resources_json(item.resources)}'
        + ("" if item.fit is None else f',"fit":{_fit_json(item.fit)}')
        + ("" if item.guest is None else f',"guest":{_fit_json(item.guest)}')
        + "}"
        for item in items
    ]
    return f"[{','.join(parts)}]"


def _fit_json(fit: TopologyFit | GuestAsks) -> str:
    return compact_json(fit.model_dump(mode="json", exclude_defaults=True))


def _tags(tags: frozenset[str]) -> str:
    return compact_json(sorted(tags))


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
        compact_json([i.model_dump(exclude_none=True) for i in spec.identifiers])
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


def write_reservations(
    plan: Plan, state: PartitionState, batch: Batch, held: dict[str, list[Any]] | None
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
    insert_reservations(plan, list(created.values()))
    plan.bulk(
        _UPDATE_RESERVATION,
        [
            (status, NO_EXPIRY if expires is None else expires, offset, rid)
            for status, expires, offset, rid in changed.values()
        ],
    )
    plan.bulk(_END_TRANSACTION, [(rid,) for rid in committed])
    # given back first: an identifier given back may be taken again in the batch
    plan.bulk(_DELETE_IDENTIFIER, sorted(given))
    plan.bulk(_INSERT_IDENTIFIER, list(taken.values()))


def insert_reservations(plan: Plan, rows: list[list[Any]]) -> None:
    """Insert new reservations' rows: plain ones, and ones with local rules."""
    plain = [row for row in rows if len(row) == _PLAIN_ROW]
    plan.bulk(_INSERT_PLAIN_RESERVATION, plain)
    if len(plain) < len(rows):
        plan.bulk(_INSERT_RESERVATION, [row for row in rows if len(row) == _RULES_ROW])


_FINAL_STATUSES = frozenset({"released", "expired", "aborted"})


def _hold_back(
    created: dict[str, list[Any]], changed: dict[str, list[Any]], held: dict[str, list[Any]]
) -> None:
    """A rebuild's rows (``rebuild.HeldBack.reservations``): move the rows
    of reservations still active from ``created`` to ``held``, and back once
    final, applying ``changed`` to the rows held as the UPDATE would. Only
    rows in ``created`` are held: a row with identifiers or a transaction is
    already written."""
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
    plan: Plan, state: PartitionState, created: dict[str, list[Any]], rids: list[str]
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
