"""A typed Python client of the HTTP API, written on httpx (rather than
generated: the models it sends and reads are the ones the server is built
from, so there is nothing to generate). Events and requests go as the log's
models, replies come back as :mod:`berth.api.replies` models, and any error
is :class:`ApiProblem` with the server's problem document.

    with ApiClient("http://berth-api:8480", token=...) as berth:
        reply = berth.publish([event], wait=10)
        for outcome in reply.decisions[event.event_id]: ...
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from berth.api.replies import (
    Appended,
    Depth,
    GroupOut,
    GroupsOut,
    Headroom,
    HistoryOut,
    Submitted,
)
from schemas.codec import encode_event, validate_event
from schemas.events import Event
from schemas.requests import BatchRequest, PlacementRequest


class ApiProblem(Exception):
    """The server refused: its status and problem document."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status} {problem.get('title', '')}: {problem.get('detail', '')}")
        self.status = status
        self.problem = problem


class ApiClient:
    """One kept-alive connection to a Berth API."""

    def __init__(
        self, url: str, token: str | None = None, timeout_s: float = 60.0, **httpx_options: Any
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(
            base_url=url.rstrip("/"), headers=headers, timeout=timeout_s, **httpx_options
        )

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _reply(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            try:
                problem = response.json()
            except ValueError:
                problem = {"title": response.reason_phrase, "detail": response.text[:200]}
            raise ApiProblem(response.status_code, problem)
        return response.json()

    def publish(
        self, events: Sequence[Event | Mapping[str, Any]], wait: float | None = None
    ) -> Appended:
        """Validate (here first, then by the server) and append ``events``;
        with ``wait``, the writers' decisions that came within it."""
        models = [e if not isinstance(e, Mapping) else validate_event(dict(e)) for e in events]
        body = b"[" + b",".join(encode_event(e) for e in models) + b"]"
        params = {} if wait is None else {"wait": wait}
        response = self.http.post(
            "/v1/events",
            content=body,
            params=params,
            headers={"Content-Type": "application/json"},
            timeout=None if wait is None else wait + 30,
        )
        return Appended.model_validate(self._reply(response))

    def submit(
        self, requests: Sequence[PlacementRequest | BatchRequest], wait: float | None = None
    ) -> Submitted:
        """Submit placement requests and batches; with ``wait``, their answers."""
        body = [
            {**r.model_dump(mode="json", exclude_defaults=True), "type": r.type}
            if isinstance(r, BatchRequest)
            else r.model_dump(mode="json", exclude_defaults=True)
            for r in requests
        ]
        params = {} if wait is None else {"wait": wait}
        timeout = None if wait is None else wait + 30
        response = self.http.post("/v1/requests", json=body, params=params, timeout=timeout)
        return Submitted.model_validate(self._reply(response))

    def create_group(
        self,
        group_id: str,
        policy: str,
        max_server_per_host: int | None = None,
        wait: float | None = None,
        project_id: str | None = None,
        user_id: str | None = None,
    ) -> Appended:
        """Create a server group (of ``project_id``; a project's token makes
        its own); with ``wait``, its writer's decision."""
        body: dict[str, Any] = {"policy": policy}
        if max_server_per_host is not None:
            body["max_server_per_host"] = max_server_per_host
        if project_id is not None:
            body["project_id"] = project_id
        if user_id is not None:
            body["user_id"] = user_id
        response = self.http.put(
            f"/v1/groups/{quote(group_id, safe='')}",
            json=body,
            params={} if wait is None else {"wait": wait},
            timeout=None if wait is None else wait + 30,
        )
        return Appended.model_validate(self._reply(response))

    def delete_group(self, group_id: str, wait: float | None = None) -> Appended:
        """Delete a server group; with ``wait``, its writer's decision."""
        response = self.http.delete(
            f"/v1/groups/{quote(group_id, safe='')}",
            params={} if wait is None else {"wait": wait},
            timeout=None if wait is None else wait + 30,
        )
        return Appended.model_validate(self._reply(response))

    def group(self, group_id: str) -> GroupOut:
        """A server group, its rule and members."""
        response = self.http.get(f"/v1/groups/{quote(group_id, safe='')}")
        return GroupOut.model_validate(self._reply(response))

    def groups(self) -> GroupsOut:
        return GroupsOut.model_validate(self._reply(self.http.get("/v1/groups")))

    def history(self, subject: str, records: bool = True) -> HistoryOut:
        response = self.http.get(
            f"/v1/history/{quote(subject, safe='')}", params={"records": str(records).lower()}
        )
        return HistoryOut.model_validate(self._reply(response))

    def status(self, lag: bool = False) -> dict[str, Any]:
        reply: dict[str, Any] = self._reply(
            self.http.get("/v1/status", params={"lag": str(lag).lower()})
        )
        return reply

    def queue(self) -> dict[str, Depth]:
        reply = self._reply(self.http.get("/v1/queue"))
        return {shape: Depth.model_validate(depth) for shape, depth in reply.items()}

    def headroom(
        self,
        resources: Mapping[str, int],
        availability_zone: str | None = None,
        required_traits: Sequence[str] = (),
        forbidden_traits: Sequence[str] = (),
    ) -> Headroom:
        params: list[tuple[str, str | int | float | bool | None]] = [
            ("resources", ",".join(f"{rc}={n}" for rc, n in resources.items()))
        ]
        if availability_zone is not None:
            params.append(("availability_zone", availability_zone))
        params += [("required_trait", t) for t in required_traits]
        params += [("forbidden_trait", t) for t in forbidden_traits]
        return Headroom.model_validate(self._reply(self.http.get("/v1/headroom", params=params)))

    def stream(
        self, which: str, last_event_id: str | None = None
    ) -> Generator[tuple[str, Any], None, None]:
        """``outcomes`` or ``placements`` as they come: (event id, data)
        pairs, for ever; resume with the last id seen."""
        headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
        with self.http.stream(
            "GET", f"/v1/streams/{which}", headers=headers, timeout=httpx.Timeout(60, read=None)
        ) as response:
            if response.status_code >= 400:
                response.read()
                self._reply(response)
            event_id, data = last_event_id or "", None
            for line in response.iter_lines():
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif not line and data is not None:
                    yield event_id, json.loads(data)
                    data = None
