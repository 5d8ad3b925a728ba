"""The API's replies as pydantic models: FastAPI describes them in the
OpenAPI document, and the fuzzing tests hold every reply to them. The
routes write their JSON directly (no model is built a reply, on the hot
path); these say what it is."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Position = tuple[int, int]


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
    identifiers: list[tuple[str, str]] | None = None


class Appended(Reply):
    appended: list[Position] = Field(description="(partition, offset) of each event, in order")


class Decided(Appended):
    decisions: dict[str, list[OutcomeOut]] = Field(
        description="event id -> the outcomes of its record (a project sees its own)"
    )
    pending: list[str] | None = Field(default=None, description="event ids still undecided")


class Submitted(Reply):
    submitted: list[Position] = Field(description="(partition, offset) of each, in order")


class Answered(Submitted):
    answers: dict[str, dict[str, Any]] = Field(
        description="request or batch id -> the scheduler's answer"
    )
    pending: list[str] | None = Field(default=None, description="ids still unanswered")


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
