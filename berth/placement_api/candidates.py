"""``GET /allocation_candidates`` (from 1.10), the basic form: one group of
``resources`` served by a single provider, with ``required`` traits,
``member_of`` aggregates and ``limit``. Which providers can take the
resources is Berth's scheduling engine's answer on the live snapshot of
the view (its filters on capacity, unit rules, state and traits: one
capacity view with Berth's own reservations); Placement's any-of traits
and aggregates are applied to what it passes. Trees, sharing providers and
granular groups are not supported yet: they are refused, not ignored."""

from __future__ import annotations

import threading
from typing import Any

from berth.placement_api.errors import bad_request, not_found
from berth.placement_api.filters import (
    Wanted,
    check_names,
    has_room,
    has_traits,
    in_aggregates,
    parse_member_of,
    parse_required,
    parse_resources,
)
from berth.placement_api.http import Req, Resp, check_accept
from berth.placement_api.reads import Provider, providers
from consumers.snapshot_source import LiveSnapshot
from scheduling.config import SchedulerConfig
from scheduling.model import Request

_SUPPORTED = {"resources", "required", "member_of", "limit"}
_PARAMS = (
    (10, "resources", {"type": "string"}),
    (16, "limit", {"type": "string", "pattern": "^[1-9][0-9]*$"}),
    (17, "required", {"type": "string"}),
    (21, "member_of", {"type": "string"}),
    (25, "group_policy", {"type": "string"}),
    (31, "in_tree", {"type": "string"}),
    (35, "root_required", {"type": "string"}),
    (36, "same_subtree", {"type": "string"}),
)
"""The unnumbered parameters Placement takes, from the version that added each."""


class CandidateEngine:
    """Berth's engine on a live snapshot of the view, shared by requests."""

    def __init__(self, service_engine: Any) -> None:
        self.engine = SchedulerConfig.default().engine()
        self.live = LiveSnapshot(service_engine)
        self.lock = threading.Lock()

    def feasible(self, resources: dict[str, int], wanted: Wanted) -> list[str]:
        required = frozenset(t for any_of in wanted.required if len(any_of) == 1 for t in any_of)
        request = Request(
            "allocation-candidates",
            dict(resources),
            required_traits=required,
            forbidden_traits=frozenset(wanted.forbidden),
        )
        with self.lock:  # the live snapshot is one object, updated in place
            snapshot = self.live()
            rows = self.engine.feasible(snapshot, request)
            return [snapshot.providers[int(row)].provider_id for row in rows]


def list_candidates(req: Req, engine: CandidateEngine) -> Resp:
    if not req.at_least(10):
        raise not_found("The resource could not be found.")
    check_accept(req)
    properties = {name: schema for minor, name, schema in _PARAMS if req.at_least(minor)}
    req.params(
        {
            "type": "object",
            "properties": properties,
            "required": ["resources"],
            # numbered request groups (1.25) are refused below as not supported
            "patternProperties": {"^(resources|required|member_of|in_tree)[0-9a-zA-Z_-]+$": {}}
            if req.at_least(25)
            else {},
            "additionalProperties": False,
        }
    )
    unsupported = sorted(set(req.query) - _SUPPORTED)
    if unsupported:
        raise bad_request(
            f"Invalid query string parameters: Berth does not support {', '.join(unsupported)} yet"
        )
    wanted = Wanted(resources=parse_resources(req.one("resources") or ""))
    if "required" in req.query:
        parse_required(req, req.query["required"], wanted)
    if "member_of" in req.query:
        parse_member_of(req, req.query["member_of"], wanted)
    limit = _limit(req)
    check_names(req, wanted)
    by_uuid = {p.uuid: p for p in providers(req.service.engine)}
    chosen = [
        by_uuid[uuid] for uuid in engine.feasible(wanted.resources, wanted) if uuid in by_uuid
    ]
    chosen = [
        p
        for p in chosen
        if has_room(p, wanted.resources) and has_traits(p, wanted) and in_aggregates(p, wanted)
    ]
    if limit is not None:
        chosen = chosen[:limit]
    body = {
        "allocation_requests": [_request(req, p, wanted.resources) for p in chosen],
        "provider_summaries": {p.uuid: _summary(req, p, wanted.resources) for p in chosen},
    }
    return Resp(body=body).modified(req, None)


def _limit(req: Req) -> int | None:
    values = req.query.get("limit")
    # the first of several, as Placement takes it (the schema checked the form)
    return None if not values else int(values[0])


def _request(req: Req, p: Provider, resources: dict[str, int]) -> dict[str, Any]:
    if not req.at_least(12):
        return {"allocations": [{"resource_provider": {"uuid": p.uuid}, "resources": resources}]}
    request: dict[str, Any] = {"allocations": {p.uuid: {"resources": dict(resources)}}}
    if req.at_least(34):
        request["mappings"] = {"": [p.uuid]}
    return request


def _summary(req: Req, p: Provider, resources: dict[str, int]) -> dict[str, Any]:
    classes = sorted(p.inventories) if req.at_least(27) else sorted(resources)
    summary: dict[str, Any] = {
        "resources": {
            rc: {
                "capacity": int(
                    (p.inventories[rc]["total"] - p.inventories[rc]["reserved"])
                    * p.inventories[rc]["allocation_ratio"]
                ),
                "used": p.usage.get(rc, 0),
            }
            for rc in classes
        }
    }
    if req.at_least(17):
        summary["traits"] = sorted(p.traits)
    if req.at_least(29):
        summary["parent_provider_uuid"] = p.parent
        summary["root_provider_uuid"] = p.root
    return summary
