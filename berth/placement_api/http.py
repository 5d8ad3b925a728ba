"""A request as the handlers see it (its microversion, caller, query and
JSON body checked as Placement checks them) and their answers."""

from __future__ import annotations

import json
import re
import uuid as uuidlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from functools import lru_cache
from typing import Any

import jsonschema

from berth.placement_api.errors import PlacementError
from berth.placement_api.service import PlacementService, Refused
from berth.placement_api.versions import Version
from schemas.outcomes import Outcome

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

    def json(
        self, schema: dict[str, Any], surely: Callable[[Any, Version], bool] | None = None
    ) -> Any:
        """The body as JSON valid against ``schema``; 415 unless it is sent as
        JSON, 400 when it is not JSON or not valid. ``surely``, a judgement
        written for this one schema, may call it valid first (it must never
        call valid what jsonschema does not)."""
        self.require_content()
        try:
            data = json.loads(self.body)
        except ValueError as error:
            raise PlacementError(400, f"Malformed JSON: {error}") from None
        if surely is not None and surely(data, self.version):
            return data
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


@dataclass(frozen=True)
class Write:
    """What a handler that ends in one write answers instead of a
    :class:`Resp`: the event's ``fields`` to write, and how to word the
    writer's decision (the outcome, or the refusal) as the answer. The
    app writes it from a worker thread (``PlacementApp.respond``), or
    from its event loop with the writes that arrived beside it
    (``WritePump``)."""

    fields: Mapping[str, Any]
    answer: Callable[[Outcome | Refused], Resp]


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
    request. An instance :func:`surely_valid` says is valid is not given to
    jsonschema at all (it took a fifth of a write's CPU)."""
    if surely_valid(instance, schema):
        return
    validator = _validator(json.dumps(schema))  # in its order: the errors come in it
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise error


_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: type(v) is int,  # jsonschema's also takes 1.0: that is left to it
    "number": lambda v: type(v) in (int, float),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def surely_valid(instance: Any, schema: dict[str, Any]) -> bool:
    """Whether ``instance`` is valid against ``schema`` by the few keywords
    Placement's common bodies and queries use, read as jsonschema reads
    them. False says "not surely": an invalid instance, or one this does
    not judge (another keyword, an integer written 1.0), which jsonschema
    then judges and words. It must never say True where jsonschema finds
    an error."""
    for keyword, value in schema.items():
        check = _KEYWORDS.get(keyword)
        if check is None or not check(instance, value, schema):
            return False
    return True


def _type(instance: Any, value: Any, _: dict[str, Any]) -> bool:
    names = [value] if isinstance(value, str) else value
    return any(name in _TYPES and _TYPES[name](instance) for name in names)


def _properties(instance: Any, value: dict[str, Any], _: dict[str, Any]) -> bool:
    if not isinstance(instance, dict):
        return True
    return all(
        key not in instance or surely_valid(instance[key], sub) for key, sub in value.items()
    )


def _pattern_properties(instance: Any, value: dict[str, Any], _: dict[str, Any]) -> bool:
    if not isinstance(instance, dict):
        return True
    return all(
        surely_valid(found, sub)
        for pattern, sub in value.items()
        for key, found in instance.items()
        if re.search(pattern, key)
    )


def _additional(instance: Any, value: Any, schema: dict[str, Any]) -> bool:
    if not isinstance(instance, dict):
        return True
    named = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extra = [
        found
        for key, found in instance.items()
        if key not in named and not any(re.search(pattern, key) for pattern in patterns)
    ]
    if isinstance(value, bool):
        return value or not extra
    return isinstance(value, dict) and all(surely_valid(found, value) for found in extra)


def _items(instance: Any, value: Any, _: dict[str, Any]) -> bool:
    if not isinstance(instance, list):
        return True
    return isinstance(value, dict) and all(surely_valid(item, value) for item in instance)


def _sized(kind: type, measure: Any) -> Any:
    """A keyword that bounds the size of instances of ``kind`` (others pass it)."""
    return lambda instance, value, _: not isinstance(instance, kind) or measure(instance, value)


def _numeric(compare: Any) -> Any:
    return lambda instance, value, _: type(instance) not in (int, float) or compare(instance, value)


_KEYWORDS: dict[str, Any] = {
    "type": _type,
    "properties": _properties,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional,
    "items": _items,
    "required": _sized(dict, lambda i, v: all(name in i for name in v)),
    "minProperties": _sized(dict, lambda i, v: len(i) >= v),
    "maxProperties": _sized(dict, lambda i, v: len(i) <= v),
    "minItems": _sized(list, lambda i, v: len(i) >= v),
    "maxItems": _sized(list, lambda i, v: len(i) <= v),
    "minLength": _sized(str, lambda i, v: len(i) >= v),
    "maxLength": _sized(str, lambda i, v: len(i) <= v),
    "pattern": _sized(str, lambda i, v: re.search(v, i) is not None),
    "format": lambda instance, value, _: FORMATS.conforms(instance, value),
    "minimum": _numeric(lambda i, v: i >= v),
    "maximum": _numeric(lambda i, v: i <= v),
}
"""Each keyword judged as jsonschema judges it, for what it applies to."""


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
