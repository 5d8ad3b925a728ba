"""Berth over HTTP, for services that cannot use the Python client: on the
embedded default the log is files in Berth's own format, so this is how a
service in another language publishes to it. Both logs work the same.

The API is an edge, like :mod:`berth.client`: it validates, appends and
reads; the partition writers decide, elsewhere (``berth serve`` or ``berth
projector``). JSON in and out:

- ``POST /v1/events``: one event or a list, validated and appended (202);
  with ``?wait=S``, the writers' decisions on them (200), or 504 with the
  undecided ones after S seconds.
- ``POST /v1/requests``: one placement request or batch (``"type":
  "batch"``) or a list (202); with ``?wait=S``, their answers (200), or 504.
- ``GET /v1/history/{id}``: what ``berth history`` shows (404 if the view
  holds nothing of it); ``?records=0`` for the view alone.
- ``GET /v1/status`` (``?lag=1`` without the table scans), ``GET
  /v1/queue``, ``GET /v1/headroom?resources=VCPU=4,MEMORY_MB=8192``.
- ``GET /v1/openapi.json``: all of this as OpenAPI 3.1 (:mod:`berth.openapi`).

A request that cannot be read gets 400 and an ``error`` saying why;
nothing of it was appended. Started with a token, the API answers only
requests that carry it as ``Authorization: Bearer <token>`` (401).
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError

from berth.app import App
from berth.client import Answers, Decisions, Publisher, PublishError
from berth.history import read_history
from berth.openapi import openapi
from berth.status import read_status
from consumers.batches import parse_shape
from consumers.queue_projector import read_depth
from consumers.snapshot_source import LiveSnapshot
from ledger.log import LogError
from placement.config import SchedulerConfig
from placement.headroom import headroom
from placement.model import Request
from projections.view.engine import driver_message
from schemas.codec import EventDecodeError
from schemas.requests import BatchRequest, PlacementRequest, request_from_json, request_key

_log = logging.getLogger(__name__)

MAX_WAIT_S = 300.0
MAX_BODY_BYTES = 16 * 1024 * 1024

Query = Mapping[str, list[str]]
Reply = tuple[int, Any]


class ApiError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class _Route:
    method: str
    template: str
    """The path, ``{name}`` for a segment the handler reads by that name."""
    handler: Callable[[Api, re.Match[str], Query, Any], Reply]
    pattern: re.Pattern[str] = field(init=False)

    def __post_init__(self) -> None:
        segments = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(self.template))
        object.__setattr__(self, "pattern", re.compile(segments))


class Api:
    """The handlers, on one :class:`App` (its log and view)."""

    def __init__(
        self, app: App, config: SchedulerConfig | None = None, token: str | None = None
    ) -> None:
        """With ``token``, every request must carry ``Authorization: Bearer
        <token>`` (401 otherwise)."""
        self.app = app
        self.token = token
        self.topics = app.settings.topics
        self.publisher = Publisher(app.log, self.topics)
        self.placement = (config or SchedulerConfig.default()).engine()
        self._live = LiveSnapshot(app.engine)
        self._snapshot_lock = threading.Lock()

    def post_events(self, _match: re.Match[str], query: Query, body: Any) -> Reply:
        events = body if isinstance(body, list) else [body]
        if not events or not all(isinstance(e, dict) for e in events):
            raise ApiError(HTTPStatus.BAD_REQUEST, "the body is an event object or a list of them")
        wait = _wait(query)
        # made before the append (a decision cannot come before it), and
        # only to wait: it reads every partition's end
        decisions = None if wait is None else Decisions(self.app.log, self.topics)
        try:
            appended = self.publisher.publish(events)
        except (EventDecodeError, PublishError) as error:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(error)) from None
        positions = [list(at) for at in appended]
        if decisions is None or wait is None:
            return HTTPStatus.ACCEPTED, {"appended": positions}
        ids = [str(e["event_id"]) for e in events]
        pending = decisions.wait(ids, wait, partitions={p for p, _ in appended})
        decided = {
            eid: [o.to_dict() for o in decisions.found[eid]]
            for eid in ids
            if eid in decisions.found
        }
        reply = {"appended": positions, "decisions": decided}
        if pending:
            return HTTPStatus.GATEWAY_TIMEOUT, {**reply, "pending": pending}
        return HTTPStatus.OK, reply

    def post_requests(self, _match: re.Match[str], query: Query, body: Any) -> Reply:
        items = body if isinstance(body, list) else [body]
        requests: list[PlacementRequest | BatchRequest] = []
        for n, item in enumerate(items):
            if not isinstance(item, dict):
                raise ApiError(HTTPStatus.BAD_REQUEST, f"request {n}: not a JSON object")
            try:
                requests.append(request_from_json(json.dumps(item)))
            except ValidationError as error:
                problems = error.errors(include_url=False, include_context=False)
                raise ApiError(HTTPStatus.BAD_REQUEST, f"request {n}: {problems}") from None
        if not requests:
            raise ApiError(HTTPStatus.BAD_REQUEST, "no requests")
        wait = _wait(query)
        answers = None if wait is None else Answers(self.app.log, self.topics)  # as above
        submitted = self.publisher.submit(requests)
        positions = [list(at) for at in submitted]
        if answers is None or wait is None:
            return HTTPStatus.ACCEPTED, {"submitted": positions}
        ids = [request_key(r) for r in requests]
        pending = answers.wait(ids, wait, partitions={p for p, _ in submitted})
        reply = {
            "submitted": positions,
            "answers": {rid: answers.found[rid] for rid in ids if rid in answers.found},
        }
        if pending:
            return HTTPStatus.GATEWAY_TIMEOUT, {**reply, "pending": pending}
        return HTTPStatus.OK, reply

    def get_history(self, match: re.Match[str], query: Query, _body: Any) -> Reply:
        subject = unquote(match["id"])
        log = self.app.log if _flag(query, "records", default=True) else None
        found = read_history(self.app.engine, subject, log, self.topics.events)
        if not found.found:
            raise ApiError(HTTPStatus.NOT_FOUND, f"the view holds nothing about {subject!r}")
        return HTTPStatus.OK, found.to_dict()

    def get_status(self, _match: re.Match[str], query: Query, _body: Any) -> Reply:
        lag = _flag(query, "lag", default=False)
        settings = self.app.settings
        status = read_status(
            self.app.log, self.app.engine, self.topics, settings.partitions, totals=not lag
        )
        return HTTPStatus.OK, status.to_dict()

    def get_queue(self, _match: re.Match[str], _query: Query, _body: Any) -> Reply:
        return HTTPStatus.OK, read_depth(self.app.engine)

    def get_headroom(self, _match: re.Match[str], query: Query, _body: Any) -> Reply:
        text = _one(query, "resources")
        if text is None:
            raise ApiError(HTTPStatus.BAD_REQUEST, "?resources=CLASS=AMOUNT,... is required")
        try:
            resources = parse_shape(text)
        except ValueError as error:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(error)) from None
        request = Request(
            "headroom",
            resources,
            availability_zone=_one(query, "availability_zone"),
            required_traits=frozenset(query.get("required_trait", ())),
            forbidden_traits=frozenset(query.get("forbidden_trait", ())),
        )
        with self._snapshot_lock:  # the live snapshot is one object, updated in place
            snapshot = self._live()
        return HTTPStatus.OK, headroom(self.placement, snapshot, request).to_dict()

    def get_openapi(self, _match: re.Match[str], _query: Query, _body: Any) -> Reply:
        return HTTPStatus.OK, openapi()


ROUTES = (
    _Route("POST", "/v1/events", Api.post_events),
    _Route("POST", "/v1/requests", Api.post_requests),
    _Route("GET", "/v1/history/{id}", Api.get_history),
    _Route("GET", "/v1/status", Api.get_status),
    _Route("GET", "/v1/queue", Api.get_queue),
    _Route("GET", "/v1/headroom", Api.get_headroom),
    _Route("GET", "/v1/openapi.json", Api.get_openapi),
)


def _one(query: Query, name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def _flag(query: Query, name: str, default: bool) -> bool:
    value = _one(query, name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise ApiError(HTTPStatus.BAD_REQUEST, f"?{name}= is 1 or 0, not {value!r}")


def _wait(query: Query) -> float | None:
    value = _one(query, "wait")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_WAIT_S:
        raise ApiError(
            HTTPStatus.BAD_REQUEST, f"?wait= is seconds from 0 to {MAX_WAIT_S:g}, not {value!r}"
        )
    return seconds


class _Handler(BaseHTTPRequestHandler):
    api: Api
    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes: with Nagle's algorithm the body
    # waits for the client's delayed ACK, 40 ms a response on Linux
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        if not self._authorized():
            # the body unread: the connection closes rather than be reused
            self.close_connection = True
            reply = {"error": "this API needs Authorization: Bearer <token>"}
            self._send(HTTPStatus.UNAUTHORIZED, reply, {"WWW-Authenticate": "Bearer"})
            return
        try:
            body = self._body() if method == "POST" else None
            for route in ROUTES:
                match = route.pattern.fullmatch(url.path)
                if match is None:
                    continue
                if route.method != method:
                    raise ApiError(
                        HTTPStatus.METHOD_NOT_ALLOWED, f"{url.path} takes {route.method}"
                    )
                status, reply = route.handler(self.api, match, parse_qs(url.query), body)
                break
            else:
                raise ApiError(HTTPStatus.NOT_FOUND, f"no such resource: {url.path}")
        except ApiError as error:
            status, reply = error.status, {"error": str(error)}
        except DBAPIError as error:
            why = f"the view cannot be read ({driver_message(error)})"
            status, reply = HTTPStatus.SERVICE_UNAVAILABLE, {"error": why}
        except LogError as error:
            status, reply = HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"the log: {error}"}
        except Exception as error:
            # the client gets an answer, the operator the traceback; the server goes on
            _log.exception("api: %s %s failed", method, url.path)
            status, reply = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": repr(error)}
        self._send(status, reply)

    def _authorized(self) -> bool:
        token = self.api.token
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        scheme, _, credentials = given.partition(" ")
        # compared in constant time: the time taken says nothing of the token
        return scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode(), token.encode()
        )

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise ApiError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "the body is over 16 MiB")
        raw = self.rfile.read(length)
        try:
            return json.loads(raw)
        except ValueError as error:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {error}") from None

    def _send(self, status: int, reply: Any, headers: Mapping[str, str] | None = None) -> None:
        payload = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the base writes every request to stderr; a request log is the proxy's business


def serve(api: Api, host: str, port: int) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Serve ``api`` from a daemon thread; the server (``server_address``
    says where it listens) and the thread."""
    handler = type("Handler", (_Handler,), {"api": api})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="berth-api", daemon=True)
    thread.start()
    return server, thread
