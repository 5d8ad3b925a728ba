"""The API's routes on FastAPI: paths, parameters, replies and the OpenAPI
3.1 document at ``GET /v1/openapi.json``, all generated from the routes and
the pydantic models (the bodies' schemas are the log's own event and
request models, validated by the same adapters, so the document cannot
drift from what is accepted). Each route reads its body, then calls
:class:`Api` from a worker thread, since the log and the view block."""

import logging
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response, StreamingResponse
from pydantic import Field
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool

from berth.api import dashboard
from berth.api.credentials import Caller
from berth.api.groups import GROUP
from berth.api.policies import AssignmentIn, PolicyService, add_routes
from berth.api.problems import MEDIA_TYPE, Bounded, Problem, ProblemDocument, install
from berth.api.replies import (
    AggregateOut,
    Answered,
    Appended,
    Decided,
    Depth,
    GroupOut,
    GroupsOut,
    Headroom,
    HistoryOut,
    Submitted,
    json_reply,
)
from berth.api.service import AGGREGATE, EVENT, MAX_WAIT_S, REQUEST, Api
from berth.api.streams import Stream, answers_shown, outcomes_shown, parse_cursor
from berth.api.visibility import Visibility
from ledger.log import LogError
from projections.view.engine import driver_message
from scheduling.config import PolicyTables

_log = logging.getLogger(__name__)

SHAPE = r"^[A-Z0-9_]{1,255}=[1-9][0-9]{0,8}(,[A-Z0-9_]{1,255}=[1-9][0-9]{0,8}){0,63}$"
"""CLASS=AMOUNT,...: at most 64 classes, each amount 1 to 999,999,999."""

_REF = "#/components/schemas/{model}"
Name = Annotated[str, Field(min_length=1, max_length=255)]


def _problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    schema = {"$ref": _REF.format(model="ProblemDocument")}
    return {
        code: {"description": HTTPStatus(code).phrase, "content": {MEDIA_TYPE: {"schema": schema}}}
        for code in codes
    }


# every route: credentials, and the bounds on a request (body, target)
_ALWAYS = (401, 403, 413, 414)
_READS = (*_ALWAYS, 422, 503)
_POSTS = (*_READS, 400, 409)


def _body(*models: str) -> dict[str, Any]:
    one = (
        {"$ref": _REF.format(model=models[0])}
        if len(models) == 1
        else {"oneOf": [{"$ref": _REF.format(model=m)} for m in models]}
    )
    schema = {"oneOf": [one, {"type": "array", "items": one, "minItems": 1}]}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def create_app(api: Api) -> FastAPI:
    """The ASGI application serving ``api``."""
    app = FastAPI(
        title="Berth",
        version="1",
        description="The reservation ledger's HTTP edge: it validates, appends and reads; "
        "the partition writers decide. Errors are RFC 9457 problem documents.",
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    install(app)
    app.add_middleware(Bounded)
    _unavailable(app)

    # a coroutine, so FastAPI calls it on the event loop: a plain function
    # dependency would cost every request a trip through the thread pool
    async def caller(request: Request) -> Caller:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        found = api.credentials.caller(token.strip() if scheme.lower() == "bearer" else None)
        if found is None:
            raise Problem(
                HTTPStatus.UNAUTHORIZED,
                "this API needs Authorization: Bearer <token>",
                "unauthorized",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return found

    Who = Annotated[Caller, Depends(caller)]
    Wait = Annotated[
        float | None,
        Query(ge=0, le=MAX_WAIT_S, description="seconds to wait for the outcome (202 without)"),
    ]

    @app.post(
        "/v1/events",
        summary="Validate and append events; with wait, the writers' decisions",
        status_code=202,
        response_model=None,
        responses={
            202: {
                "model": Appended,
                "description": "appended, durably; with wait, those decided in time and the rest",
            },
            200: {"model": Decided, "description": "appended, and all of it decided"},
            **_problems(*_POSTS),
        },
        openapi_extra=_body("Event"),
    )
    async def post_events(request: Request, who: Who, wait: Wait = None) -> Response:
        raw = await request.body()
        return json_reply(*await run_in_threadpool(api.post_events, raw, wait, who))

    @app.post(
        "/v1/requests",
        summary="Submit placement requests and batches; with wait, their answers",
        status_code=202,
        response_model=None,
        responses={
            202: {
                "model": Submitted,
                "description": "submitted, durably; with wait, those answered in time and the rest",
            },
            200: {"model": Answered, "description": "submitted, and all of it answered"},
            **_problems(*_POSTS),
        },
        openapi_extra=_body("PlacementRequest", "BatchRequest"),
    )
    async def post_requests(request: Request, who: Who, wait: Wait = None) -> Response:
        raw = await request.body()
        status, reply = await run_in_threadpool(api.post_requests, raw, wait, who)
        # a reply the in-process hand-over woke: say when it is out
        return json_reply(status, reply, replied if wait is not None and api.hub else None)

    async def replied() -> None:
        api.replied()

    AggregateId = Annotated[str, Path(min_length=1, max_length=255)]

    @app.put(
        "/v1/aggregates/{aggregate_id}",
        summary="Define an aggregate's metadata, a copy in every partition (operators)",
        status_code=202,
        response_model=None,
        responses={
            202: {"model": Appended, "description": "appended to every partition"},
            200: {"model": Decided, "description": "appended, and every copy decided"},
            **_problems(*_POSTS),
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": _REF.format(model="AggregateIn")}}
                },
            }
        },
    )
    async def put_aggregate(
        request: Request, who: Who, aggregate_id: AggregateId, wait: Wait = None
    ) -> Response:
        raw = await request.body()
        return json_reply(
            *await run_in_threadpool(api.define_aggregate, aggregate_id, raw, wait, who)
        )

    @app.get(
        "/v1/aggregates/{aggregate_id}",
        summary="An aggregate's metadata and members",
        response_model=None,
        responses={200: {"model": AggregateOut}, **_problems(*_READS, 404)},
    )
    async def get_aggregate(who: Who, aggregate_id: AggregateId) -> Response:
        return json_reply(200, await run_in_threadpool(api.aggregate, aggregate_id))

    GroupId = Annotated[str, Path(min_length=1, max_length=255)]

    @app.put(
        "/v1/groups/{group_id}",
        summary="Create a server group with its policy, in its id's partition "
        "(a project's own, or an operator's for any project or shared)",
        status_code=202,
        response_model=None,
        responses={
            202: {"model": Appended, "description": "appended to the group's partition"},
            200: {"model": Decided, "description": "appended, and decided by its writer"},
            **_problems(*_POSTS),
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": _REF.format(model="GroupIn")}}},
            }
        },
    )
    async def put_group(
        request: Request, who: Who, group_id: GroupId, wait: Wait = None
    ) -> Response:
        raw = await request.body()
        return json_reply(*await run_in_threadpool(api.groups.create, group_id, raw, wait, who))

    @app.delete(
        "/v1/groups/{group_id}",
        summary="Delete a server group; its memberships are released "
        "(a project its own, operators any)",
        status_code=202,
        response_model=None,
        responses={
            202: {"model": Appended, "description": "appended to the group's partition"},
            200: {"model": Decided, "description": "appended, and decided by its writer"},
            **_problems(*_POSTS, 404),
        },
    )
    async def delete_group(who: Who, group_id: GroupId, wait: Wait = None) -> Response:
        return json_reply(*await run_in_threadpool(api.groups.delete, group_id, wait, who))

    @app.get(
        "/v1/groups/{group_id}",
        summary="A server group's policy, rule and members",
        response_model=None,
        responses={200: {"model": GroupOut}, **_problems(*_READS, 404)},
    )
    async def get_group(who: Who, group_id: GroupId) -> Response:
        return json_reply(200, await run_in_threadpool(api.groups.show, group_id, who))

    @app.get(
        "/v1/groups",
        summary="Every server group, with its policy and rule",
        response_model=None,
        responses={200: {"model": GroupsOut}, **_problems(*_READS)},
    )
    async def get_groups(who: Who) -> Response:
        return json_reply(200, await run_in_threadpool(api.groups.list, who))

    @app.get(
        "/v1/history/{id}",
        summary="Every decision about a reservation, consumer, transaction, provider or pool",
        response_model=None,
        responses={200: {"model": HistoryOut}, **_problems(*_READS, 404)},
    )
    async def get_history(
        who: Who,
        id: Annotated[str, Path(min_length=1, max_length=255)],
        records: Annotated[bool, Query(description="false: the view alone")] = True,
    ) -> Response:
        return json_reply(200, await run_in_threadpool(api.history, id, records, who))

    @app.get(
        "/v1/explain/{request_id}",
        summary="Why a past request was placed as it was, from the log alone",
        response_model=None,
        responses={
            200: {"content": {"application/json": {"schema": {"type": "object"}}}},
            **_problems(*_READS, 404),
        },
    )
    async def get_explain(
        who: Who,
        request_id: Annotated[str, Path(min_length=1, max_length=255)],
        provider: Annotated[Name | None, Query(description="why not this provider")] = None,
    ) -> Response:
        return json_reply(200, await run_in_threadpool(api.explain, request_id, provider, who))

    @app.get(
        "/v1/status",
        summary="Each partition's progress; capacity and usage, reservations (operators)",
        response_model=None,
        responses={
            200: {"content": {"application/json": {"schema": {"type": "object"}}}},
            **_problems(*_READS),
        },
    )
    async def get_status(
        who: Who,
        lag: Annotated[bool, Query(description="true: progress only, no table scans")] = False,
    ) -> Response:
        return json_reply(200, await run_in_threadpool(api.status, lag, who))

    @app.get(
        "/v1/queue",
        summary="Instances and batches waiting, by resource shape",
        response_model=None,
        responses={200: {"model": dict[str, Depth]}, **_problems(*_READS)},
    )
    async def get_queue(who: Who) -> Response:
        return json_reply(200, await run_in_threadpool(api.queue))

    @app.get(
        "/v1/headroom",
        summary="How many more instances of a shape fit, and where",
        response_model=None,
        responses={200: {"model": Headroom}, **_problems(*_READS)},
    )
    async def get_headroom(
        who: Who,
        resources: Annotated[str, Query(pattern=SHAPE, description="CLASS=AMOUNT,...")],
        availability_zone: Annotated[Name | None, Query()] = None,
        required_trait: Annotated[list[Name], Query(max_length=64)] = [],  # noqa: B006
        forbidden_trait: Annotated[list[Name], Query(max_length=64)] = [],  # noqa: B006
    ) -> Response:
        found = await run_in_threadpool(
            api.headroom, resources, availability_zone, required_trait, forbidden_trait
        )
        return json_reply(200, found)

    LastEventId = Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=4096,
            description="resume after this event's id: partition:offset,...",
        ),
    ]
    _STREAM = {
        200: {
            "description": "Server-Sent Events, until the client goes",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **_problems(*_READS, 400),
    }

    def _stream(topic: str, who: Caller, last: str | None, name: str) -> StreamingResponse:
        partitions = api.app.log.partition_count(topic)
        seen = None if who.project is None else Visibility(api.app, who.project)
        shown = outcomes_shown(seen) if name == "outcome" else answers_shown(seen)
        stream = Stream(api.app.log, topic, parse_cursor(last, partitions), shown)
        return StreamingResponse(
            stream.events(name),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get(
        "/v1/streams/outcomes",
        summary="The writers' decisions as they are made (a project sees its own)",
        response_class=StreamingResponse,
        responses=_STREAM,
    )
    async def stream_outcomes(who: Who, last_event_id: LastEventId = None) -> StreamingResponse:
        topic = api.topics.outcomes
        return await run_in_threadpool(_stream, topic, who, last_event_id, "outcome")

    @app.get(
        "/v1/streams/placements",
        summary="The scheduler's answers as they are given (a project sees its own)",
        response_class=StreamingResponse,
        responses=_STREAM,
    )
    async def stream_placements(who: Who, last_event_id: LastEventId = None) -> StreamingResponse:
        topic = api.topics.placements
        return await run_in_threadpool(_stream, topic, who, last_event_id, "answer")

    add_routes(app, PolicyService(api.app), caller, _problems, _REF)
    dashboard.install(app, api, caller, lambda *codes: _problems(*_READS, *codes))
    app.openapi = lambda: _document(app, api)  # type: ignore[method-assign]
    return app


def _unavailable(app: FastAPI) -> None:
    async def view(_request: Request, error: Exception) -> Response:
        assert isinstance(error, DBAPIError)
        why = f"the view cannot be read ({driver_message(error)})"
        return Problem(HTTPStatus.SERVICE_UNAVAILABLE, why, "unavailable").response()

    async def log(_request: Request, error: Exception) -> Response:
        why = f"the log: {error}"
        return Problem(HTTPStatus.SERVICE_UNAVAILABLE, why, "unavailable").response()

    async def anything(request: Request, error: Exception) -> Response:
        # the client gets a problem, the operator the traceback; the server goes on
        _log.error("api: %s %s failed", request.method, request.url.path, exc_info=error)
        why = f"the server failed: {type(error).__name__}"
        return Problem(HTTPStatus.INTERNAL_SERVER_ERROR, why, "internal").response()

    app.add_exception_handler(DBAPIError, view)
    app.add_exception_handler(LogError, log)
    app.add_exception_handler(Exception, anything)


def _closed(node: Any) -> None:
    """A dict whose keys have a pattern (a resource class's) is described by
    pydantic with ``patternProperties`` alone, which lets any other key
    through; the validator refuses them, and so does the document now."""
    if isinstance(node, dict):
        if "patternProperties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for value in node.values():
            _closed(value)
    elif isinstance(node, list):
        for value in node:
            _closed(value)


def _document(app: FastAPI, api: Api) -> dict[str, Any]:
    """FastAPI's document, with the log's models for the bodies, the problem
    document, and the security this server asks for."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    spec = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        openapi_version="3.1.0",
    )
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for name, adapter in (("Event", EVENT), ("AnyRequest", REQUEST)):
        schema = adapter.json_schema(ref_template=_REF)
        schemas.update(schema.pop("$defs", {}))
        if name == "Event":
            schemas[name] = schema
    for schema in schemas.values():
        properties = schema.get("properties", {})
        if "type" in properties and "const" in properties["type"]:
            # a discriminated union needs its tag, though each model has it as a default
            schema["required"] = sorted({*schema.get("required", ()), "type"})
    schemas["AggregateIn"] = AGGREGATE.json_schema(ref_template=_REF)
    for model in (PolicyTables, AssignmentIn):
        schema = model.model_json_schema(ref_template=_REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    schemas["GroupIn"] = GROUP.json_schema(ref_template=_REF)
    _closed(schemas)
    schemas["ProblemDocument"] = ProblemDocument.model_json_schema(ref_template=_REF)
    schemas.update(ProblemDocument.model_json_schema(ref_template=_REF).pop("$defs", {}))
    schemas["ProblemDocument"].pop("$defs", None)
    if api.credentials.required:
        spec["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        spec["security"] = [{"bearer": []}]
    app.openapi_schema = spec
    return spec
