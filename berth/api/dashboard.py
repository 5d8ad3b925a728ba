"""The web dashboard: its page and static files at ``/`` and ``/static/``
(shipped in the package, nothing fetched from elsewhere), and the JSON it
reads beside the API's own: the cluster's grid, a request's page, and who
the caller is (what the page offers to change depends on it).

The page and its files carry no data and are served to anyone, since a
browser navigating to ``/`` cannot send a bearer token; everything under
``/v1`` asks for the token as ever, which the page keeps in the tab's
``sessionStorage`` and sends as ``Authorization: Bearer``."""

from collections.abc import Awaitable, Callable
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from berth.api import cluster
from berth.api.credentials import Caller
from berth.api.problems import Problem
from berth.api.service import Api
from berth.history import read_history
from consumers.scheduler import engine_request
from schemas.requests import PlacementRequest

STATIC = Path(__file__).parent / "static"
MAX_RESERVATIONS = 50
"""Reservations a request's page shows with their history."""


class WhoAmI(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str = Field(description="admin, operator or project:ID")
    project: str | None
    reads_everything: bool
    writes_providers: bool = Field(description="may publish an operator's events")
    credentials_required: bool


class ClusterOut(BaseModel):
    """The providers as columns, row i of each being provider i; the
    attributes only when the caller's ``layout`` is not the current one."""

    model_config = ConfigDict(extra="forbid")
    layout: str = Field(description="names the attributes below; send it back as ?layout=")
    classes: list[str]
    resource_class: str | None
    providers: int
    capacity: list[int] = Field(description="of the resource class, per provider")
    used: list[int] = Field(description="held and consumed, per provider")
    ids: list[str] | None = None
    states: list[str] | None = None
    state: list[int] | None = Field(default=None, description="index into states")
    zones: list[str] | None = None
    zone: list[int] | None = Field(default=None, description="index into zones ('' for none)")
    aggregates: list[str] | None = None
    aggregate: list[list[int]] | None = None
    traits: list[str] | None = None
    trait: list[list[int]] | None = None


class RequestOut(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: str
    partition: int
    request: dict[str, Any] | None = Field(description="as submitted")
    answers: list[dict[str, Any]] = Field(description="the scheduler's, in order")
    explanation: dict[str, Any] | None = Field(
        description="one instance of it ranked on the view as it is now (requests, not batches)"
    )
    reservations: list[dict[str, Any]] = Field(
        description="each reservation of the last answer, with its history"
    )


def _json(text: str) -> Response:
    return Response(text, media_type="application/json")


def request_page(api: Api, request_id: str, who: Caller) -> dict[str, Any]:
    """A request's page; 404 when the log holds neither it nor an answer,
    or it is another project's."""
    partition = api.publisher.partition_of(request_id)
    log = api.app.log
    submitted = cluster.find_request(log, api.topics.requests, partition, request_id)
    answers = cluster.find_answers(log, api.topics.placements, partition, request_id)
    parsed = None if submitted is None else cluster.as_request(submitted)
    if who.project is not None:
        members = getattr(parsed, "members", None) or ([parsed] if parsed else [])
        if not members or any(m.project_id != who.project for m in members):
            submitted, answers, parsed = None, [], None
    if submitted is None and not answers:
        raise Problem(HTTPStatus.NOT_FOUND, f"the log holds no request {request_id!r}")
    explained = None
    if isinstance(parsed, PlacementRequest):
        snapshot = api.snapshot()
        explained = cluster.explanation(
            api.placement, snapshot, engine_request(parsed, 1, frozenset())
        )
    held = answers[-1].get("reservations", []) if answers else []
    reservations = []
    for reservation_id, _provider in held[:MAX_RESERVATIONS]:
        found = read_history(api.app.engine, reservation_id, log, api.topics.events)
        if found.found:
            reservations.append(found.to_dict())
    return {
        "request_id": request_id,
        "partition": partition,
        "request": submitted,
        "answers": answers,
        "explanation": explained,
        "reservations": reservations,
    }


def install(
    app: FastAPI,
    api: Api,
    caller: Callable[..., Awaitable[Caller]],
    problems: Callable[..., dict[int | str, Any]],
) -> None:
    """Add the dashboard's routes to ``app``; ``caller`` is the API's
    credentials dependency, ``problems(*codes)`` documents the errors of a
    read and those ``codes``."""
    Who = Annotated[Caller, Depends(caller)]
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    async def page(_request: Request) -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    # a plain route, not the API's: a page, outside the OpenAPI document
    app.router.routes.append(Route("/", page, methods=["GET"]))

    @app.get(
        "/v1/whoami",
        summary="The caller's role, and what it may read and change",
        response_model=None,
        responses={200: {"model": WhoAmI}, **problems()},
    )
    async def whoami(who: Who) -> Response:
        me = WhoAmI(
            role=who.role,
            project=who.project,
            reads_everything=who.operator,
            writes_providers=who.operator,
            credentials_required=api.credentials.required,
        )
        return _json(me.model_dump_json())

    @app.get(
        "/v1/cluster",
        summary="Every provider's usage of a resource class, and its attributes, as columns",
        response_model=None,
        responses={200: {"model": ClusterOut}, **problems()},
    )
    async def get_cluster(
        who: Who,
        resource_class: Annotated[
            str | None, Query(max_length=255, description="default: the first class")
        ] = None,
        layout: Annotated[
            str | None, Query(max_length=64, description="the layout the caller holds")
        ] = None,
    ) -> Response:
        def read() -> str:
            return cluster.cluster(api.snapshot(), resource_class, layout)

        return _json(await run_in_threadpool(read))

    @app.get(
        "/v1/requests/{request_id}",
        summary="A request: as submitted, its answers, an explanation, its reservations",
        response_model=None,
        responses={200: {"model": RequestOut}, **problems(404)},
    )
    async def get_request(
        who: Who, request_id: Annotated[str, PathParam(min_length=1, max_length=255)]
    ) -> Response:
        found = await run_in_threadpool(request_page, api, request_id, who)
        return _json(RequestOut.model_validate(found).model_dump_json())
