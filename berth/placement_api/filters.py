"""The query parameters that pick providers (``resources``, ``required``,
``member_of``, ``in_tree``, ``name``, ``uuid``), parsed as Placement parses
them per microversion, and the providers of the view they pick."""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field

from berth.placement_api.errors import PlacementError, bad_request
from berth.placement_api.http import Req
from berth.placement_api.reads import Provider, providers

_LIST_PARAMS = (
    (0, "name"),
    (0, "uuid"),
    (3, "member_of"),
    (4, "resources"),
    (14, "in_tree"),
    (18, "required"),
)


@dataclass
class Wanted:
    """What a provider must have and be."""

    resources: dict[str, int] = field(default_factory=dict)
    required: list[set[str]] = field(default_factory=list)
    """Each set: at least one of its traits (1.39's ``in:``); all sets."""
    forbidden: set[str] = field(default_factory=set)
    member_of: list[set[str]] = field(default_factory=list)
    """Each set: member of at least one of its aggregates; all sets."""
    not_member_of: set[str] = field(default_factory=set)


def parse_resources(value: str) -> dict[str, int]:
    form = (
        "Badly formed resources parameter. Expected resources query string parameter "
        "in form: ?resources=VCPU:2,MEMORY_MB:1024."
    )
    if value.strip() == "":
        raise bad_request(f"{form[:-1]}. Got: empty string.")
    found: dict[str, int] = {}
    for part in value.split(","):
        pieces = part.split(":")
        if len(pieces) != 2:
            raise bad_request(f"{form} Got: {part}.")
        name, amount_text = pieces
        try:
            amount = int(amount_text)
        except ValueError:
            raise bad_request(
                f"Requested resource {name} expected positive integer amount. Got: {amount_text}."
            ) from None
        if amount < 1:
            raise bad_request(f"Requested resource {name} requires amount >= 1. Got: {amount}.")
        found[name] = amount
    return found


def parse_required(req: Req, values: list[str], wanted: Wanted) -> None:
    allow_forbidden = req.at_least(22)
    allow_any = req.at_least(39)
    for value in values if allow_any else values[-1:]:
        if value.startswith("in:"):
            if not allow_any:
                raise bad_request(
                    "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,"
                    f"CUSTOM_MAGIC' only supported since microversion 1.39. Got: {value}"
                )
            traits = {t.strip() for t in value[3:].split(",")}
            if not all(traits):
                raise bad_request(
                    "Invalid query string parameters: Expected 'required' parameter value "
                    f"of the form: in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: {value}"
                )
            if any(t.startswith("!") for t in traits):
                raise bad_request(
                    "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,"
                    f"CUSTOM_MAGIC' does not support forbidden traits. Got: {value}"
                )
            wanted.required.append(traits)
            continue
        names = [t.strip() for t in value.split(",")]
        forbidden = {t[1:] for t in names if t.startswith("!")}
        if not all(names) or not all(forbidden):
            form = (
                "HW_CPU_X86_VMX,!CUSTOM_MAGIC" if allow_forbidden else "HW_CPU_X86_VMX,CUSTOM_MAGIC"
            )
            raise bad_request(
                "Invalid query string parameters: Expected 'required' parameter value of the "
                f"form: {form}. Got an empty trait in: {value}"
            )
        if forbidden and not allow_forbidden:
            raise bad_request(
                "Invalid query string parameters: Expected 'required' parameter value of the "
                f"form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: {value}"
            )
        wanted.required.extend({t} for t in names if not t.startswith("!"))
        wanted.forbidden |= forbidden


def parse_member_of(req: Req, values: list[str], wanted: Wanted, suffix: str = "") -> None:
    """``member_of{suffix}`` as Placement reads it: repeated from 1.24, ``!``
    (forbidden) from 1.32, several aggregates only after ``in:``."""
    if len(values) > 1 and not req.at_least(24):
        raise bad_request(f"Multiple member_of{suffix} parameters are not supported")
    for value in values:
        if "," in value and not value.startswith(("in:", "!in:")):
            raise bad_request(
                "Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' "
                f"keyword using the valid microversion. Got: {value}"
            )
        forbidden = value.startswith("!")
        body = value[1:] if forbidden else value
        aggregates = _aggregates(body[3:] if body.startswith("in:") else body)
        if forbidden:
            if not req.at_least(32):
                raise bad_request(
                    f"Forbidden member_of{suffix} parameters are not supported in the "
                    "specified microversion"
                )
            wanted.not_member_of |= aggregates
        else:
            wanted.member_of.append(aggregates)


def _aggregates(text: str) -> set[str]:
    found = set()
    for part in text.split(","):
        try:
            found.add(str(uuidlib.UUID(part)))
        except ValueError:
            raise bad_request(
                "Invalid query string parameters: Expected 'member_of' parameter to contain "
                f"valid UUID(s). Got: {part}"
            ) from None
    return found


def check_names(req: Req, wanted: Wanted) -> None:
    """400 for a resource class or trait that does not exist."""
    from berth.placement_api.registry import resource_class_exists, trait_exists

    for rc in wanted.resources:
        if not resource_class_exists(req, rc):
            raise bad_request(
                f"Invalid resource class in resources parameter: No such resource class {rc}."
            )
    named = (
        set().union(*wanted.required) | wanted.forbidden if wanted.required else wanted.forbidden
    )
    missing = sorted(t for t in named if not trait_exists(req, t))
    if missing:
        raise bad_request(
            f'Invalid trait(s) in "required" parameter: No such trait(s): {", ".join(missing)}.'
        )


def has_traits(p: Provider, wanted: Wanted) -> bool:
    traits = set(p.traits)
    return all(traits & any_of for any_of in wanted.required) and not traits & wanted.forbidden


def in_aggregates(p: Provider, wanted: Wanted) -> bool:
    aggregates = set(p.aggregates)
    return all(aggregates & any_of for any_of in wanted.member_of) and not (
        aggregates & wanted.not_member_of
    )


def has_room(p: Provider, resources: dict[str, int]) -> bool:
    """Whether ``resources`` fit on ``p`` as a new allocation would."""
    for rc, amount in resources.items():
        inv = p.inventories.get(rc)
        if inv is None:
            return False
        capacity = int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])
        if amount < inv["min_unit"] or amount > inv["max_unit"] or amount % inv["step_size"]:
            return False
        if p.usage.get(rc, 0) + amount > capacity:
            return False
    return True


def matching_providers(req: Req) -> list[Provider]:
    """GET /resource_providers: the providers its query picks."""
    types = {
        "uuid": {"type": "string", "format": "uuid"},
        "in_tree": {"type": "string", "format": "uuid"},
        "name": {"type": "string", "maxLength": 200},
    }
    schema = {
        "type": "object",
        "properties": {
            name: types.get(name, {"type": "string"})
            for minor, name in _LIST_PARAMS
            if req.at_least(minor)
        },
        "additionalProperties": False,
    }
    values = req.params(schema)
    wanted = Wanted()
    uuid, in_tree = (
        None if values.get(k) is None else str(uuidlib.UUID(values[k])) for k in ("uuid", "in_tree")
    )
    if "member_of" in req.query:
        parse_member_of(req, req.query["member_of"], wanted)
    if "required" in req.query:
        parse_required(req, req.query["required"], wanted)
    resources = req.one("resources")
    if resources is not None:
        wanted.resources = parse_resources(resources)
    check_names(req, wanted)
    found = providers(req.service.engine)
    name = req.one("name")
    if name is not None:
        found = [p for p in found if p.name == name]
    if uuid is not None:
        found = [p for p in found if p.uuid == uuid]
    if in_tree is not None:
        roots = {p.root for p in found if p.uuid == in_tree}
        if not roots:
            roots = {p.root for p in providers(req.service.engine) if p.uuid == in_tree}
        found = [p for p in found if p.root in roots]
    return [
        p
        for p in found
        if has_traits(p, wanted) and in_aggregates(p, wanted) and has_room(p, wanted.resources)
    ]


def unexpected(message: str) -> PlacementError:
    return bad_request(f"Invalid query string parameters: {message}")
