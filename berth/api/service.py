"""What the API does, without HTTP: validate and append events and requests
(waiting for their decisions and answers if asked), read history, status,
queue and headroom, each for a :class:`Caller` and within its role. Every
method blocks (the log's fsync, the view's queries): the routes call them
from worker threads. Errors are :class:`Problem` s."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from http import HTTPStatus
from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag, TypeAdapter, ValidationError

from berth.api.credentials import Caller, Credentials
from berth.api.groups import Groups
from berth.api.handoff import AnswerHub
from berth.api.problems import Problem, forbidden, invalid, json_body
from berth.api.visibility import Visibility
from berth.app import App
from berth.client import Answers, Decisions, Publisher, PublishError
from berth.history import read_history_settled
from berth.status import read_status
from consumers.batches import parse_shape
from consumers.queue_projector import read_depth
from consumers.snapshot_source import LiveSnapshot
from projections.view.commits import read_settled
from scheduling.config import SchedulerConfig
from scheduling.headroom import headroom
from scheduling.model import Request, Snapshot
from schemas.codec import EventDecodeError
from schemas.events import Claim, ClaimSet, Event, MetadataKey, MetadataValue, Model
from schemas.requests import BatchRequest, PlacementRequest, request_key

MAX_WAIT_S = 300.0

OPERATOR_EVENTS = frozenset(
    {
        "provider_registered",
        "provider_retired",
        "inventory_set",
        "provider_state_set",
        "traits_set",
        "aggregates_set",
        "provider_described",
        "metrics_reported",
        "aggregate_member_added",
        "aggregate_member_removed",
        "pool_defined",
        "server_group_created",
        "server_group_deleted",
        "tick",
    }
)
"""An aggregate's definition is an operator's too, at ``PUT /v1/aggregates/ID``
(a copy to every partition), not a lone event."""
PROJECT_EVENTS = frozenset(
    {"claim", "claim_set", "consume", "release", "renew", "release_consumer"}
)

EVENT: TypeAdapter[Event] = TypeAdapter(Event)


class AggregateIn(Model):
    """An aggregate's metadata, as a whole."""

    metadata: dict[MetadataKey, MetadataValue] = Field(default_factory=dict, max_length=128)


AGGREGATE: TypeAdapter[AggregateIn] = TypeAdapter(AggregateIn)


def _request_kind(data: Any) -> str:
    return "batch" if isinstance(data, dict) and data.get("type") == "batch" else "request"


AnyRequest = Annotated[
    Annotated[PlacementRequest, Tag("request")] | Annotated[BatchRequest, Tag("batch")],
    Discriminator(_request_kind),
]
REQUEST: TypeAdapter[PlacementRequest | BatchRequest] = TypeAdapter(AnyRequest)


def _items(raw: bytes, what: str) -> tuple[list[Any], bool]:
    """The body: one JSON object or a non-empty list of them (400 when it is
    not JSON, or nested deeper than the parser's limit; 422 when empty), and
    whether it was one."""
    body = json_body(raw)
    items = body if isinstance(body, list) else [body]
    if not items:
        raise invalid([{"type": "too_short", "loc": (), "msg": f"no {what}: the list is empty"}])
    return items, not isinstance(body, list)


def _validated(adapter: TypeAdapter[Any], items: list[Any], single: bool) -> list[Any]:
    """Each item validated as JSON arrives (lax: an array is a tuple, 3.0 is
    3); pydantic's errors with their place in the body."""
    done, errors = [], []
    for n, item in enumerate(items):
        try:
            done.append(adapter.validate_python(item, strict=False))
        except ValidationError as error:
            tag = item.get("type") if isinstance(item, dict) else None
            for e in error.errors(include_url=False, include_context=False):
                loc = list(e["loc"])
                if loc and loc[0] in (tag, "request", "batch"):
                    loc = loc[1:]  # the union's tag, not a place in the body
                errors.append({**e, "loc": tuple(loc if single else [n, *loc])})
    if errors:
        raise invalid(errors)
    return done


class Api:
    """The API's operations on one :class:`App` (its log and view)."""

    def __init__(
        self,
        app: App,
        config: SchedulerConfig | None = None,
        credentials: Credentials | None = None,
        hub: AnswerHub | None = None,
    ) -> None:
        """``hub``: the answers handed over by the scheduler worker of this
        process, when it answers every request partition (``berth serve
        --api``); without it, answers are read back from the log."""
        self.app = app
        self.hub = hub
        self.credentials = credentials or Credentials()
        self.topics = app.settings.topics
        self.publisher = Publisher(app.log, self.topics)
        self.placement = (config or SchedulerConfig.default()).engine()
        self._live = LiveSnapshot(app.engine)
        self._snapshot_lock = threading.Lock()
        self.groups = Groups(app, self.publisher)

    def snapshot(self) -> Snapshot:
        """The view as the engine reads it, brought up to date (only what
        changed is read again)."""
        with self._snapshot_lock:  # the live snapshot is one object, updated in place
            return self._live()

    def post_events(self, raw: bytes, wait: float | None, caller: Caller) -> tuple[int, Any]:
        items, single = _items(raw, "events")
        events = [_as(caller, e) for e in _validated(EVENT, items, single)]
        # made before the append (a decision cannot come before it), and only to wait
        decisions = None if wait is None else Decisions(self.app.log, self.topics)
        try:
            appended = self.publisher.publish(events)
        except PublishError as error:
            raise Problem(
                HTTPStatus.CONFLICT, str(error), "rule", title="Refused by a rule of the log"
            ) from None
        positions = [list(at) for at in appended]
        if decisions is None or wait is None:
            return HTTPStatus.ACCEPTED, {"appended": positions}
        ids = [e.event_id for e in events]
        pending = decisions.wait(ids, wait, partitions={p for p, _ in appended})
        seen = None if caller.project is None else Visibility(self.app, caller.project)
        decided = {}
        for eid in ids:
            outcomes = decisions.found.get(eid)
            if outcomes is None:
                continue
            shown = outcomes if seen is None else seen.outcomes(outcomes)
            decided[eid] = [o.to_dict() for o in shown]
        reply = {"appended": positions, "decisions": decided}
        if pending:
            # appended, not all decided yet: accepted, with what is still pending
            return HTTPStatus.ACCEPTED, {**reply, "pending": pending}
        return HTTPStatus.OK, reply

    def define_aggregate(
        self, aggregate_id: str, raw: bytes, wait: float | None, caller: Caller
    ) -> tuple[int, Any]:
        """Define an aggregate (its metadata as a whole): a copy appended to
        every partition, each decided by its writer."""
        if caller.project is not None and not caller.admin:
            raise _forbidden(caller, "an aggregate is an operator's")
        body = json_body(raw)
        try:
            metadata = AGGREGATE.validate_python(body, strict=False).metadata
        except ValidationError as error:
            raise invalid(error.errors(include_url=False, include_context=False)) from None
        decisions = None if wait is None else Decisions(self.app.log, self.topics)
        base = f"aggregate-{aggregate_id}-{uuid.uuid4().hex[:12]}"
        try:
            appended = self.publisher.define_aggregate(aggregate_id, metadata, base)
        except (EventDecodeError, PublishError) as error:
            raise Problem(
                HTTPStatus.CONFLICT, str(error), "rule", title="Refused by a rule of the log"
            ) from None
        positions = [list(at) for at in appended]
        if decisions is None or wait is None:
            return HTTPStatus.ACCEPTED, {"appended": positions}
        ids = [f"{base}-{p}" for p, _ in appended]
        pending = decisions.wait(ids, wait, partitions={p for p, _ in appended})
        decided = {
            eid: [o.to_dict() for o in decisions.found[eid]]
            for eid in ids
            if eid in decisions.found
        }
        reply = {"appended": positions, "decisions": decided}
        if pending:
            return HTTPStatus.ACCEPTED, {**reply, "pending": pending}
        return HTTPStatus.OK, reply

    def aggregate(self, aggregate_id: str) -> dict[str, Any]:
        def read() -> Snapshot:
            with self._snapshot_lock:  # the live snapshot is one object, updated in place
                return self._live()

        # asked right after its decisions, it is found once the view commits them
        snapshot = read_settled(
            read,
            lambda snapshot: aggregate_id in snapshot.aggregates,
            self.app.engine,
            self.app.log,
            self.topics.events,
            self.app.settings.partitions,
        )
        found = snapshot.aggregates.get(aggregate_id)
        if found is None:
            raise Problem(HTTPStatus.NOT_FOUND, f"no aggregate {aggregate_id!r} in the view")
        members = [p.provider_id for p in snapshot.providers if aggregate_id in p.aggregates]
        return {"aggregate_id": aggregate_id, "metadata": dict(found.metadata), "members": members}

    def post_requests(self, raw: bytes, wait: float | None, caller: Caller) -> tuple[int, Any]:
        items, single = _items(raw, "requests")
        requests: list[PlacementRequest | BatchRequest] = _validated(REQUEST, items, single)
        for r in requests:
            _may_request(caller, r)
        self.groups.check_named(requests, single)
        ids = [request_key(r) for r in requests]
        if wait is not None and self.hub is not None:
            return self._submit_handed(requests, ids, wait, self.hub)
        answers = None if wait is None else Answers(self.app.log, self.topics)  # as above
        submitted = self.publisher.submit(requests)
        positions = [list(at) for at in submitted]
        if answers is None or wait is None:
            return HTTPStatus.ACCEPTED, {"submitted": positions}
        pending = answers.wait(ids, wait, partitions={p for p, _ in submitted})
        reply = {
            "submitted": positions,
            "answers": {rid: answers.found[rid] for rid in ids if rid in answers.found},
        }
        return _answered(reply, pending)

    def _submit_handed(
        self,
        requests: list[PlacementRequest | BatchRequest],
        ids: list[str],
        wait: float,
        hub: AnswerHub,
    ) -> tuple[int, Any]:
        """Submit, then wait for the answers the worker hands over (durable
        ones only); the caller then owes the hub its reply (``replied``)."""
        hub.expect(ids)  # before the submission: an answer cannot come before it
        try:
            submitted = self.publisher.submit(requests)
        except BaseException:
            hub.drop(ids)
            raise
        found, pending = hub.wait(ids, wait)
        reply = {"submitted": [list(at) for at in submitted], "answers": found}
        return _answered(reply, pending)

    def replied(self) -> None:
        """A reply to a waiting submission went out (see :class:`AnswerHub`)."""
        if self.hub is not None:
            self.hub.replied()

    def history(self, subject: str, records: bool, caller: Caller) -> dict[str, Any]:
        # a caller asking at once about what it was just told of is shown it
        found = read_history_settled(
            self.app.engine,
            subject,
            self.app.log,
            self.topics.events,
            self.app.settings.partitions,
            records,
        )
        reply: dict[str, Any] | None = found.to_dict() if found.found else None
        if reply is not None and caller.project is not None:
            seen = Visibility(self.app, caller.project)
            reply = seen.history(reply, [step.outcome for step in found.steps])
        if reply is None:
            raise Problem(HTTPStatus.NOT_FOUND, f"the view holds nothing about {subject!r}")
        return reply

    def explain(self, request_id: str, provider: str | None, caller: Caller) -> dict[str, Any]:
        """Why a past request was placed as it was, from the log alone
        (:mod:`berth.audit`); a project may ask about its own."""
        from berth.audit import AuditError, explain_request

        try:
            story = explain_request(self.app, request_id, provider)
        except AuditError as error:
            raise Problem(HTTPStatus.NOT_FOUND, str(error)) from None
        if caller.project is not None and story["project_id"] != caller.project:
            # as if there were none: a project does not learn of others' requests
            raise Problem(HTTPStatus.NOT_FOUND, f"no answer to request {request_id!r}")
        return story

    def status(self, lag: bool, caller: Caller) -> dict[str, Any]:
        if not caller.operator:
            raise _forbidden(caller, "the status of every partition is an operator's to read")
        settings = self.app.settings
        return read_status(
            self.app.log, self.app.engine, self.topics, settings.partitions, totals=not lag
        ).to_dict()

    def queue(self) -> dict[str, dict[str, int]]:
        return read_depth(self.app.engine)

    def headroom(
        self,
        resources: str,
        availability_zone: str | None,
        required: Sequence[str],
        forbidden: Sequence[str],
    ) -> dict[str, object]:
        request = Request(
            "headroom",
            parse_shape(resources),
            availability_zone=availability_zone,
            required_traits=frozenset(required),
            forbidden_traits=frozenset(forbidden),
        )
        with self._snapshot_lock:  # the live snapshot is one object, updated in place
            snapshot = self._live()
        return headroom(self.placement, snapshot, request).to_dict()


def _answered(reply: dict[str, Any], pending: list[str]) -> tuple[int, Any]:
    if pending:
        return HTTPStatus.ACCEPTED, {**reply, "pending": pending}
    return HTTPStatus.OK, reply


def _forbidden(caller: Caller, detail: str) -> Problem:
    return forbidden(caller.role, detail)


def _as(caller: Caller, event: Event) -> Event:
    """``event`` as ``caller`` may publish it (a project's stamped with its
    project, which its partition's writer holds it to), or 403."""
    if caller.admin:
        return event
    if caller.project is None:
        if event.type not in OPERATOR_EVENTS:
            raise _forbidden(caller, f"{event.type} is a project's or the system's event")
        return event
    project = caller.project
    if event.type not in PROJECT_EVENTS:
        raise _forbidden(caller, f"{event.type} is an operator's event")
    if event.acting_project not in (None, project):
        raise _forbidden(caller, f"event {event.event_id} names another acting_project")
    if isinstance(event, Claim) and event.project_id != project:
        raise _forbidden(caller, f"claim {event.reservation_id} is for another project")
    if isinstance(event, ClaimSet):
        if event.transaction is not None:
            raise _forbidden(caller, "a claim set in a transaction is the coordinator's")
        if any(spec.project_id != project for spec in event.claims):
            raise _forbidden(caller, f"claim_set {event.event_id} holds another project's claim")
    stamped: Event = event.model_copy(update={"acting_project": project})
    return stamped


def _may_request(caller: Caller, request: PlacementRequest | BatchRequest) -> None:
    if caller.admin:
        return
    if caller.project is None:
        raise _forbidden(caller, "placement requests are a project's")
    members = request.members if isinstance(request, BatchRequest) else (request,)
    if any(m.project_id != caller.project for m in members):
        raise _forbidden(caller, f"request {request_key(request)} is for another project")
