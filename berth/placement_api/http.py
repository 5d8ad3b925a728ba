"""A request as the handlers see it (its microversion, caller, query and
JSON body checked as Placement checks them) and their answers."""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from functools import lru_cache
from typing import Any

import jsonschema

from berth.placement_api.errors import PlacementError
from berth.placement_api.service import PlacementService
from berth.placement_api.versions import Version

FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("uuid", raises=ValueError)
def _uuid_like(value: object) -> bool:
    """Placement's notion of a uuid: anything :class:`uuid.UUID` reads (dashes or not)."""
    if isinstance(value, str):
        uuidlib.UUID(value)
    return True


@dataclass(frozen=True)
class Caller:
    """Who asks, by noauth2's token: ``admin``, or ``user:project``; a
    system-scoped caller (``OpenStack-System-Scope``) has no project."""

    user: str
    project: str | None
    roles: frozenset[str]
    system_scope: str | None = None


@dataclass
class Req:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: Mapping[str, str]
    body: bytes
    version: Version
    caller: Caller
    service: PlacementService

    def require_content(self) -> None:
        """415 unless the body is sent as JSON (checked before anything else)."""
        content_type = (self.headers.get("content-type") or "").split(";")[0].strip()
        if content_type != "application/json":
            raise PlacementError(
                415,
                f"The media type {content_type or 'None'} is not supported, use application/json",
            )

    def json(self, schema: dict[str, Any]) -> Any:
        """The body as JSON valid against ``schema``; 415 unless it is sent as
        JSON, 400 when it is not JSON or not valid."""
        self.require_content()
        try:
            data = json.loads(self.body)
        except ValueError as error:
            raise PlacementError(400, f"Malformed JSON: {error}") from None
        try:
            validate(data, schema)
        except jsonschema.ValidationError as error:
            raise PlacementError(400, f"JSON does not validate: {error}") from None
        return data

    def params(self, schema: dict[str, Any]) -> dict[str, str]:
        """The query's parameters (the last of each) valid against ``schema``."""
        values = {name: found[-1] for name, found in self.query.items()}
        try:
            validate(values, schema)
        except jsonschema.ValidationError as error:
            raise PlacementError(400, f"Invalid query string parameters: {error}") from None
        return values

    def absolute(self, path: str) -> str:
        """``path`` as a URL on the host the request was sent to."""
        return f"http://{self.headers.get('host', '')}{path}"

    def one(self, name: str) -> str | None:
        values = self.query.get(name)
        return None if not values else values[-1]

    def at_least(self, minor: int) -> bool:
        return self.version.at_least(minor)


@dataclass
class Resp:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    def modified(self, req: Req, ms: int | None) -> Resp:
        """From 1.15 a GET says when what it shows last changed, and not to cache it."""
        if req.at_least(15):
            when = (
                datetime.now(UTC)
                if ms is None
                else datetime.fromtimestamp(ms / 1000, UTC).replace(microsecond=0)
            )
            self.headers["last-modified"] = format_datetime(when, usegmt=True)
            self.headers["cache-control"] = "no-cache"
        return self


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=FORMATS)


def validate(instance: Any, schema: dict[str, Any]) -> None:
    """``jsonschema.validate`` (its checks, its best error), with the
    validator of each schema made and checked once, not at every request:
    checking the schema itself cost more than the rest of a candidates
    request."""
    validator = _validator(json.dumps(schema))  # in its order: the errors come in it
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise error


def latest(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def accepts_json(accept: str | None) -> bool:
    """Whether an Accept header admits application/json."""
    if not accept:
        return True
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            if param.startswith("q="):
                try:
                    q = float(param[2:])
                except ValueError:
                    q = 0.0
        if q > 0 and media in ("application/json", "application/*", "*/*"):
            return True
    return False


def check_accept(req: Req) -> None:
    if not accepts_json(req.headers.get("accept")):
        raise PlacementError(406, "Only application/json is provided")
