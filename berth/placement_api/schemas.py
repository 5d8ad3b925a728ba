"""The request bodies Placement accepts, as JSON Schema, by microversion."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from berth.placement_api.versions import Version

MAX_INT = 2**31 - 1
NAME_PATTERN = "^[A-Z0-9_]+$"
CUSTOM_PATTERN = "^CUSTOM_[A-Z0-9_]+$"
UUID = {"type": "string", "format": "uuid"}
GENERATION = {"type": "integer"}


def _count(minimum: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": MAX_INT}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def create_provider(version: Version) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "name": {"type": "string", "maxLength": 200},
        "uuid": UUID,
    }
    if version.at_least(14):
        properties["parent_provider_uuid"] = {"anyOf": [UUID, {"type": "null"}]}
    return _object(properties, ["name"])


def update_provider(version: Version) -> dict[str, Any]:
    schema = create_provider(version)
    del schema["properties"]["uuid"]
    return schema


_INVENTORY = {
    "resource_provider_generation": GENERATION,
    "total": _count(1),
    "reserved": _count(0),
    "min_unit": _count(1),
    "max_unit": _count(1),
    "step_size": _count(1),
    "allocation_ratio": {"type": "number", "maximum": 3.40282e38},
}

UPDATE_INVENTORY = _object(_INVENTORY, ["total", "resource_provider_generation"])
CREATE_INVENTORY = _object(
    {**_INVENTORY, "resource_class": {"type": "string", "pattern": NAME_PATTERN}},
    ["total", "resource_class"],
)
SET_INVENTORIES = _object(
    {
        "resource_provider_generation": GENERATION,
        "inventories": {
            "type": "object",
            "patternProperties": {NAME_PATTERN: _object(_INVENTORY, ["total"])},
            "additionalProperties": False,
        },
    },
    ["resource_provider_generation", "inventories"],
)

SET_PROVIDER_TRAITS = _object(
    {
        "traits": {
            "type": "array",
            "items": {"type": "string", "pattern": NAME_PATTERN},
        },
        "resource_provider_generation": GENERATION,
    },
    ["traits", "resource_provider_generation"],
)

_AGGREGATE_LIST = {"type": "array", "items": UUID, "uniqueItems": True}
SET_AGGREGATES = _AGGREGATE_LIST
SET_AGGREGATES_1_19 = _object(
    {"aggregates": _AGGREGATE_LIST, "resource_provider_generation": GENERATION},
    ["aggregates", "resource_provider_generation"],
)

RESOURCE_CLASS = _object(
    {"name": {"type": "string", "pattern": CUSTOM_PATTERN, "maxLength": 255}}, ["name"]
)

_RESOURCES = {
    "type": "object",
    "minProperties": 1,
    "patternProperties": {NAME_PATTERN: {"type": "integer", "minimum": 1, "maximum": MAX_INT}},
    "additionalProperties": False,
}


def allocations_for_consumer(version: Version) -> dict[str, Any]:
    """PUT /allocations/{consumer}: a list before 1.12, a mapping from it.
    One dict per microversion, made once: not to be changed."""
    return _allocations_for_consumer(version.major, version.minor)


@lru_cache(maxsize=64)
def _allocations_for_consumer(major: int, minor: int) -> dict[str, Any]:
    version = Version(major, minor)
    if not version.at_least(12):
        allocation = _object(
            {
                "resource_provider": _object({"uuid": UUID}, ["uuid"]),
                "resources": _RESOURCES,
            },
            ["resource_provider", "resources"],
        )
        properties: dict[str, Any] = {
            "allocations": {"type": "array", "minItems": 1, "items": allocation}
        }
        required = ["allocations"]
        if version.at_least(8):
            properties["project_id"] = {"type": "string", "minLength": 1, "maxLength": 255}
            properties["user_id"] = {"type": "string", "minLength": 1, "maxLength": 255}
            required += ["project_id", "user_id"]
        return _object(properties, required)
    return _consumer_body(version)


def _consumer_body(version: Version) -> dict[str, Any]:
    allocations = {
        "type": "object",
        "minProperties": 0 if version.at_least(28) else 1,
        "patternProperties": {
            "^[0-9a-fA-F-]{36}$": {
                "type": "object",
                "properties": {"resources": _RESOURCES, "generation": GENERATION},
                "required": ["resources"],
                "additionalProperties": False,
            }
        },
        "additionalProperties": False,
    }
    properties: dict[str, Any] = {
        "allocations": allocations,
        "project_id": {"type": "string", "minLength": 1, "maxLength": 255},
        "user_id": {"type": "string", "minLength": 1, "maxLength": 255},
    }
    required = ["allocations", "project_id", "user_id"]
    if version.at_least(28):
        properties["consumer_generation"] = {"type": ["integer", "null"]}
        required.append("consumer_generation")
    if version.at_least(34):
        properties["mappings"] = {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {"type": "array", "items": UUID, "minItems": 1},
        }
    if version.at_least(38):
        properties["consumer_type"] = {"type": "string", "pattern": "^[A-Z0-9_]+$"}
        required.append("consumer_type")
    return _object(properties, required)


def allocations_post(version: Version) -> dict[str, Any]:
    """POST /allocations: consumers by uuid, each as PUT takes it."""
    body = _consumer_body(version)
    body["properties"]["allocations"]["minProperties"] = 0
    return {
        "type": "object",
        "minProperties": 1,
        "patternProperties": {"^[0-9a-fA-F-]{36}$": body},
        "additionalProperties": False,
    }


def reshaper(version: Version) -> dict[str, Any]:
    """POST /reshaper (1.30): inventories by provider, allocations by consumer."""
    inventories = {
        "type": "object",
        "patternProperties": {
            "^[0-9a-fA-F-]{36}$": _object(
                {
                    "resource_provider_generation": GENERATION,
                    "inventories": {
                        "type": "object",
                        "patternProperties": {NAME_PATTERN: _object(_INVENTORY, ["total"])},
                        "additionalProperties": False,
                    },
                },
                ["resource_provider_generation", "inventories"],
            )
        },
        "additionalProperties": False,
    }
    allocations = allocations_post(version)
    allocations["minProperties"] = 0
    return _object(
        {"inventories": inventories, "allocations": allocations}, ["inventories", "allocations"]
    )


_UUID_KEY = re.compile("[0-9a-fA-F-]{36}")
_NAME = re.compile("[A-Z0-9_]+")


def surely_consumer_allocations(data: Any, version: Version) -> bool:
    """Whether ``data`` is surely valid against :func:`allocations_for_consumer`
    at ``version``, judged by hand as jsonschema would judge it, for the
    common body of 1.28-1.39 (a mapping of providers to resources, a
    consumer generation; no mappings). False says "not surely": jsonschema
    then judges and words it. Written out because the generic judgement
    (:func:`berth.placement_api.http.surely_valid`) was a fifth of the
    event loop's time in beginning a write. It must never say True where
    jsonschema finds an error (tests/test_placement_fast_validation.py)."""
    if not (28 <= version.minor <= _JUDGED_UP_TO) or version.major != 1:
        return False
    if type(data) is not dict or len(data) != (5 if version.minor >= 38 else 4):
        return False  # one of the required keys missing, or another (mappings) present
    project, user = data.get("project_id"), data.get("user_id")
    if type(project) is not str or type(user) is not str:
        return False
    if not (0 < len(project) <= 255 and 0 < len(user) <= 255):
        return False
    generation = data.get("consumer_generation", False)
    if generation is not None and type(generation) is not int:
        return False
    if version.minor >= 38:
        kind = data.get("consumer_type")
        if type(kind) is not str or _NAME.fullmatch(kind) is None:
            return False
    allocations = data.get("allocations")
    if type(allocations) is not dict:
        return False
    return all(
        type(rp) is str and _UUID_KEY.fullmatch(rp) is not None and _surely_allocation(one)
        for rp, one in allocations.items()
    )


_JUDGED_UP_TO = 39
"""The last microversion whose body :func:`surely_consumer_allocations` was
written for: a later one is left to jsonschema until it is judged too."""


def _surely_allocation(one: Any) -> bool:
    """One provider's ``{"resources": {...}, "generation": N}`` (generation optional)."""
    if type(one) is not dict or not 0 < len(one) <= 2:
        return False
    resources = one.get("resources")
    if type(resources) is not dict or not resources:
        return False
    if len(one) == 2 and type(one.get("generation", False)) is not int:
        return False  # the other key is not a generation, or not an integer
    return all(
        type(rc) is str
        and _NAME.fullmatch(rc) is not None
        and type(amount) is int
        and 1 <= amount <= MAX_INT
        for rc, amount in resources.items()
    )
