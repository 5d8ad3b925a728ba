"""The Placement API as a plain ASGI app: every request goes to
:meth:`PlacementApp.respond` (or, for a write of allocations, begins on
the event loop), which does what Placement's middleware does in its
order (request id, noauth2, microversion, the content-length rule),
finds the handler by path and method (404, 405 with ``Allow``) and words
every error as Placement's error body."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool

from berth.placement_api import allocations, providers, registry
from berth.placement_api.candidates import CandidateEngine, list_candidates
from berth.placement_api.cors import Cors
from berth.placement_api.errors import PlacementError
from berth.placement_api.http import Caller, Req, Resp, Write, accepts_json
from berth.placement_api.policy import RULES, Policy
from berth.placement_api.pump import WritePump
from berth.placement_api.service import PlacementService, Refused, random_uuid
from berth.placement_api.versions import (
    HEADER,
    Version,
    max_version,
    min_version,
    negotiate,
)
from schemas.outcomes import Outcome

Handler = Callable[..., Resp | Write]
log = logging.getLogger(__name__)
_NAME = "(?P<{}>[^/]+)"


def _home(req: Req) -> Resp:
    versions = [
        {
            "id": f"v{min_version()}",
            "max_version": max_version(),
            "min_version": min_version(),
            "status": "CURRENT",
            "links": [{"rel": "self", "href": ""}],
        }
    ]
    return Resp(body={"versions": versions}).modified(req, None)


def _routes(candidates: CandidateEngine) -> list[Route]:
    p, r, a = providers, registry, allocations
    table: list[tuple[str, dict[str, Handler]]] = [
        ("", {"GET": _home}),
        ("/", {"GET": _home}),
        ("/resource_classes", {"GET": r.list_resource_classes, "POST": r.create_resource_class}),
        (
            "/resource_classes/{name}",
            {
                "GET": r.get_resource_class,
                "PUT": r.update_resource_class,
                "DELETE": r.delete_resource_class,
            },
        ),
        ("/resource_providers", {"GET": p.list_providers, "POST": p.create_provider}),
        (
            "/resource_providers/{uuid}",
            {"GET": p.get_provider, "PUT": p.update_provider, "DELETE": p.delete_provider},
        ),
        (
            "/resource_providers/{uuid}/inventories",
            {
                "GET": p.get_inventories,
                "POST": p.create_inventory,
                "PUT": p.set_inventories,
                "DELETE": p.delete_inventories,
            },
        ),
        (
            "/resource_providers/{uuid}/inventories/{rc}",
            {"GET": p.get_inventory, "PUT": p.update_inventory, "DELETE": p.delete_inventory},
        ),
        ("/resource_providers/{uuid}/usages", {"GET": p.get_provider_usages}),
        (
            "/resource_providers/{uuid}/aggregates",
            {
                "GET": _from(1, p.get_provider_aggregates),
                "PUT": _from(1, p.set_provider_aggregates),
            },
        ),
        ("/resource_providers/{uuid}/allocations", {"GET": a.get_provider_allocations}),
        ("/allocations", {"POST": a.post_allocations}),
        (
            "/allocations/{consumer_uuid}",
            {
                "GET": a.get_consumer_allocations,
                "PUT": a.put_consumer_allocations,
                "DELETE": a.delete_consumer_allocations,
            },
        ),
        ("/allocation_candidates", {"GET": partial(list_candidates, engine=candidates)}),
        ("/traits", {"GET": r.list_traits}),
        ("/traits/{name}", {"GET": r.get_trait, "PUT": r.put_trait, "DELETE": r.delete_trait}),
        (
            "/resource_providers/{uuid}/traits",
            {
                "GET": _from(6, p.get_provider_traits),
                "PUT": _from(6, p.set_provider_traits),
                "DELETE": _from(6, p.delete_provider_traits),
            },
        ),
        ("/usages", {"GET": a.get_usages}),
        ("/reshaper", {"POST": a.reshape}),
    ]
    compiled = []
    for path, methods in table:
        pattern = re.sub(r"\{(\w+)\}", lambda m: _NAME.format(m.group(1)), path)
        compiled.append((re.compile(f"^{pattern}$"), path, methods))
    return compiled


Route = tuple[re.Pattern[str], str, dict[str, Handler]]


def _by_segment(routes: list[Route]) -> dict[str, list[Route]]:
    """The routes by the first segment of their path (``allocations`` for
    ``/allocations/{consumer_uuid}``), none of which is a parameter: a
    request's path is matched against its segment's two or three patterns,
    not against all twenty-odd (a write of allocations was matched against
    fifteen before it found its own). The patterns never overlap, so the
    order among them does not matter."""
    found: dict[str, list[Route]] = {}
    for route in routes:
        found.setdefault(_segment(route[1]), []).append(route)
    return found


def _segment(path: str) -> str:
    return path[1:].partition("/")[0]


def _from(minor: int, handler: Handler) -> Handler:
    """A handler that exists only from microversion 1.``minor``."""

    def gated(req: Req, **path: str) -> Resp | Write:
        if not req.at_least(minor):
            raise PlacementError(404, "The resource could not be found.")
        return handler(req, **path)

    return gated


def _caller(headers: Mapping[str, str]) -> Caller | None:
    """noauth2, as Placement's: the token is ``USER[:PROJECT]`` (the project
    the user's own name when not given, an X-Project-Id header before
    both); the roles are X-Roles when sent, else ``admin`` for the user
    ``admin``."""
    token = headers.get("x-auth-token")
    if not token:
        return None
    user, _, named = token.partition(":")
    if "x-roles" in headers:
        roles = {r.strip() for r in headers["x-roles"].split(",") if r.strip()}
    else:
        roles = {"admin"} if user == "admin" else set()
    system = headers.get("openstack-system-scope") or None
    # as oslo.context reads the headers noauth2 leaves: X-Project-Id first
    project = headers.get("x-project-id") or (None if system else named or user)
    return Caller(user, project, frozenset(roles), system)


def _target(caller: Caller, template: str, query: str) -> dict[str, str | None]:
    """What a rule is checked against: the caller's own project and user,
    or for ``GET /usages`` the project asked about."""
    if template == "/usages":
        asked = parse_qs(query).get("project_id")
        return {"project_id": asked[0] if asked else None}
    return {"project_id": caller.project, "user_id": caller.user}


Answer = tuple[int, dict[str, str], bytes]
"""Status, headers, body."""
_CONSUMER_ALLOCATIONS = re.compile("^/allocations/[^/]+$")


class _Request:
    """What answering a request needs to know of it once its handler ran."""

    __slots__ = ("headers", "id", "method", "path", "query", "version")

    def __init__(
        self, method: str, path: str, query: str, headers: Mapping[str, str], request_id: str
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.id = request_id
        self.version: Version | None = None


@dataclass(frozen=True)
class Pending:
    """A request whose handler ended in a write not yet decided."""

    request: _Request
    write: Write


class PlacementApp:
    """Dispatches one request; everything but the HTTP server itself."""

    def __init__(
        self,
        service: PlacementService,
        policy: Policy | None = None,
        cors: Cors | None = None,
        caller_of: Callable[[Mapping[str, str]], Caller | None] | None = None,
    ) -> None:
        self.service = service
        self.policy = policy or Policy()
        self.cors = cors
        self.caller_of = caller_of or _caller
        """noauth2 by default; Keystone's verdict (berth.placement_api.keystone)"""
        self.routes = _by_segment(_routes(CandidateEngine(service.engine)))

    def respond(
        self, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes
    ) -> Answer:
        """The answer to one request, CORS's headers on it when configured
        (outermost, as in Placement's pipeline); its write, if it ends in
        one, written from this (worker) thread. It reads a view that holds
        every write answered before it began."""
        try:
            self.service.settle()
        except PlacementError as error:
            return self._error(error, None, headers, f"req-{random_uuid()}")
        answer = self.begin(method, path, query, headers, body)
        if isinstance(answer, Pending):
            try:
                decided: Outcome | Refused = self.service.write(answer.write.fields)
            except Refused as refused:
                decided = refused
            except PlacementError as error:
                return self.end(answer, error)
            return self.end(answer, decided)
        return answer

    def on_loop(self, method: str, path: str) -> bool:
        """Whether the request may begin on the server's event loop: a
        write of one consumer's allocations, or of several (1.13), whose
        checks read the view only for a provider not seen yet, asked with
        noauth2's headers (a Keystone token may be checked over the
        network)."""
        if self.caller_of is not _caller:
            return False
        if method == "PUT":
            return _CONSUMER_ALLOCATIONS.match(path) is not None
        return method == "POST" and path == "/allocations"

    def begin(
        self, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes
    ) -> Answer | Pending:
        """The answer to one request, or, when its handler ends in a write,
        the write still to do: :meth:`end` words its decision."""
        request = _Request(method, path, query, headers, f"req-{random_uuid()}")
        try:
            request.version = negotiate(headers)
            resp = self._handle(method, path, query, headers, body, request.version)
        except PlacementError as error:
            return self._cors(request, self._error(error, request.version, headers, request.id))
        if isinstance(resp, Write):
            return Pending(request, resp)
        return self._cors(request, self._answer(resp, request))

    def end(self, pending: Pending, decided: Outcome | Refused | PlacementError) -> Answer:
        """The answer to a request whose write was decided (or failed)."""
        request = pending.request
        try:
            if isinstance(decided, PlacementError):
                raise decided
            resp = pending.write.answer(decided)
        except PlacementError as error:
            answer = self._error(error, request.version, request.headers, request.id)
            return self._cors(request, answer)
        return self._cors(request, self._answer(resp, request))

    def _cors(self, request: _Request, answer: Answer) -> Answer:
        if self.cors is None:
            return answer
        return self.cors.apply(request.method, request.path, request.query, request.headers, answer)

    def _answer(self, resp: Resp, request: _Request) -> Answer:
        version = request.version
        out = {"openstack-request-id": request.id}
        if version is not None:
            out[HEADER] = f"placement {version}"
            out["vary"] = HEADER.lower()
        out.update(resp.headers)
        if resp.body is None:
            return resp.status, out, b""
        out["content-type"] = "application/json"
        return resp.status, out, json.dumps(resp.body).encode()

    def _handle(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        body: bytes,
        version: Version,
    ) -> Resp | Write:
        root = path in ("", "/")  # open to all, as Placement's version document is
        caller = None if root else self.caller_of(headers)
        if caller is None and not root:
            raise PlacementError(401, "The request you have made requires authentication.")
        length = headers.get("content-length")
        if length and length != "0" and not headers.get("content-type"):
            raise PlacementError(400, "content-type header required when content-length > 0")
        for pattern, template, methods in self.routes.get(_segment(path), ()):
            found = pattern.match(path)
            if found is None:
                continue
            handler = methods.get(method)
            if handler is None:
                raise PlacementError(
                    405,
                    "The method specified is not allowed for this resource.",
                    headers={"allow": ", ".join(methods)},
                )
            if caller is not None and (method, template) in RULES:
                self.policy.authorize(
                    RULES[method, template], caller, _target(caller, template, query)
                )
            req = Req(
                method,
                path,
                parse_qs(query, keep_blank_values=True),
                headers,
                body,
                version,
                caller or Caller("anonymous", None, frozenset()),
                self.service,
            )
            return handler(req, **found.groupdict())
        raise PlacementError(404, "The resource could not be found.", explain=False)

    def _error(
        self,
        error: PlacementError,
        version: Version | None,
        headers: Mapping[str, str],
        request_id: str,
    ) -> tuple[int, dict[str, str], bytes]:
        out = {"openstack-request-id": request_id, **error.headers}
        with_code = version is not None and version.at_least(23)
        if version is not None:
            out[HEADER] = f"placement {version}"
            out["vary"] = HEADER.lower()
        body: dict[str, Any] = error.body(with_code, request_id)
        if error.status == 406 and version is None:
            body["errors"][0]["max_version"] = max_version()
            body["errors"][0]["min_version"] = min_version()
        if error.status == 405:
            body["errors"][0]["detail"] = (
                f"The method {headers.get(':method', '')} is not allowed for this resource.\n\n "
                f"{error.message}  "
            )
        accept = headers.get("accept")
        if accepts_json(accept) or not accept:
            out["content-type"] = "application/json"
            return error.status, out, json.dumps(body).encode()
        detail = body["errors"][0]["detail"]
        title = body["errors"][0]["title"]
        if "text/html" in (accept or ""):
            out["content-type"] = "text/html; charset=UTF-8"
            html = (
                f"<html>\n <head>\n  <title>{error.status} {title}</title>\n </head>\n <body>\n"
                f"  <h1>{error.status} {title}</h1>\n  {detail}\n </body>\n</html>"
            )
            return error.status, out, html.encode()
        out["content-type"] = "text/plain; charset=UTF-8"
        return error.status, out, f"{error.status} {title}\n\n{detail}".encode()


Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]
NO_BODY = frozenset({204, 304})


def create_app(
    service: PlacementService,
    policy: Policy | None = None,
    cors: Cors | None = None,
    caller_of: Callable[[Mapping[str, str]], Caller | None] | None = None,
    pump: WritePump | None = None,
) -> Asgi:
    """The Placement API on ``service`` as a plain ASGI app, at the root of
    its address; callers by noauth2 unless ``caller_of`` says who they are.
    :meth:`PlacementApp.respond` does all the routing, so no framework sits
    between uvicorn and it (a framework's middleware and router cost more
    than the rest of the HTTP stack on a write). Given a ``pump``, a write
    of a consumer's allocations is begun on the event loop and written by
    the pump (:meth:`PlacementApp.on_loop`); every other request is
    answered from a worker thread."""
    placement = PlacementApp(service, policy, cors, caller_of)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no lifespan, no websockets
        body = await _body(receive)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        headers[":method"] = method = scope["method"]
        path = "" if scope["path"] == "/" else scope["path"]
        query = scope["query_string"].decode("latin-1")
        try:
            if pump is not None and placement.on_loop(method, path):
                answer = await _on_loop(placement, pump, method, path, query, headers, body)
            else:
                answer = await run_in_threadpool(
                    placement.respond, method, path, query, headers, body
                )
        except Exception:
            log.exception("placement-api: %s %s failed", method, path)
            answer = 500, {"content-type": "text/plain"}, b"Internal Server Error"
        await _answer(send, *answer)

    return app


async def _on_loop(
    placement: PlacementApp,
    pump: WritePump,
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
) -> Answer:
    """A request begun on the event loop, its write (if it ends in one)
    written by the pump with the others that arrived beside it: no worker
    thread woken for it."""
    begun = placement.begin(method, path, query, headers, body)
    if not isinstance(begun, Pending):
        return begun
    try:
        decided: Outcome | Refused | PlacementError = await pump.write(begun.write.fields)
    except (Refused, PlacementError) as failure:
        decided = failure
    return placement.end(begun, decided)


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _answer(send: Send, status: int, headers: dict[str, str], content: bytes) -> None:
    """The response as it goes out: a content-length unless it has no body."""
    if status in NO_BODY or status < 200:
        content = b""
    else:
        headers = {**headers, "content-length": str(len(content))}
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": content})
