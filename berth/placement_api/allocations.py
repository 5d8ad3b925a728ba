"""Allocations (a consumer's, replaced as a whole; several consumers' at
once from 1.13) and usages (a provider's; a project's from 1.9)."""

from __future__ import annotations

import uuid as uuidlib
from functools import partial
from typing import Any

from berth.placement_api import errors, schemas
from berth.placement_api.errors import bad_request, conflict, not_found
from berth.placement_api.http import Req, Resp, Write, check_accept, latest
from berth.placement_api.providers import INVENTORY_DEFAULTS, existing
from berth.placement_api.reads import Consumer, consumer, consumers, providers
from berth.placement_api.service import Refused
from schemas.outcomes import Code, Outcome

INCOMPLETE_CONSUMER = "00000000-0000-0000-0000-000000000000"
"""The project and user of a consumer written before 1.8 named them (upstream's default)."""


def _consumer_uuid(raw: str) -> str:
    try:
        return str(uuidlib.UUID(raw))
    except ValueError:
        raise bad_request(f"Malformed consumer_uuid: {raw}") from None


def get_consumer_allocations(req: Req, consumer_uuid: str) -> Resp:
    check_accept(req)
    found = consumer(req.service.engine, consumer_uuid)
    body: dict[str, Any] = {"allocations": {}}
    if found is None:
        return Resp(body=body).modified(req, None)
    generations = {p.uuid: p.generation for p in providers(req.service.engine)}
    body["allocations"] = {
        uuid: {"generation": generations.get(uuid), "resources": dict(amounts)}
        for uuid, amounts in found.allocations.items()
    }
    if req.at_least(12):
        body["project_id"] = found.project_id
        body["user_id"] = found.user_id
    if req.at_least(28):
        body["consumer_generation"] = found.generation
    if req.at_least(38):
        body["consumer_type"] = found.consumer_type or "unknown"
    return Resp(body=body).modified(req, found.updated_ms)


def _spec(req: Req, uuid: str, data: dict[str, Any], allocations: dict[str, Any]) -> dict[str, Any]:
    project = data.get("project_id", INCOMPLETE_CONSUMER)
    user = data.get("user_id", INCOMPLETE_CONSUMER)
    spec: dict[str, Any] = {
        "consumer": uuid,
        "project_id": project,
        "user_id": user,
        "allocations": allocations,
        "check_generation": req.at_least(28),
        "generation": data.get("consumer_generation"),
    }
    if req.at_least(38):
        spec["consumer_type"] = data["consumer_type"]
    return spec


def _check_providers(req: Req, allocations: dict[str, Any], known: set[str] | None = None) -> None:
    """400 unless every provider ``allocations`` names exists (of those
    ``known`` to, when the caller has read them already)."""
    if known is None:
        known = req.service.existing(sorted(allocations))
    for uuid in allocations:
        if uuid not in known:
            raise bad_request(f"Allocation for resource provider '{uuid}' that does not exist.")


def _write(
    specs: list[dict[str, Any]], consumer_uuid: str | None, emptied_touch: bool = True
) -> Write:
    """The write of ``specs``' allocations, answered 204 unless refused."""
    fields = {
        "type": "placement_allocations_set",
        "consumers": specs,
        "emptied_touch": emptied_touch,
    }
    return Write(fields, partial(_allocations_written, consumer_uuid))


def _allocations_written(consumer_uuid: str | None, decided: Outcome | Refused) -> Resp:
    """204, or the refusal worded as Placement words it."""
    if isinstance(decided, Refused):
        refused = decided
        if refused.code == Code.PLACEMENT_CONCURRENT_UPDATE:
            raise conflict(refused.detail, errors.CONCURRENT_UPDATE) from None
        if refused.code in (Code.PLACEMENT_NOT_FOUND, Code.PLACEMENT_INVALID):
            if consumer_uuid is None:
                raise bad_request(f"Unable to allocate inventory {refused.detail}") from None
            raise bad_request(
                f"Unable to allocate inventory for consumer {consumer_uuid}: {refused.detail}"
            ) from None
        raise conflict(f"Unable to allocate inventory: {refused.detail}") from None
    return Resp(204)


def put_consumer_allocations(req: Req, consumer_uuid: str) -> Write:
    uuid = _consumer_uuid(consumer_uuid)
    data = req.json(
        schemas.allocations_for_consumer(req.version), schemas.surely_consumer_allocations
    )
    listed = data["allocations"]
    if isinstance(listed, list):
        allocations = {a["resource_provider"]["uuid"]: a["resources"] for a in listed}
    else:
        allocations = {rp: a["resources"] for rp, a in listed.items()}
    spec = _spec(req, uuid, data, allocations)
    known = req.service.existing(sorted(allocations))
    if set(allocations) - known:
        _check_consumer_generation(req, spec)
    _check_providers(req, allocations, known)
    return _write([spec], uuid)


def _check_consumer_generation(req: Req, spec: dict[str, Any]) -> None:
    """Placement checks the consumer's generation before the providers: when
    both are wrong its answer is the 409. Judged on the view, as nothing is
    written either way; the writer checks it again on every write."""
    if not spec["check_generation"]:
        return
    held = consumer(req.service.engine, spec["consumer"])
    expected = None if held is None else held.generation
    if expected != spec["generation"]:
        shown = "null" if expected is None else expected
        raise conflict(
            f"consumer generation conflict - expected {shown} but got {spec['generation']}",
            errors.CONCURRENT_UPDATE,
        )


def post_allocations(req: Req) -> Write:
    if not req.at_least(13):
        raise not_found("The resource could not be found.")
    data = req.json(schemas.allocations_post(req.version))
    specs = []
    for raw_uuid, body in data.items():
        allocations = {rp: a["resources"] for rp, a in body["allocations"].items()}
        specs.append(_spec(req, _consumer_uuid(raw_uuid), body, allocations))
    named = sorted({rp for spec in specs for rp in spec["allocations"]})
    if set(named) - req.service.existing(named):
        # as for one consumer: Placement checks every consumer before the providers
        for spec in specs:
            _check_consumer_generation(req, spec)
        for spec in specs:
            _check_providers(req, spec["allocations"])
    return _write(specs, None)


def reshape(req: Req) -> Resp:
    """POST /reshaper (1.30): inventories and allocations moved in one decision."""
    if not req.at_least(30):
        raise not_found("The resource could not be found.")
    data = req.json(schemas.reshaper(req.version))
    known = {p.uuid: p.generation for p in providers(req.service.engine)}
    # Placement's early checks, in its order, judged on the view (nothing is
    # written when they refuse; the writer checks them all again): each
    # provider of the inventories and its generation, then the consumers,
    # then the providers of the allocations
    for uuid, given in data["inventories"].items():
        if uuid not in known:
            raise bad_request(
                f"Resource provider {uuid} in inventories not found: No resource provider "
                f"with uuid {uuid} found",
                errors.RESOURCE_PROVIDER_NOT_FOUND,
            )
        if given["resource_provider_generation"] != known[uuid]:
            raise conflict(
                f"resource provider generation conflict for provider {uuid}: actual: "
                f"{known[uuid]}, given: {given['resource_provider_generation']}",
                errors.CONCURRENT_UPDATE,
            )
    specs = []
    for raw_uuid, body in data["allocations"].items():
        allocations = {rp: a["resources"] for rp, a in body["allocations"].items()}
        specs.append(_spec(req, _consumer_uuid(raw_uuid), body, allocations))
    if any(rp not in known for spec in specs for rp in spec["allocations"]):
        for spec in specs:
            _check_consumer_generation(req, spec)
        for spec in specs:
            _check_providers(req, spec["allocations"])
    inventories = {
        uuid: {
            "generation": given["resource_provider_generation"],
            "inventories": {
                rc: {**INVENTORY_DEFAULTS, **inv} for rc, inv in given["inventories"].items()
            },
        }
        for uuid, given in data["inventories"].items()
    }
    try:
        req.service.write(
            {"type": "placement_reshaped", "inventories": inventories, "consumers": specs}
        )
    except Refused as refused:
        if refused.code == Code.PLACEMENT_CONCURRENT_UPDATE:
            raise conflict(refused.detail, errors.CONCURRENT_UPDATE) from None
        if refused.code == Code.PLACEMENT_IN_USE:
            raise conflict(f"update conflict: {refused.detail}", errors.INVENTORY_INUSE) from None
        if refused.code in (Code.PLACEMENT_NOT_FOUND, Code.PLACEMENT_INVALID):
            raise bad_request(f"malformed reshaper data: {refused.detail}") from None
        raise conflict(f"Unable to allocate inventory: {refused.detail}") from None
    return Resp(204)


def delete_consumer_allocations(req: Req, consumer_uuid: str) -> Write:
    found = consumer(req.service.engine, consumer_uuid)
    if found is None:
        raise not_found(f"No allocations for consumer '{consumer_uuid}'")
    spec = {
        "consumer": consumer_uuid,
        "project_id": found.project_id,
        "user_id": found.user_id,
        "allocations": {},
        "check_generation": False,
    }
    return _write([spec], consumer_uuid, emptied_touch=False)


def get_provider_allocations(req: Req, uuid: str) -> Resp:
    check_accept(req)
    p = existing(req, uuid, f"Resource provider '{uuid}' not found: {{}}")
    shown: dict[str, Any] = {}
    for c in consumers(req.service.engine):
        if uuid in c.allocations:
            shown[c.uuid] = {"resources": dict(c.allocations[uuid])}
            if req.at_least(28):
                shown[c.uuid]["consumer_generation"] = c.generation
    body = {"allocations": shown, "resource_provider_generation": p.generation}
    return Resp(body=body).modified(req, p.updated_ms)


def get_usages(req: Req) -> Resp:
    """GET /usages?project_id=...[&user_id=...][&consumer_type=...] (from 1.9)."""
    if not req.at_least(9):
        raise not_found("The resource could not be found.")
    check_accept(req)
    ident = {"type": "string", "minLength": 1, "maxLength": 255}
    properties = {"project_id": ident, "user_id": ident}
    if req.at_least(38):
        properties["consumer_type"] = {"type": "string"}
    req.params(
        {
            "type": "object",
            "properties": properties,
            "required": ["project_id"],
            "additionalProperties": False,
        }
    )
    project, user = req.one("project_id"), req.one("user_id")
    kind = req.one("consumer_type")
    chosen = [
        c
        for c in consumers(req.service.engine)
        if c.project_id == project and (user is None or c.user_id == user)
    ]
    if not req.at_least(38):
        return Resp(body={"usages": _summed(chosen)}).modified(req, None)
    if kind == "unknown":
        chosen = [c for c in chosen if c.consumer_type is None]
    elif kind is not None and kind != "all":
        chosen = [c for c in chosen if c.consumer_type == kind]
    grouped: dict[str, list[Consumer]] = {}
    for c in chosen:
        key = "all" if kind == "all" else (c.consumer_type or "unknown")
        grouped.setdefault(key, []).append(c)
    usages = {
        key: {"consumer_count": len(group), **_summed(group)} for key, group in grouped.items()
    }
    return Resp(body={"usages": usages}).modified(req, latest(*(c.updated_ms for c in chosen)))


def _summed(chosen: list[Consumer]) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in chosen:
        for amounts in c.allocations.values():
            for rc, amount in amounts.items():
                total[rc] = total.get(rc, 0) + amount
    return total
