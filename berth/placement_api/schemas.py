"""The request bodies Placement accepts, as JSON Schema, by microversion."""

from __future__ import annotations

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
    """PUT /allocations/{consumer}: a list before 1.12, a mapping from it."""
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
