"""What the dashboard draws, read from the view: the cluster as columns
(one entry per provider, names given once and referred to by number), and a
request's page (its record, the scheduler's answers, an explanation on
today's view, its reservations and their history).

The cluster is read from the API's live snapshot, which re-reads only what
changed in the view, and encoded for the browser that refreshes it every
few seconds: the providers' attributes (ids, states, zones, aggregates,
traits) change rarely and go out only when the browser does not hold them
yet (its ``layout`` is not the snapshot's); the usage of the chosen class
goes out every time, two arrays of integers."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ledger.log import Log
from scheduling.engine import Engine as PlacementEngine
from scheduling.filters.base import Context
from scheduling.model import Provider, Snapshot
from scheduling.weighers.combine import weigh_all
from schemas.ranked import expand
from schemas.requests import BatchRequest, PlacementRequest, request_from_json

RANKED = 10
"""Candidates shown in a request's explanation, best first."""
SCAN_BATCH = 5000


def _dictionary(values: Iterable[str]) -> tuple[list[str], dict[str, int]]:
    names = sorted(set(values))
    return names, {name: n for n, name in enumerate(names)}


@dataclass(frozen=True, slots=True)
class Layout:
    """The providers' attributes, encoded once per provider records tuple."""

    key: str
    columns: dict[str, Any]
    text: str
    """The columns as JSON object members (without the braces), encoded once."""


_LAYOUT_NUMBERS = itertools.count(1)


def layout(snapshot: Snapshot) -> Layout:
    """The snapshot's provider attributes as columns; the same object (and
    key) for every snapshot that shares its provider records."""
    found = _cached(snapshot.providers)
    if found is not None:
        return found
    made = _encode(snapshot.providers)
    _remember(snapshot.providers, made)
    return made


_by_id: dict[int, tuple[Any, Layout]] = {}
"""id(provider records) -> (the records, their layout): one entry, the
latest; a twin of the snapshot shares its records, so this holds while the
providers' attributes do not change."""


def _cached(records: tuple[Provider, ...]) -> Layout | None:
    held = _by_id.get(id(records))
    return held[1] if held is not None and held[0] is records else None


def _remember(records: tuple[Provider, ...], made: Layout) -> None:
    _by_id.clear()
    _by_id[id(records)] = (records, made)


def _encode(providers: Sequence[Provider]) -> Layout:
    states, state_no = _dictionary(p.state for p in providers)
    zones, zone_no = _dictionary(p.availability_zone or "" for p in providers)
    aggregates, aggregate_no = _dictionary(a for p in providers for a in p.aggregates)
    traits, trait_no = _dictionary(t for p in providers for t in p.traits)
    columns = {
        "ids": [p.provider_id for p in providers],
        "states": states,
        "state": [state_no[p.state] for p in providers],
        "zones": zones,
        "zone": [zone_no[p.availability_zone or ""] for p in providers],
        "aggregates": aggregates,
        "aggregate": [sorted(aggregate_no[a] for a in p.aggregates) for p in providers],
        "traits": traits,
        "trait": [sorted(trait_no[t] for t in p.traits) for p in providers],
    }
    text = json.dumps(columns, separators=(",", ":"))[1:-1]
    return Layout(f"L{next(_LAYOUT_NUMBERS)}", columns, text)


def cluster(snapshot: Snapshot, resource_class: str | None, held_layout: str | None) -> str:
    """The cluster as the dashboard's grid reads it, as JSON text: the usage
    and capacity of ``resource_class`` (the first class when None or
    unknown) per provider, and the attributes unless ``held_layout`` is
    the current layout's key."""
    encoded = layout(snapshot)
    classes = list(snapshot.classes)
    chosen = resource_class if resource_class in classes else (classes[0] if classes else None)
    capacity: list[int] = []
    used: list[int] = []
    if chosen is not None:
        column = classes.index(chosen)
        capacity = snapshot.capacity_table()[:, column].tolist()
        used = snapshot.used[:, column].tolist()
    reply: dict[str, Any] = {
        "layout": encoded.key,
        "classes": classes,
        "resource_class": chosen,
        "providers": snapshot.size,
        "capacity": capacity,
        "used": used,
    }
    usage = json.dumps(reply, separators=(",", ":"))
    if held_layout == encoded.key:
        return usage
    return usage[:-1] + "," + encoded.text + "}"


def find_request(log: Log, topic: str, partition: int, request_id: str) -> Any | None:
    """The JSON of the request ``request_id`` as submitted (the last record
    under its key in its partition), or None."""
    key = request_id.encode()
    found = None
    offset = 0
    while records := log.read(topic, partition, offset, SCAN_BATCH):
        offset = records[-1].offset + 1
        for record in records:
            if record.key == key:
                found = record.value
    return None if found is None else json.loads(found)


def find_answers(log: Log, topic: str, partition: int, request_id: str) -> list[dict[str, Any]]:
    """Every answer the scheduler gave ``request_id`` (a queued batch has
    two), in order."""
    key = request_id.encode()
    answers = []
    offset = 0
    while records := log.read(topic, partition, offset, SCAN_BATCH):
        offset = records[-1].offset + 1
        for record in records:
            if record.key == key:
                answer = json.loads(record.value)
                answer.pop("source", None)
                if "ranked" in answer:  # readable for the page
                    answer["candidates"] = expand(answer.pop("ranked"))
                answers.append(answer)
    return answers


def as_request(data: Any) -> PlacementRequest | BatchRequest | None:
    try:
        return request_from_json(json.dumps(data))
    except ValueError:
        return None


def explanation(engine: PlacementEngine, snapshot: Snapshot, request: Any) -> dict[str, Any]:
    """Why the providers would be chosen or not for one instance of
    ``request`` on today's view: the filters' counts, each eliminated
    provider's first reason, and the best :data:`RANKED` candidates by the
    weighers' combined score."""
    placement = engine.place(snapshot, request, explain=True)
    trace = placement.trace
    rows = engine.feasible(snapshot, request)
    ranked: list[dict[str, Any]] = []
    if len(rows):
        scores = weigh_all(engine.weighers, Context(snapshot, request, snapshot.used), rows)
        order = np.argsort(-scores, kind="stable")[:RANKED]
        ranked = [
            {"provider_id": snapshot.providers[int(rows[i])].provider_id, "score": float(scores[i])}
            for i in order
        ]
    return {
        "placed": placement.placed,
        "providers": list(placement.providers),
        "reason": placement.reason,
        "considered": trace.considered if trace else snapshot.size,
        "counts": dict(trace.counts) if trace else {},
        "eliminations": [
            {"provider_id": e.provider_id, "filter": e.filter, "reason": e.reason}
            for e in (trace.eliminations[:200] if trace else ())
        ],
        "eliminated": len(trace.eliminations) if trace else 0,
        "ranking": ranked,
    }
