"""The view's rows of what a batch decided on each record: an outcome row
per decision, a dead letter per record that did not decode.

A metrics report's decision has no row: reports come every few seconds
from every provider, and a row each would grow the table without bound
for nothing an audit needs (the provider's row says which report its
metrics are from). Its outcome is published on the outcomes topic like
every other, so ``--wait`` and a replay's verification see it."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from projections.batch import Batch
from projections.view.plan import NO_EXPIRY, Plan, compact_json
from projections.view.tables import dead_letters
from schemas.events import MetricsReported
from schemas.outcomes import Outcome, Reason

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

_REASONS_JSON: dict[tuple[Reason, ...], str] = {}


def _reasons_json(reasons: tuple[Reason, ...]) -> str:
    """A decision's reasons as JSON; most repeat (every consume or release of
    a reservation already final says the same), so their JSON is cached."""
    text = _REASONS_JSON.get(reasons)
    if text is None:
        if len(_REASONS_JSON) > 10_000:
            _REASONS_JSON.clear()
        text = _REASONS_JSON[reasons] = compact_json([r.to_dict() for r in reasons])
    return text


def _decisions(batch: Batch) -> list[list[Outcome]]:
    """Each record's outcomes that have rows: a metrics report's own decision,
    always its record's last outcome, has none (the expiries its clock
    released before it do)."""
    if not any(type(a.event) is MetricsReported for a in batch.applied):
        return list(map(_OUTCOMES_OF, batch.applied))
    return [
        a.outcomes[:-1] if type(a.event) is MetricsReported else a.outcomes for a in batch.applied
    ]


_OUTCOMES_OF = attrgetter("outcomes")


def write_outcomes(plan: Plan, batch: Batch) -> None:
    # an Outcome is a NamedTuple in the table's column order: the common row
    # (no reasons, no identifiers) is sliced out by unpacking, in C
    no_expiry = NO_EXPIRY
    decided = _decisions(batch)
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
        for outcomes in decided
        for partition, offset, seq, kind, event, subject, clock, why, expires, ids in outcomes
        if not why and not ids
    ]
    if len(plain) < sum(map(len, decided)):
        rejected: list[tuple[Any, ...]] = []
        given: list[tuple[Any, ...]] = []  # outcomes that give or give back identifiers
        for outcomes in decided:
            for o in outcomes:
                if not o.reasons and not o.identifiers:
                    continue
                reasons = _reasons_json(o.reasons) if o.reasons else None
                if o.identifiers:
                    given.append((*o[:7], reasons, o.expires_at_ms, compact_json(o.identifiers)))
                else:
                    expires = o.expires_at_ms
                    rejected.append((*o[:7], reasons, no_expiry if expires is None else expires))
        plan.bulk(_INSERT_OUTCOME_WITH_REASONS, rejected)
        plan.bulk(_INSERT_OUTCOME_WITH_IDENTIFIERS, given)
    plan.bulk(_INSERT_OUTCOME, plain)


def write_dead_letters(plan: Plan, batch: Batch) -> None:
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
