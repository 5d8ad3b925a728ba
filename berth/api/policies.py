"""Scheduling policies over HTTP (consumers/policies.py says what one is):
``GET /v1/policies``, ``GET/PUT/DELETE /v1/policies/{name}``, ``PUT
/v1/policy-assignments/{project_id}`` and ``GET /v1/policy-units``, oVirt's
``/schedulingpolicies`` and ``/schedulingpolicyunits`` in Berth's terms.
Anyone may read them; only operators write. A policy is checked completely
before it is appended (a unit that does not load, a scriptlet that does not
compile: 422 with the reason, nothing appended); its version is the offset
of its record."""

import threading
from collections.abc import Iterator, Mapping
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from berth.api.credentials import Caller
from berth.api.problems import Problem, forbidden, json_body
from berth.api.replies import json_reply
from berth.app import App
from consumers.policies import DEFAULT, PolicyBook, PolicyError, publish_policy
from scheduling.balance import BALANCE_UNITS
from scheduling.config import PolicyTables, SchedulerConfig
from scheduling.registry import catalogue, describe


class Versioned(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int
    """The offset of the policy record on ``berth.policies``."""


class PolicyOut(Versioned):
    name: str
    policy: dict[str, Any]


class PolicyListing(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policies: dict[str, int]
    projects: dict[str, str]
    aggregates: dict[str, str]


class AssignmentIn(BaseModel):
    """The policy a project's requests are placed by; null or ``default``:
    the default policy."""

    model_config = ConfigDict(extra="forbid")
    policy: Annotated[str, Field(min_length=1, max_length=255)] | None


class PolicyService:
    """The policies as of the log, folded as they are asked for."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.topics = app.settings.topics
        self._book = PolicyBook(app.log, self.topics, SchedulerConfig.default())
        self._lock = threading.Lock()

    def _current(self) -> PolicyBook:
        with self._lock:  # one book, folded in place
            self._book.refresh()
            return self._book

    def listing(self) -> dict[str, Any]:
        book = self._current()
        return {
            "policies": {name: p.version for name, p in sorted(book.policies.items())},
            "projects": dict(sorted(book.projects.items())),
            "aggregates": dict(sorted(book.aggregates.items())),
        }

    def show(self, name: str) -> dict[str, Any]:
        found = self._current().policies.get(name)
        if found is None:
            raise Problem(HTTPStatus.NOT_FOUND, f"no policy {name!r}")
        return {"name": found.name, "version": found.version, "policy": dict(found.mapping)}

    def put(self, name: str, raw: bytes, caller: Caller) -> dict[str, Any]:
        _operator(caller)
        policy = _json_object(raw)
        try:
            PolicyTables.model_validate(policy)  # the shape: 422 names the place
        except ValidationError as error:
            raise Problem(HTTPStatus.UNPROCESSABLE_ENTITY, _first(error), "validation") from None
        return self._append({"type": "policy_set", "name": name, "policy": policy})

    def delete(self, name: str, caller: Caller) -> dict[str, Any]:
        _operator(caller)
        if name not in self._current().policies:
            raise Problem(HTTPStatus.NOT_FOUND, f"no policy {name!r}")
        if name == DEFAULT:
            raise Problem(
                HTTPStatus.CONFLICT, "the default policy cannot be deleted; set it instead", "rule"
            )
        return self._append({"type": "policy_deleted", "name": name})

    def assign(self, whose: dict[str, str], raw: bytes, caller: Caller) -> dict[str, Any]:
        """Assign the policy the body names to ``whose`` (``project_id`` or
        ``aggregate_id``)."""
        _operator(caller)
        try:
            name = AssignmentIn.model_validate(_json_object(raw)).policy
        except ValidationError as error:
            raise Problem(HTTPStatus.UNPROCESSABLE_ENTITY, _first(error), "validation") from None
        if name is not None and name != DEFAULT and name not in self._current().policies:
            raise Problem(HTTPStatus.CONFLICT, f"no policy {name!r}: set it first", "rule")
        chosen = None if name == DEFAULT else name
        return self._append({"type": "policy_assigned", **whose, "name": chosen})

    def units(self) -> dict[str, Any]:
        plugins = sorted(set(_plugins(self._current())))
        found: dict[str, Any] = catalogue(plugins)
        found["balance"] = [describe(cls) for _, cls in sorted(BALANCE_UNITS.items())]
        return found

    def _append(self, record: dict[str, Any]) -> dict[str, Any]:
        try:
            version = publish_policy(self.app.log, self.topics, record)
        except PolicyError as refused:
            # well formed, but a unit that does not load, a scriptlet that
            # does not compile, options a unit does not take
            raise Problem(
                HTTPStatus.CONFLICT, str(refused), "policy", title="Not a policy that loads"
            ) from None
        return {"version": version}


def _operator(caller: Caller) -> None:
    if not caller.operator:
        raise forbidden(caller.role, "scheduling policies are an operator's to set")


def _json_object(raw: bytes) -> dict[str, Any]:
    body = json_body(raw)
    if not isinstance(body, dict):
        raise Problem(HTTPStatus.UNPROCESSABLE_ENTITY, "the body is a JSON object", "validation")
    return body


def _first(error: ValidationError) -> str:
    detail = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in detail["loc"]) or "body"
    return f"{where}: {detail['msg']}"


def _plugins(book: PolicyBook) -> Iterator[str]:
    """The ``module:Class`` units the policies in ``book`` name."""
    for policy in book.policies.values():
        filters = policy.mapping.get("filters", {})
        enabled = filters.get("enabled", []) if isinstance(filters, Mapping) else []
        weighers = policy.mapping.get("weighers", {})
        names = [*enabled, *(weighers if isinstance(weighers, Mapping) else ())]
        yield from (n for n in names if isinstance(n, str) and ":" in n)


def add_routes(app: FastAPI, policies: PolicyService, who: Any, problems: Any, ref: str) -> None:
    """The policy routes on ``app``; ``who`` the credentials dependency,
    ``problems(*codes)`` the error responses of the document."""
    Who = Annotated[Caller, Depends(who)]
    Name = Annotated[str, Path(min_length=1, max_length=255)]
    reads = problems(401, 403, 413, 414, 422, 503)
    writes = problems(401, 403, 413, 414, 422, 503, 400, 409)

    def body(model: str) -> dict[str, Any]:
        schema = {"$ref": ref.format(model=model)}
        return {
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}
        }

    @app.get(
        "/v1/policies",
        summary="Every scheduling policy's version, and which project uses which",
        response_model=None,
        responses={200: {"model": PolicyListing}, **reads},
    )
    async def list_policies(who: Who) -> Response:
        return json_reply(200, await run_in_threadpool(policies.listing))

    @app.get(
        "/v1/policies/{name}",
        summary="A scheduling policy: its version and its tables",
        response_model=None,
        responses={200: {"model": PolicyOut}, **problems(401, 403, 404, 413, 414, 422, 503)},
    )
    async def get_policy(who: Who, name: Name) -> Response:
        return json_reply(200, await run_in_threadpool(policies.show, name))

    @app.put(
        "/v1/policies/{name}",
        summary="Set a scheduling policy, checked before it is appended (operators)",
        response_model=None,
        responses={200: {"model": Versioned}, **writes},
        openapi_extra=body("PolicyTables"),
    )
    async def put_policy(request: Request, who: Who, name: Name) -> Response:
        raw = await request.body()
        return json_reply(200, await run_in_threadpool(policies.put, name, raw, who))

    @app.delete(
        "/v1/policies/{name}",
        summary="Delete a scheduling policy, not the default (operators)",
        response_model=None,
        responses={200: {"model": Versioned}, **problems(401, 403, 404, 409, 413, 414, 422, 503)},
    )
    async def delete_policy(who: Who, name: Name) -> Response:
        return json_reply(200, await run_in_threadpool(policies.delete, name, who))

    @app.put(
        "/v1/policy-assignments/{project_id}",
        summary="The policy a project's requests are placed by (operators)",
        response_model=None,
        responses={200: {"model": Versioned}, **writes},
        openapi_extra=body("AssignmentIn"),
    )
    async def assign_policy(request: Request, who: Who, project_id: Name) -> Response:
        raw = await request.body()
        whose = {"project_id": project_id}
        return json_reply(200, await run_in_threadpool(policies.assign, whose, raw, who))

    @app.put(
        "/v1/aggregates/{aggregate_id}/policy",
        summary="The policy requests for an aggregate's zone are placed by (operators)",
        response_model=None,
        responses={200: {"model": Versioned}, **writes},
        openapi_extra=body("AssignmentIn"),
    )
    async def assign_aggregate_policy(request: Request, who: Who, aggregate_id: Name) -> Response:
        raw = await request.body()
        whose = {"aggregate_id": aggregate_id}
        return json_reply(200, await run_in_threadpool(policies.assign, whose, raw, who))

    @app.get(
        "/v1/policy-units",
        summary="The filters, weighers and balance units a policy may name, with their options",
        response_model=None,
        responses={
            200: {"content": {"application/json": {"schema": {"type": "object"}}}},
            **reads,
        },
    )
    async def list_units(who: Who) -> Response:
        return json_reply(200, await run_in_threadpool(policies.units))
