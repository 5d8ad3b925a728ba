"""What a project may see of the decisions and answers: its own.

The writer records who owns each reservation; this module reads it back to
filter what the API shows a ``project:ID`` caller (waited decisions, the
streams, history):

- a rejection or no-op answers a record: the project sees it when the
  record was its own (published by it, or a claim for it);
- any other decision changes a reservation (held, consumed, released,
  expired, ...): the project sees it when the reservation is its own,
  which the creating claim says, or else the view's reservations table;
- a scheduler's answer is the project's when the request it answers was.

Decisions about providers and pools, and anything about another project's
reservations, are never shown to a project.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select

from berth.app import App
from projections.view.commits import VIEW_WAIT_S, wait_committed
from projections.view.loader import committed_offsets
from projections.view.tables import reservations
from schemas.codec import EventDecodeError, decode_event
from schemas.events import Claim, ClaimSet, Event
from schemas.outcomes import Kind, Outcome

_ANSWERING = frozenset({Kind.REJECTED, Kind.NOOP})
_CREATING = frozenset({Kind.ACCEPTED, Kind.PREPARED})


class Visibility:
    """Filters for one project, on one :class:`App` (its log and view)."""

    def __init__(self, app: App, project: str) -> None:
        self.app = app
        self.project = project
        self._records: dict[tuple[int, int], Event | None] = {}
        self._owners: dict[str, str] = {}

    def outcomes(self, outcomes: Iterable[Outcome]) -> list[Outcome]:
        """Those of ``outcomes`` the project may see, in order."""
        given = list(outcomes)
        unknown = {
            o.subject
            for o in given
            if o.kind not in _ANSWERING
            and o.kind not in _CREATING
            and o.subject not in self._owners
        }
        if unknown:
            self._look_up(unknown, max(given, key=lambda o: o.offset))
        return [o for o in given if self._sees(o)]

    def _sees(self, o: Outcome) -> bool:
        if o.kind in _ANSWERING:
            event = self._record(o.partition, o.offset)
            return event is not None and _whose(event, o.subject) == self.project
        if o.kind in _CREATING:
            event = self._record(o.partition, o.offset)
            owner = None if event is None else _claimed_for(event, o.subject)
            if owner is not None:
                self._owners[o.subject] = owner
            return owner == self.project
        return self._owners.get(o.subject) == self.project

    def _record(self, partition: int, offset: int) -> Event | None:
        key = (partition, offset)
        if key not in self._records:
            if len(self._records) > 10_000:
                self._records.clear()
            found = self.app.log.read(self.app.settings.topics.events, partition, offset, 1)
            event = None
            if found and found[0].offset == offset:
                try:
                    event = decode_event(found[0].value)
                except EventDecodeError:
                    event = None  # a dead letter decided nothing anyone may see
            self._records[key] = event
        return self._records[key]

    def _look_up(self, subjects: set[str], latest: Outcome) -> None:
        """The owners of ``subjects`` from the view, waiting (briefly, woken
        by the commit) for it to commit ``latest`` first if one of them is
        not there yet."""
        committed = self._committed(latest)  # first: the owners read after it hold it
        if self._read_owners(subjects) or committed:
            return
        wait_committed(self.app.engine, latest.partition, latest.offset, VIEW_WAIT_S)
        self._read_owners(subjects)

    def _read_owners(self, subjects: set[str]) -> bool:
        """Note the owners the view holds of ``subjects``; whether it holds
        them all."""
        with self.app.engine.connect() as conn:
            rc = reservations.c
            rows = conn.execute(
                select(rc.reservation_id, rc.project_id).where(
                    rc.reservation_id.in_(sorted(subjects)[:500])
                )
            ).all()
        if len(self._owners) > 100_000:
            self._owners.clear()
        self._owners.update({rid: project for rid, project in rows})
        return len(rows) == len(subjects)

    def _committed(self, latest: Outcome) -> bool:
        with self.app.engine.connect() as conn:
            return committed_offsets(conn).get(latest.partition, 0) > latest.offset

    def answer(self, answer: Mapping[str, Any]) -> bool:
        """Whether a scheduler's answer (with its ``source``: the request's
        partition and offset on the requests topic) is the project's."""
        source = answer.get("source")
        if not isinstance(source, list) or len(source) != 2:
            return False
        partition, offset = source
        found = self.app.log.read(self.app.settings.topics.requests, partition, offset, 1)
        if not found or found[0].offset != offset:
            return False
        try:
            request = json.loads(found[0].value)
        except ValueError:
            return False
        members = request.get("members") if request.get("type") == "batch" else [request]
        return (
            isinstance(members, list)
            and bool(members)
            and all(isinstance(m, dict) and m.get("project_id") == self.project for m in members)
        )

    def history(self, found: dict[str, Any], steps: list[Outcome]) -> dict[str, Any] | None:
        """``berth history``'s dictionary cut to what the project may see;
        None when that is nothing."""
        mine = [r for r in found["reservations"] if r.get("project_id") == self.project]
        visible = {(o.partition, o.offset, o.seq) for o in self.outcomes(steps)}
        history = [
            step
            for step in found["history"]
            if (step["partition"], step["offset"], step["seq"]) in visible
        ]
        if not mine and not history:
            return None
        names = [n for n in found["names"] if n not in ("provider", "pool")] if mine else []
        return {
            **found,
            "names": names,
            "reservations": mine,
            "provider": None,
            "pool": None,
            "history": history,
        }


def _whose(event: Event, subject: str) -> str | None:
    """The project a record was published by or, for the system's claims, for."""
    if event.acting_project is not None:
        return event.acting_project
    return _claimed_for(event, subject)


def _claimed_for(event: Event, subject: str) -> str | None:
    if isinstance(event, Claim):
        return event.project_id if event.reservation_id == subject else None
    if isinstance(event, ClaimSet):
        for spec in event.claims:
            if spec.reservation_id == subject:
                return spec.project_id
    return None
