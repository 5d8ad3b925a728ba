"""Every error the API returns, as an RFC 9457 problem document
(``application/problem+json``: ``type``, ``title``, ``status``, ``detail``,
and for a request that does not match the document, ``errors``: each failing
field's JSON pointer into the body, or the query or path parameter), and the
bounds on what a request may be (:class:`Bounded`), refused with a problem
before the request reaches a route.

Plain HTTP conditions (404, 405, 413, 414) are ``about:blank`` with the
status's own title; Berth's own are ``urn:berth:problem:NAME`` (docs/api.md
lists them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import from_json
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MEDIA_TYPE = "application/problem+json"
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_TARGET_BYTES = 8 * 1024
"""The request line's path and query: an id is at most 255 characters."""

# pydantic's error types for a value its own validators refused: a rule the
# document cannot state (a partition key that must equal the provider id, a
# reserved amount above the total), as opposed to a type or bound it states
_RULE_ERRORS = frozenset({"value_error", "assertion_error"})


class FieldError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    detail: str
    pointer: str | None = Field(
        default=None, description="JSON pointer into the body, e.g. /0/items/0/resources/VCPU"
    )
    parameter: str | None = Field(default=None, description="the query or path parameter")


class ProblemDocument(BaseModel):
    """RFC 9457 problem details."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="about:blank, or urn:berth:problem:NAME (docs/api.md)")
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = None


class Problem(Exception):
    """An error answered as a problem document."""

    def __init__(
        self,
        status: HTTPStatus,
        detail: str,
        name: str | None = None,
        errors: Sequence[FieldError] = (),
        headers: Mapping[str, str] | None = None,
        title: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.type = "about:blank" if name is None else f"urn:berth:problem:{name}"
        self.title = title or status.phrase
        self.errors = list(errors)
        self.headers = dict(headers or {})

    def response(self) -> Response:
        body: dict[str, Any] = {
            "type": self.type,
            "title": self.title,
            "status": int(self.status),
            "detail": self.detail,
        }
        if self.errors:
            body["errors"] = [e.model_dump(exclude_none=True) for e in self.errors]
        return Response(
            json.dumps(body), int(self.status), headers=self.headers, media_type=MEDIA_TYPE
        )


def invalid(errors: Iterable[Mapping[str, Any]], where: str = "the body") -> Problem:
    """pydantic's errors, for data that reached validation: 422 when the
    document's types or bounds refuse it, 409 when only a rule beyond them does."""
    given = list(errors)
    deeper = {tuple(e["loc"][:-1]) for e in given if e["loc"]}
    listed = [
        e
        for e in given
        # pydantic's echo of a list whose items failed ("should have at
        # least 1 item after validation"): the items' errors say it
        if not (
            e["type"] == "too_short" and any(d[: len(e["loc"])] == tuple(e["loc"]) for d in deeper)
        )
    ]
    fields = [_field_error(e, where) for e in listed]
    if listed and all(e["type"] in _RULE_ERRORS for e in listed):
        return Problem(
            HTTPStatus.CONFLICT,
            "; ".join(f.detail for f in fields),
            "rule",
            fields,
            title="Refused by a rule of the log",
        )
    return Problem(
        HTTPStatus.UNPROCESSABLE_ENTITY,
        f"{where} does not match the API's document",
        "validation",
        fields,
        title="Invalid request",
    )


def json_body(raw: bytes) -> Any:
    """The body as JSON, or 400: not JSON, or nested deeper than the
    parser's limit."""
    try:
        return from_json(raw)
    except ValueError as error:
        raise Problem(
            HTTPStatus.BAD_REQUEST, f"the body is not JSON: {error}", "not-json"
        ) from None


def forbidden(role: str, detail: str) -> Problem:
    """403: ``role`` may not do what ``detail`` says."""
    return Problem(HTTPStatus.FORBIDDEN, f"{role}: {detail}", "forbidden", title="Not this role's")


def _field_error(error: Mapping[str, Any], where: str) -> FieldError:
    loc = [str(part) for part in error["loc"]]
    message = str(error["msg"])
    if where == "the body":
        pointer = "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in loc)
        return FieldError(detail=f"{pointer if loc else 'the body'}: {message}", pointer=pointer)
    # FastAPI's parameters: ("query", "wait"), ("path", "id"), ("header", ...)
    name = loc[1] if len(loc) > 1 else ".".join(loc)
    return FieldError(detail=f"{name}: {message}", parameter=name)


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` as a problem: its own, FastAPI's
    validation of parameters, Starlette's 404 and 405, and anything that
    escapes a route (500, logged by the server)."""

    async def problem(_request: Request, error: Exception) -> Response:
        assert isinstance(error, Problem)
        return error.response()

    async def http_error(_request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        status = HTTPStatus(error.status_code)
        detail = error.detail if isinstance(error.detail, str) else status.description
        if status == HTTPStatus.NOT_FOUND and detail == "Not Found":
            detail = "no such resource"
        elif status == HTTPStatus.METHOD_NOT_ALLOWED:
            detail = f"this resource takes {(error.headers or {}).get('Allow', 'other methods')}"
        return Problem(status, detail, headers=error.headers).response()

    async def validation(_request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        return invalid(error.errors(), where="a parameter").response()

    app.add_exception_handler(Problem, problem)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation)


class Bounded:
    """ASGI middleware: a request target over :data:`MAX_TARGET_BYTES` is
    414, a body over :data:`MAX_BODY_BYTES` is 413, said by its
    Content-Length before a byte of it is read, or counted as it arrives."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") > (
            MAX_TARGET_BYTES
        ):
            refused = Problem(
                HTTPStatus.REQUEST_URI_TOO_LONG,
                f"the path and query are over {MAX_TARGET_BYTES} bytes",
            )
            await refused.response()(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > MAX_BODY_BYTES:
                await _too_large().response()(scope, receive, send)
                return
        await self.app(scope, _counted(receive), send)


def _too_large() -> Problem:
    return Problem(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "the body is over 16 MiB")


def _counted(receive: Receive) -> Receive:
    seen = 0

    async def counting() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > MAX_BODY_BYTES:
                raise _too_large()
        return message

    return counting
