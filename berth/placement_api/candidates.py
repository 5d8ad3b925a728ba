"""``GET /allocation_candidates`` (from 1.10): every parameter of 1.39
(request groups, ``group_policy``, ``in_tree``, ``root_required``,
``same_subtree``, ``limit``; ``mappings`` from 1.34), read by
``candidate_query`` and answered by ``candidate_search`` on the view's
providers with their usage: one capacity view with Berth's own
reservations. The providers come from a ``LiveIndex`` of the view, which
re-reads only those that changed since the last request. In the common
case (one group, no trees, no sharing providers) a candidate must also be
one of Berth's scheduling engine's feasible providers on the live snapshot
(its filters on capacity, unit rules, state and traits), judged for the
few providers Placement's rules pick, not for every one."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from berth.placement_api.candidate_index import LiveIndex
from berth.placement_api.candidate_query import parse
from berth.placement_api.candidate_search import AllocationRequest, search
from berth.placement_api.errors import not_found
from berth.placement_api.filters import Wanted, check_names
from berth.placement_api.http import Req, Resp, check_accept
from berth.placement_api.reads import Provider
from consumers.snapshot_source import LiveSnapshot
from scheduling.config import SchedulerConfig
from scheduling.model import Request


class CandidateEngine:
    """Berth's engine on a live snapshot of the view, shared by requests."""

    def __init__(self, service_engine: Any) -> None:
        self.engine = SchedulerConfig.default().engine()
        self.live = LiveSnapshot(service_engine)
        self.index = LiveIndex(service_engine)
        self.lock = threading.Lock()
        """The live snapshot and the index are each one object, updated in place."""

    def feasible(self, wanted: Wanted, uuids: list[str]) -> set[str]:
        """Which of ``uuids`` the engine's filters let through for ``wanted``
        (the caller holds the lock)."""
        required = frozenset(t for any_of in wanted.required if len(any_of) == 1 for t in any_of)
        request = Request(
            "allocation-candidates",
            dict(wanted.resources),
            required_traits=required,
            forbidden_traits=frozenset(wanted.forbidden),
        )
        snapshot = self.live.snapshot
        if snapshot is None or self.live.offsets() != self.index.seen:
            # the index was brought up to date for this request: the snapshot
            # is read again only if it reflects other offsets than the index
            snapshot = self.live()
        rows = sorted(snapshot.row_of[u] for u in uuids if u in snapshot.row_of)
        among = np.array(rows, dtype=np.int64)
        found = self.engine.feasible(snapshot, request, among)
        return {snapshot.providers[int(row)].provider_id for row in found}


def list_candidates(req: Req, engine: CandidateEngine) -> Resp:
    if not req.at_least(10):
        raise not_found("The resource could not be found.")
    check_accept(req)
    query = parse(req)
    for group in query.groups.values():
        check_names(req, group.wanted)
    check_names(req, Wanted(required=[{t} for t in query.root_required | query.root_forbidden]))
    with engine.lock:
        wanted = next(iter(query.groups.values())).wanted
        requests, summarised = search(
            engine.index(),
            query,
            nested_aware=req.at_least(29),
            allows=lambda uuids: engine.feasible(wanted, uuids),
        )
    requested = set().union(*(g.wanted.resources for g in query.groups.values()))
    body = {
        "allocation_requests": [_request(req, r) for r in requests],
        "provider_summaries": {p.uuid: _summary(req, p, requested) for p in summarised},
    }
    return Resp(body=body).modified(req, None)


def _request(req: Req, request: AllocationRequest) -> dict[str, Any]:
    by_provider: dict[str, dict[str, int]] = {}
    for uuid, rc, amount in request.amounts:
        by_provider.setdefault(uuid, {})[rc] = amount
    if not req.at_least(12):
        return {
            "allocations": [
                {"resource_provider": {"uuid": uuid}, "resources": resources}
                for uuid, resources in by_provider.items()
            ]
        }
    body: dict[str, Any] = {
        "allocations": {uuid: {"resources": r} for uuid, r in by_provider.items()}
    }
    if req.at_least(34):
        body["mappings"] = {suffix: sorted(uuids) for suffix, uuids in request.mappings}
    return body


def _summary(req: Req, p: Provider, requested: set[str]) -> dict[str, Any]:
    classes = sorted(rc for rc in p.inventories if req.at_least(27) or rc in requested)
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
        # standard traits first, as Placement lists them (its ids: synced before any custom)
        summary["traits"] = sorted(p.traits, key=lambda t: (t.startswith("CUSTOM_"), t))
    if req.at_least(29):
        summary["parent_provider_uuid"] = p.parent
        summary["root_provider_uuid"] = p.root
    return summary
