"""The API's replies as pydantic models: FastAPI describes them in the
OpenAPI document, and the fuzzing tests hold every reply to them. The
routes write their JSON directly (no model is built a reply, on the hot
path); these say what it is."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.background import BackgroundTask
from starlette.responses import Response

Position = Annotated[list[int], Field(min_length=2, max_length=2)]
Pair = Annotated[list[str], Field(min_length=2, max_length=2)]


class Reply(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReasonOut(Reply):
    code: str
    provider_id: str | None = None
    resource_class: str | None = None
    requested: int | None = None
    available: int | None = None
    detail: str | None = None


class OutcomeOut(Reply):
    """One decision of a partition's writer (docs/concepts.md#outcomes)."""

    partition: int
    offset: int
    seq: int
    kind: Literal[
        "accepted",
        "rejected",
        "consumed",
        "released",
        "expired",
        "renewed",
        "noop",
        "applied",
        "prepared",
        "committed",
        "aborted",
    ]
    event_id: str
    subject: str
    clock_ms: int
    reasons: list[ReasonOut] | None = None
    expires_at_ms: int | None = None
    identifiers: list[Pair] | None = None


Decisions = dict[str, list[OutcomeOut]]
Answers = dict[str, dict[str, Any]]


class Appended(Reply):
    """Appended; with ``?wait=``, the decisions that came in time and the
    event ids still ``pending``."""

    appended: list[Position] = Field(description="(partition, offset) of each event, in order")
    decisions: Decisions | None = None
    pending: list[str] | None = None


class Decided(Reply):
    appended: list[Position]
    decisions: Decisions = Field(
        description="event id -> the outcomes of its record (a project sees its own)"
    )


class Submitted(Reply):
    """Submitted; with ``?wait=``, the answers that came in time and the ids
    still ``pending``."""

    submitted: list[Position] = Field(description="(partition, offset) of each, in order")
    answers: Answers | None = None
    pending: list[str] | None = None


class Answered(Reply):
    submitted: list[Position]
    answers: Answers = Field(description="request or batch id -> the scheduler's answer")


class Depth(Reply):
    instances: int
    batches: int


class Headroom(Reply):
    instances: int
    providers: dict[str, int]


class HistoryOut(Reply):
    """What ``berth history --json`` prints."""

    subject: str
    names: list[str]
    reservations: list[dict[str, Any]]
    provider: dict[str, Any] | None
    pool: dict[str, Any] | None
    history: list[dict[str, Any]]


class AggregateOut(Reply):
    """An aggregate as the view holds it: the copy of its home partition."""

    aggregate_id: str
    metadata: dict[str, str]
    members: list[str] = Field(description="the providers in it, by id")


def json_reply(
    status: int, reply: Any, sent: Callable[[], Awaitable[object]] | None = None
) -> Response:
    """``reply`` as JSON, written directly (no reply model is built);
    ``sent`` is awaited once it has gone out (a coroutine: a plain function
    would be run from the thread pool)."""
    after = None if sent is None else BackgroundTask(sent)
    return Response(json.dumps(reply), status, media_type="application/json", background=after)


class GroupMember(Reply):
    consumer_id: str
    provider_id: str
    reservation_id: str = Field(
        description="the membership's reservation, in the group's partition"
    )
    status: str


class GroupOut(Reply):
    """A server group as the view holds it, with the members still held,
    consumed or pending."""

    group_id: str
    policy: str
    max_server_per_host: int
    project_id: str | None = Field(
        default=None, description="the project whose instances may join it (null: any)"
    )
    user_id: str | None = None
    partition: int = Field(description="the partition whose writer decides its members")
    members: list[GroupMember]
    hosts: dict[str, int] = Field(description="provider -> members there")


class GroupSummary(Reply):
    group_id: str
    policy: str
    max_server_per_host: int
    project_id: str | None = None
    user_id: str | None = None


class GroupsOut(Reply):
    groups: list[GroupSummary]
