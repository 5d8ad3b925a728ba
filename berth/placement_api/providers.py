"""Resource providers: ``/resource_providers`` and each provider's
inventories, traits, aggregates and usages."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from berth.placement_api import errors, schemas
from berth.placement_api.errors import PlacementError, bad_request, conflict, not_found
from berth.placement_api.filters import matching_providers
from berth.placement_api.http import Req, Resp, check_accept, latest
from berth.placement_api.reads import Provider, provider
from berth.placement_api.service import Refused
from schemas.outcomes import Code

MISSING_PARENT = "parent provider UUID does not exist."
"""The writer's refusal of a parent it does not hold (projections.placement.decide)."""

MAX_INT = 2**31 - 1
INVENTORY_DEFAULTS = {
    "reserved": 0,
    "min_unit": 1,
    "max_unit": MAX_INT,
    "step_size": 1,
    "allocation_ratio": 1.0,
}
INVENTORY_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio")


def url(uuid: str) -> str:
    return f"/resource_providers/{uuid}"


def links(req: Req, uuid: str) -> list[dict[str, str]]:
    base = url(uuid)
    rels = ["inventories", "usages"]
    for minor, rel in ((1, "aggregates"), (6, "traits"), (11, "allocations")):
        if req.at_least(minor):
            rels.append(rel)
    return [{"rel": "self", "href": base}] + [{"rel": r, "href": f"{base}/{r}"} for r in rels]


def serialize(req: Req, p: Provider) -> dict[str, Any]:
    data: dict[str, Any] = {
        "uuid": p.uuid,
        "name": p.name,
        "generation": p.generation,
        "links": links(req, p.uuid),
    }
    if req.at_least(14):
        data["parent_provider_uuid"] = p.parent
        data["root_provider_uuid"] = p.root
    return data


def existing(req: Req, uuid: str, message: str = "{}") -> Provider:
    """The provider, else Placement's 404: with no specific code (only the
    reshaper names one), its object's message wrapped as the route wraps
    it (``message`` with ``{}`` where that message goes)."""
    found = provider(req.service.engine, uuid)
    if found is None:
        inner = f"No resource provider with uuid {uuid} found"
        raise not_found(message.replace("{}", inner, 1), errors.DEFAULT)
    return found


def wrapped(uuid: str, separator: str = ": ") -> str:
    """How Placement's read routes re-raise a missing provider."""
    return f"No resource provider with uuid {uuid} found{separator}{{}}"


def refusal(refused: Refused, **codes: str) -> PlacementError:
    """The writer's refusal as Placement answers it on this route; ``codes``
    overrides the Placement error code by Berth code name."""
    status = {
        Code.PLACEMENT_NOT_FOUND: 404,
        Code.PLACEMENT_CONCURRENT_UPDATE: 409,
        Code.PLACEMENT_DUPLICATE: 409,
        Code.PLACEMENT_IN_USE: 409,
        Code.PLACEMENT_INVALID: 400,
        Code.PLACEMENT_CAPACITY: 409,
    }.get(refused.code, 400)
    default = {
        Code.PLACEMENT_CONCURRENT_UPDATE: errors.CONCURRENT_UPDATE,
        Code.PLACEMENT_DUPLICATE: errors.DUPLICATE_NAME,
    }.get(refused.code, errors.DEFAULT)
    return PlacementError(status, refused.detail, codes.get(refused.code.name, default))


# --- the providers --------------------------------------------------------


def list_providers(req: Req) -> Resp:
    check_accept(req)
    found = matching_providers(req)
    last = latest(*(p.updated_ms for p in found))
    return Resp(body={"resource_providers": [serialize(req, p) for p in found]}).modified(req, last)


def create_provider(req: Req) -> Resp:
    data = req.json(schemas.create_provider(req.version))
    uuid = _normal_uuid(data.get("uuid")) or str(uuidlib.uuid4())
    parent = data.get("parent_provider_uuid")
    if parent is not None and _normal_uuid(parent) == uuid:
        raise bad_request(
            f'Unable to create resource provider "{data["name"]}", {uuid}: Object action '
            "create failed because: parent provider UUID cannot be same as UUID. Please "
            "set parent provider UUID to None if there is no parent."
        )
    try:
        req.service.write(
            {
                "type": "placement_provider_saved",
                "uuid": uuid,
                "name": data["name"],
                "parent": parent,
                "create": True,
            }
        )
    except Refused as refused:
        if refused.code == Code.PLACEMENT_INVALID:
            raise bad_request(
                f'Unable to create resource provider "{data["name"]}", {uuid}: Object action '
                f"create failed because: {refused.detail}"
            ) from None
        raise refusal(refused) from None
    headers = {"location": url(uuid)}
    if not req.at_least(20):
        return Resp(201, None, headers)
    return Resp(200, serialize(req, existing(req, uuid)), headers)


def _normal_uuid(value: str | None) -> str | None:
    return None if value is None else str(uuidlib.UUID(value))


def get_provider(req: Req, uuid: str) -> Resp:
    check_accept(req)
    p = existing(req, uuid)
    return Resp(body=serialize(req, p)).modified(req, p.updated_ms)


def update_provider(req: Req, uuid: str) -> Resp:
    req.require_content()
    p = existing(req, uuid)
    data = req.json(schemas.update_provider(req.version))
    parent = data.get("parent_provider_uuid", p.parent) if req.at_least(14) else p.parent
    if parent != p.parent and not req.at_least(37) and p.parent is not None:
        action = "re-parenting" if parent is not None else "un-parenting"
        raise bad_request(
            f"Unable to save resource provider {uuid}: Object action update failed "
            f"because: {action} a provider is not currently allowed."
        )
    try:
        req.service.write(
            {
                "type": "placement_provider_saved",
                "uuid": uuid,
                "name": data["name"],
                "parent": parent,
                "create": False,
            }
        )
    except Refused as refused:
        if refused.code == Code.PLACEMENT_INVALID:
            # Placement names a missing parent's refusal a create's, even here
            action = "create" if refused.detail == MISSING_PARENT else "update"
            raise bad_request(
                f"Unable to save resource provider {uuid}: Object action {action} failed "
                f"because: {refused.detail}"
            ) from None
        raise refusal(refused) from None
    after = existing(req, uuid)
    return Resp(body=serialize(req, after)).modified(req, after.updated_ms)


def delete_provider(req: Req, uuid: str) -> Resp:
    existing(req, uuid, "{} for delete")
    try:
        req.service.write({"type": "placement_provider_deleted", "uuid": uuid})
    except Refused as refused:
        if "child" in refused.detail:
            raise conflict(
                f"Unable to delete parent resource provider {uuid}: It has child resource "
                "providers.",
                errors.PROVIDER_CANNOT_DELETE_PARENT,
            ) from None
        raise conflict(
            f"Unable to delete resource provider {uuid}: Resource provider has allocations.",
            errors.PROVIDER_IN_USE,
        ) from None
    return Resp(204)


# --- inventories ----------------------------------------------------------


def _inventory(inv: dict[str, Any]) -> dict[str, Any]:
    return {f: inv[f] for f in INVENTORY_FIELDS}


def _complete(data: dict[str, Any]) -> dict[str, Any]:
    return {**INVENTORY_DEFAULTS, **{k: v for k, v in data.items() if k in INVENTORY_FIELDS}}


def _check_capacity(
    req: Req, uuid: str, rc: str, inv: dict[str, Any], verb: str = "update"
) -> None:
    capacity = inv["total"] - inv["reserved"]
    if req.at_least(26):
        if capacity < 0:
            raise bad_request(
                f"Unable to {verb} inventory for resource provider {uuid}: Invalid inventory "
                f"for '{rc}' on resource provider '{uuid}'. The reserved value is greater "
                "than total."
            )
    elif capacity <= 0:
        raise bad_request(
            f"Unable to {verb} inventory for resource provider {uuid}: Invalid inventory for "
            f"'{rc}' on resource provider '{uuid}'. The reserved value is greater than or "
            "equal to total."
        )
    if inv["min_unit"] > inv["max_unit"]:
        raise bad_request(
            f"Unable to {verb} inventory for resource provider {uuid}: Invalid inventory "
            f"for '{rc}': min_unit {inv['min_unit']} exceeds max_unit {inv['max_unit']}."
        )


def _set_inventories(
    req: Req, p: Provider, generation: int, inventories: dict[str, dict[str, Any]]
) -> None:
    if generation < 0:  # never a provider's: Placement's conflict, nothing written
        raise conflict("resource provider generation conflict", errors.CONCURRENT_UPDATE)
    try:
        req.service.write(
            {
                "type": "placement_inventories_set",
                "uuid": p.uuid,
                "generation": generation,
                "inventories": inventories,
            }
        )
    except Refused as refused:
        if refused.code == Code.PLACEMENT_IN_USE:
            raise conflict(f"update conflict: {refused.detail}", errors.INVENTORY_INUSE) from None
        if refused.code == Code.PLACEMENT_CONCURRENT_UPDATE:
            raise conflict(
                "resource provider generation conflict", errors.CONCURRENT_UPDATE
            ) from None
        raise refusal(refused) from None


def get_inventories(req: Req, uuid: str) -> Resp:
    check_accept(req)
    p = existing(req, uuid, wrapped(uuid, " : "))
    body = {
        "resource_provider_generation": p.generation,
        "inventories": {rc: _inventory(inv) for rc, inv in p.inventories.items()},
    }
    return Resp(body=body).modified(req, p.updated_ms)


def set_inventories(req: Req, uuid: str) -> Resp:
    req.require_content()
    p = existing(req, uuid)
    data = req.json(schemas.SET_INVENTORIES)
    inventories = {rc: _complete(inv) for rc, inv in data["inventories"].items()}
    for rc, inv in inventories.items():
        _check_capacity(req, uuid, rc, inv)
    unknown = sorted(rc for rc in inventories if not _class_exists(req, rc))
    if unknown:
        raise bad_request(
            f"Unknown resource class in inventory for resource provider {uuid}: No such "
            f"resource class {unknown[0]}."
        )
    _set_inventories(req, p, data["resource_provider_generation"], inventories)
    return get_inventories(req, uuid)


def _class_exists(req: Req, rc: str) -> bool:
    from berth.placement_api.registry import resource_class_exists

    return resource_class_exists(req, rc)


def delete_inventories(req: Req, uuid: str) -> Resp:
    if not req.at_least(5):
        raise PlacementError(
            405,
            "The method specified is not allowed for this resource.",
            headers={"allow": "GET, POST, PUT"},
        )
    p = existing(req, uuid)
    try:
        _set_inventories(req, p, p.generation, {})
    except PlacementError as error:
        if error.code == errors.INVENTORY_INUSE:
            error.message = error.message.removeprefix("update conflict: ")
        raise
    return Resp(204)


def create_inventory(req: Req, uuid: str) -> Resp:
    req.require_content()
    p = existing(req, uuid)
    data = req.json(schemas.CREATE_INVENTORY)
    rc = data["resource_class"]
    inv = _complete(data)
    _check_capacity(req, uuid, rc, inv, "create")
    if not _class_exists(req, rc):
        raise bad_request(
            f"Unable to create inventory for resource provider {uuid}: No such resource class {rc}."
        )
    if rc in p.inventories:
        raise conflict(
            f"Update conflict: Inventory for '{rc}' on resource provider '{uuid}' already exists.",
            errors.CONCURRENT_UPDATE,
        )
    _set_inventories(req, p, p.generation, {**p.inventories, rc: inv})
    after = existing(req, uuid)
    body = {**_inventory(after.inventories[rc]), "resource_provider_generation": after.generation}
    return Resp(201, body, {"location": req.absolute(f"{url(uuid)}/inventories/{rc}")})


def get_inventory(req: Req, uuid: str, rc: str) -> Resp:
    check_accept(req)
    p = existing(req, uuid, wrapped(uuid, " : "))
    inv = p.inventories.get(rc)
    if inv is None:
        raise not_found(f"No inventory of class {rc} for {uuid}")
    body = {**_inventory(inv), "resource_provider_generation": p.generation}
    return Resp(body=body).modified(req, p.updated_ms)


def update_inventory(req: Req, uuid: str, rc: str) -> Resp:
    req.require_content()
    p = existing(req, uuid)
    data = req.json(schemas.UPDATE_INVENTORY)
    if data["resource_provider_generation"] != p.generation:
        raise conflict("resource provider generation conflict", errors.CONCURRENT_UPDATE)
    inv = _complete(data)
    _check_capacity(req, uuid, rc, inv)
    if rc not in p.inventories:
        raise bad_request(
            f"No inventory record with resource class for resource provider {uuid}: No "
            f"inventory of class {rc} found."
        )
    _set_inventories(req, p, data["resource_provider_generation"], {**p.inventories, rc: inv})
    return get_inventory(req, uuid, rc)


def delete_inventory(req: Req, uuid: str, rc: str) -> Resp:
    p = existing(req, uuid)
    if rc not in p.inventories:
        raise not_found(
            f"No inventory of class {rc} found for delete: No inventory of class {rc} found."
        )
    rest = {k: v for k, v in p.inventories.items() if k != rc}
    try:
        _set_inventories(req, p, p.generation, rest)
    except PlacementError as error:
        if error.code == errors.INVENTORY_INUSE:
            error.message = f"Unable to delete inventory of class {rc}: " + (
                error.message.removeprefix("update conflict: ")
            )
        raise
    return Resp(204)


# --- traits, aggregates, usages ------------------------------------------


def get_provider_traits(req: Req, uuid: str) -> Resp:
    check_accept(req)
    p = existing(req, uuid, wrapped(uuid))
    body = {"traits": sorted(p.traits), "resource_provider_generation": p.generation}
    return Resp(body=body).modified(req, p.updated_ms)


def set_provider_traits(req: Req, uuid: str) -> Resp:
    req.require_content()
    p = existing(req, uuid)
    data = req.json(schemas.SET_PROVIDER_TRAITS)
    if data["resource_provider_generation"] != p.generation:
        raise conflict(
            "Resource provider's generation already changed. Please update the generation "
            "and try again.",
            errors.CONCURRENT_UPDATE,
        )
    from berth.placement_api.registry import trait_exists

    missing = [t for t in data["traits"] if not trait_exists(req, t)]
    if missing:
        raise bad_request(f"No such trait {', '.join(missing)}")
    _write_traits(req, p, data["resource_provider_generation"], data["traits"])
    return get_provider_traits(req, uuid)


def _write_traits(req: Req, p: Provider, generation: int, traits: list[str]) -> None:
    try:
        req.service.write(
            {
                "type": "placement_traits_set",
                "uuid": p.uuid,
                "generation": generation,
                "traits": traits,
            }
        )
    except Refused as refused:
        raise refusal(refused) from None


def delete_provider_traits(req: Req, uuid: str) -> Resp:
    p = existing(req, uuid)
    _write_traits(req, p, p.generation, [])
    return Resp(204)


def get_provider_aggregates(req: Req, uuid: str) -> Resp:
    check_accept(req)
    p = existing(req, uuid)
    body: dict[str, Any] = {"aggregates": list(p.aggregates)}
    if req.at_least(19):
        body["resource_provider_generation"] = p.generation
    return Resp(body=body).modified(req, p.updated_ms)


def _aggregates_conflict() -> PlacementError:
    return conflict(
        "Resource provider's generation already changed. Please update the "
        "generation and try again.",
        errors.CONCURRENT_UPDATE,
    )


def set_provider_aggregates(req: Req, uuid: str) -> Resp:
    req.require_content()
    p = existing(req, uuid)
    if req.at_least(19):
        data = req.json(schemas.SET_AGGREGATES_1_19)
        aggregates, generation = data["aggregates"], data["resource_provider_generation"]
    else:
        aggregates, generation = req.json(schemas.SET_AGGREGATES), None
    if len(set(aggregates)) != len(aggregates):
        raise bad_request("JSON does not validate: has non-unique elements")
    if generation is not None and generation < 0:  # never a provider's: nothing written
        raise _aggregates_conflict()
    try:
        req.service.write(
            {
                "type": "placement_aggregates_set",
                "uuid": uuid,
                "generation": generation,
                "aggregates": aggregates,
            }
        )
    except Refused as refused:
        if refused.code == Code.PLACEMENT_CONCURRENT_UPDATE:
            raise _aggregates_conflict() from None
        raise refusal(refused) from None
    del p
    return get_provider_aggregates(req, uuid)


def get_provider_usages(req: Req, uuid: str) -> Resp:
    check_accept(req)
    p = existing(req, uuid, wrapped(uuid))
    usages = {rc: p.usage.get(rc, 0) for rc in p.inventories}
    body = {"resource_provider_generation": p.generation, "usages": usages}
    return Resp(body=body).modified(req, None)
