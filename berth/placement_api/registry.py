"""Resource classes (from 1.2) and traits (from 1.6): the standard ones of
``os-resource-classes`` and ``os-traits``, and custom ones made and
deleted through the writer."""

from __future__ import annotations

import re

import jsonschema

from berth.placement_api import schemas
from berth.placement_api.errors import PlacementError, bad_request, conflict, not_found
from berth.placement_api.http import Req, Resp, check_accept, latest
from berth.placement_api.reads import custom_names, providers
from berth.placement_api.service import Refused
from projections.placement.model import STANDARD_RESOURCE_CLASSES, STANDARD_TRAITS
from schemas.outcomes import Code

_CUSTOM = re.compile(r"^CUSTOM_[A-Z0-9_]+$")


def resource_class_exists(req: Req, name: str) -> bool:
    return name in STANDARD_RESOURCE_CLASSES or name in custom_names(
        req.service.engine, "resource_class"
    )


def trait_exists(req: Req, name: str) -> bool:
    return name in STANDARD_TRAITS or name in custom_names(req.service.engine, "trait")


def _write(req: Req, kind: str, name: str, defined: bool) -> None:
    req.service.write(
        {"type": "placement_name_defined", "kind": kind, "name": name, "defined": defined}
    )


def _needs(req: Req, minor: int) -> None:
    if not req.at_least(minor):
        raise not_found("The resource could not be found.")


# --- resource classes -----------------------------------------------------


def _rc(name: str) -> dict[str, object]:
    return {"name": name, "links": [{"rel": "self", "href": f"/resource_classes/{name}"}]}


def list_resource_classes(req: Req) -> Resp:
    _needs(req, 2)
    check_accept(req)
    customs = custom_names(req.service.engine, "resource_class")
    names = sorted(STANDARD_RESOURCE_CLASSES) + sorted(customs)
    return Resp(body={"resource_classes": [_rc(n) for n in names]}).modified(
        req, latest(*customs.values())
    )


def get_resource_class(req: Req, name: str) -> Resp:
    _needs(req, 2)
    check_accept(req)
    customs = custom_names(req.service.engine, "resource_class")
    if name not in STANDARD_RESOURCE_CLASSES and name not in customs:
        raise not_found(f"No such resource class {name}.")
    return Resp(body=_rc(name)).modified(req, customs.get(name))


def create_resource_class(req: Req) -> Resp:
    _needs(req, 2)
    name = req.json(schemas.RESOURCE_CLASS)["name"]
    try:
        _write(req, "resource_class", name, True)
    except Refused:
        raise conflict(f"Conflicting resource class already exists: {name}") from None
    return Resp(201, None, {"location": f"/resource_classes/{name}"})


def update_resource_class(req: Req, name: str) -> Resp:
    _needs(req, 2)
    if not req.at_least(7):
        return _rename_resource_class(req, name)
    if name in STANDARD_RESOURCE_CLASSES or name in custom_names(
        req.service.engine, "resource_class"
    ):
        _valid_custom(name)
        return Resp(204, None, {"location": f"/resource_classes/{name}"})
    _valid_custom(name)
    try:
        _write(req, "resource_class", name, True)
    except Refused:
        return Resp(204)
    return Resp(201, None, {"location": f"/resource_classes/{name}"})


def _rename_resource_class(req: Req, name: str) -> Resp:
    """Before 1.7 a PUT renames a custom class (its inventories and
    allocations follow)."""
    new = req.json(schemas.RESOURCE_CLASS)["name"]
    try:
        req.service.write(
            {
                "type": "placement_name_defined",
                "kind": "resource_class",
                "name": name,
                "renamed_to": new,
            }
        )
    except Refused as refused:
        status = {Code.PLACEMENT_NOT_FOUND: 404, Code.PLACEMENT_INVALID: 400}.get(refused.code, 409)
        raise PlacementError(status, refused.detail) from None
    return Resp(body=_rc(new))


def _valid_custom(name: str) -> None:
    try:
        jsonschema.validate(name, schemas.RESOURCE_CLASS["properties"]["name"])
    except jsonschema.ValidationError as error:
        raise bad_request(f"JSON does not validate: {error}") from None


def delete_resource_class(req: Req, name: str) -> Resp:
    _needs(req, 2)
    if name in STANDARD_RESOURCE_CLASSES:
        raise bad_request(
            f"Error in delete resource class: Cannot delete standard resource class {name}."
        )
    try:
        _write(req, "resource_class", name, False)
    except Refused as refused:
        if refused.code == Code.PLACEMENT_NOT_FOUND:
            raise not_found(refused.detail) from None
        raise conflict(f"Error in delete resource class: {refused.detail}") from None
    return Resp(204)


# --- traits ----------------------------------------------------------------


def list_traits(req: Req) -> Resp:
    _needs(req, 6)
    check_accept(req)
    unknown = sorted(set(req.query) - {"name", "associated"})
    if unknown:
        raise bad_request(
            "Invalid query string parameters: Additional properties are not allowed "
            f"({', '.join(repr(u) for u in unknown)} was unexpected)"
        )
    customs = custom_names(req.service.engine, "trait")
    names = set(STANDARD_TRAITS) | set(customs)
    name = req.one("name")
    if name is not None:
        if name.startswith("startswith:"):
            prefix = name[len("startswith:") :]
            names = {n for n in names if n.startswith(prefix)}
        elif name.startswith("in:"):
            names &= {n.strip() for n in name[3:].split(",")}
        else:
            raise bad_request(
                "Badly formatted name parameter. Expected name query string parameter in "
                f'form: ?name=[in|startswith]:[name1,name2|prefix]. Got: "{name}"'
            )
    associated = req.one("associated")
    if associated is not None:
        if associated not in ("true", "false"):
            raise bad_request('The query parameter "associated" only accepts "true" or "false"')
        used = set().union(*(set(p.traits) for p in providers(req.service.engine)))
        names = names & used if associated == "true" else names - used
    return Resp(body={"traits": sorted(names)}).modified(req, latest(*customs.values()))


def get_trait(req: Req, name: str) -> Resp:
    _needs(req, 6)
    customs = custom_names(req.service.engine, "trait")
    if name not in STANDARD_TRAITS and name not in customs:
        raise not_found(f"No such trait(s): {name}.")
    return Resp(204).modified(req, customs.get(name))


def put_trait(req: Req, name: str) -> Resp:
    _needs(req, 6)
    if not _CUSTOM.match(name) or len(name) > 255:
        raise bad_request(
            "The trait is invalid. A valid trait must be no longer than 255 characters, "
            'start with the prefix "CUSTOM_" and use following characters: "A"-"Z", '
            '"0"-"9" and "_"'
        )
    if trait_exists(req, name):
        return Resp(204, None, {"location": f"/traits/{name}"}).modified(req, None)
    try:
        _write(req, "trait", name, True)
    except Refused:
        return Resp(204, None, {"location": f"/traits/{name}"}).modified(req, None)
    return Resp(201, None, {"location": f"/traits/{name}"}).modified(req, None)


def delete_trait(req: Req, name: str) -> Resp:
    _needs(req, 6)
    try:
        _write(req, "trait", name, False)
    except Refused as refused:
        status = {
            Code.PLACEMENT_NOT_FOUND: 404,
            Code.PLACEMENT_INVALID: 400,
        }.get(refused.code, 409)
        raise PlacementError(status, refused.detail) from None
    return Resp(204)
