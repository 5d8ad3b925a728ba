"""Server groups over HTTP: ``PUT /v1/groups/{id}`` creates one (its
``server_group_created`` appended to the group's partition),
``DELETE`` deletes it, ``GET`` reads one or all from the view; with
``?wait=`` the reply carries the group writer's decision.

As in Nova, a group belongs to a project: a project's token creates groups
of its own (its events stamped with it, which the group's writer holds it
to), sees, deletes and joins only its own and the shared ones (an
operator's group of no project). To a project, another project's group does
not exist: 404, and 409 for a request naming it. Operators create groups
for any project (``project_id`` in the body) or shared ones, and see all."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from pydantic import Field, TypeAdapter, ValidationError
from pydantic_core import from_json

from berth.api.credentials import Caller
from berth.api.problems import Problem, invalid
from berth.app import App
from berth.client import Decisions, Publisher, PublishError
from consumers.server_groups import GroupView, read_group_settled, read_rules
from projections.view.commits import read_settled
from schemas.events import (
    MAX_SERVERS_PER_HOST,
    GroupPolicyName,
    Identifier,
    Model,
    ServerGroupCreated,
    ServerGroupDeleted,
)
from schemas.requests import BatchRequest, PlacementRequest


class GroupIn(Model):
    """A server group's policy and, for anti-affinity, its rule."""

    policy: GroupPolicyName
    max_server_per_host: int | None = Field(default=None, ge=1, le=MAX_SERVERS_PER_HOST)
    project_id: Identifier | None = None
    """The owner: a project's token may give only its own (the default for
    it); an operator's may give any, or none for a shared group."""
    user_id: Identifier | None = None


GROUP: TypeAdapter[GroupIn] = TypeAdapter(GroupIn)


class Groups:
    """The server-group operations on one :class:`App`."""

    def __init__(self, app: App, publisher: Publisher) -> None:
        self.app = app
        self.publisher = publisher

    def create(
        self, group_id: str, raw: bytes, wait: float | None, caller: Caller
    ) -> tuple[int, Any]:
        try:
            body = GROUP.validate_python(from_json(raw), strict=False)
        except ValueError as error:
            if isinstance(error, ValidationError):
                raise invalid(error.errors(include_url=False, include_context=False)) from None
            raise Problem(
                HTTPStatus.BAD_REQUEST, f"the body is not JSON: {error}", "not-json"
            ) from None
        project = caller.project
        if project is not None and body.project_id not in (None, project):
            raise _forbidden(caller, f"a server group of project {body.project_id}")
        try:
            event = ServerGroupCreated(
                event_id=f"group-create-{group_id}-{uuid.uuid4().hex[:12]}",
                ts_ms=self.publisher.clock_ms(),
                policy=body.policy,
                max_server_per_host=body.max_server_per_host,
                group_id=group_id,
                partition_key=group_id,
                project_id=project or body.project_id,
                user_id=body.user_id,
                acting_project=project,
            )
        except ValidationError as error:
            raise invalid(error.errors(include_url=False, include_context=False)) from None
        return self._append(event, wait)

    def delete(self, group_id: str, wait: float | None, caller: Caller) -> tuple[int, Any]:
        found = self._seen(group_id, caller)
        if caller.project is not None and found.rule.project_id is None:
            raise _forbidden(caller, f"server group {group_id} is shared: an operator's to delete")
        event = ServerGroupDeleted(
            event_id=f"group-delete-{group_id}-{uuid.uuid4().hex[:12]}",
            ts_ms=self.publisher.clock_ms(),
            partition_key=group_id,
            group_id=group_id,
            acting_project=caller.project,
        )
        return self._append(event, wait)

    def show(self, group_id: str, caller: Caller) -> dict[str, Any]:
        return self._seen(group_id, caller).to_dict()

    def list(self, caller: Caller) -> dict[str, Any]:
        rules = read_rules(self.app.engine)
        return {"groups": [r.to_dict() for r in rules.values() if r.seen_by(caller.project)]}

    def _seen(self, group_id: str, caller: Caller) -> GroupView:
        """The group as ``caller`` may see it, else 404 (another project's
        group is not shown to exist)."""
        # asked right after its decision, it is found once the view commits it
        app = self.app
        events, partitions = app.settings.topics.events, app.settings.partitions
        found = read_group_settled(app.engine, group_id, app.log, events, partitions)
        if found is None or not found.rule.seen_by(caller.project):
            raise Problem(HTTPStatus.NOT_FOUND, f"no server group {group_id!r} in the view")
        return found

    def check_named(
        self, requests: Sequence[PlacementRequest | BatchRequest], single: bool
    ) -> None:
        """409 for a request whose ``group_id`` names no group and gives no
        policy (with a policy, a group never created is an ad-hoc one), or
        names a group of another project than the request's (to which it
        does not exist)."""
        named = {
            member.group_id
            for r in requests
            for member in (r.members if isinstance(r, BatchRequest) else (r,))
            if member.group_id is not None and member.group_policy is None
        }
        if not named:
            return
        app = self.app
        # a group named right after its decision is found once the view commits it
        rules: Mapping[str, Any] = read_settled(
            lambda: read_rules(app.engine),
            lambda rules: named <= rules.keys(),
            app.engine,
            app.log,
            app.settings.topics.events,
            app.settings.partitions,
        )
        errors: list[dict[str, Any]] = []
        for n, r in enumerate(requests):
            members = r.members if isinstance(r, BatchRequest) else (r,)
            for m, member in enumerate(members):
                if member.group_id is None or member.group_policy is not None:
                    continue
                rule = rules.get(member.group_id)
                if rule is None or not rule.seen_by(member.project_id):
                    loc: list[Any] = [] if single else [n]
                    if isinstance(r, BatchRequest):
                        loc += ["members", m]
                    errors.append(
                        {
                            "type": "value_error",  # a rule beyond the document: 409
                            "loc": (*loc, "group_id"),
                            "msg": f"no server group {member.group_id} of project "
                            f"{member.project_id} (PUT /v1/groups/ID)",
                        }
                    )
        if errors:
            raise invalid(errors)

    def _append(
        self, event: ServerGroupCreated | ServerGroupDeleted, wait: float | None
    ) -> tuple[int, Any]:
        decisions = None if wait is None else Decisions(self.app.log, self.app.settings.topics)
        try:
            ((partition, offset),) = self.publisher.publish([event])
        except PublishError as error:
            raise Problem(
                HTTPStatus.CONFLICT, str(error), "rule", title="Refused by a rule of the log"
            ) from None
        reply: dict[str, Any] = {"appended": [[partition, offset]]}
        if decisions is None or wait is None:
            return HTTPStatus.ACCEPTED, reply
        pending = decisions.wait([event.event_id], wait, partitions={partition})
        if pending:
            return HTTPStatus.ACCEPTED, {**reply, "decisions": {}, "pending": pending}
        found = decisions.found[event.event_id]
        return HTTPStatus.OK, {
            **reply,
            "decisions": {event.event_id: [o.to_dict() for o in found]},
        }


def _forbidden(caller: Caller, what: str) -> Problem:
    return Problem(
        HTTPStatus.FORBIDDEN, f"{caller.role}: {what}", "forbidden", title="Not this role's"
    )
