"""The HTTP API described as OpenAPI 3.1, served at ``GET /v1/openapi.json``
so that a service in any language can generate its client. The bodies'
schemas are the pydantic models' own, so the description cannot drift from
what the API validates; the paths are written out here, and a test holds
them to the API's routes."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import TypeAdapter

from schemas.events import Event
from schemas.requests import BatchRequest, PlacementRequest

_REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(model=name)}


def _one_or_many(*names: str) -> dict[str, Any]:
    one = {"oneOf": [_ref(n) for n in names]} if len(names) > 1 else _ref(names[0])
    return {"oneOf": [one, {"type": "array", "items": one, "minItems": 1}]}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = _json(_ref("Error"), "why the request was not done; nothing of it was appended")
_WAIT = {
    "name": "wait",
    "in": "query",
    "description": "seconds to wait for the outcome (0 to 300); without it, 202 at once",
    "schema": {"type": "number", "minimum": 0, "maximum": 300},
}


def _flag(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "description": description, "schema": {"enum": ["0", "1"]}}


def _waited_post(
    summary: str, body: dict[str, Any], done: str, waited: str, what: str
) -> dict[str, Any]:
    """A POST that appends its body (202 with ``done``), or with ``?wait=``
    also returns what became of it (200, or 504 with the rest pending: ``waited``)."""
    return {
        "post": {
            "summary": summary,
            "parameters": [_WAIT],
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {
                "202": _json(_ref(done), f"{what}, durably"),
                "200": _json(_ref(waited), f"{what}, and all of it done"),
                "504": _json(_ref(waited), f"{what}; some of it still pending"),
                "400": _ERROR,
                "401": _ERROR,
                "503": _ERROR,
            },
        }
    }


def _paths() -> dict[str, Any]:
    return {
        "/v1/events": _waited_post(
            "Validate and append events; with wait, the writers' decisions",
            _one_or_many("Event"),
            "Appended",
            "Decided",
            "appended",
        ),
        "/v1/requests": _waited_post(
            "Submit placement requests and batches; with wait, their answers",
            _one_or_many("PlacementRequest", "BatchRequest"),
            "Submitted",
            "Answered",
            "submitted",
        ),
        "/v1/history/{id}": {
            "get": {
                "summary": "Every decision about a reservation, consumer, transaction, "
                "provider or pool, with the record each answered",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                    _flag("records", "0: the view alone, without reading the log"),
                ],
                "responses": {
                    "200": _json({"type": "object"}, "what berth history --json prints"),
                    "404": _ERROR,
                    "401": _ERROR,
                    "503": _ERROR,
                },
            }
        },
        "/v1/status": {
            "get": {
                "summary": "Each partition's progress; capacity and usage, reservations",
                "parameters": [_flag("lag", "1: the partitions' progress only, no table scans")],
                "responses": {
                    "200": _json({"type": "object"}, "what berth status --json prints"),
                    "401": _ERROR,
                    "503": _ERROR,
                },
            }
        },
        "/v1/queue": {
            "get": {
                "summary": "Instances and batches waiting, by resource shape",
                "responses": {
                    "200": _json(
                        {"type": "object", "additionalProperties": _ref("Depth")},
                        "shape (CLASS=AMOUNT,...) -> what waits",
                    ),
                    "401": _ERROR,
                    "503": _ERROR,
                },
            }
        },
        "/v1/headroom": {
            "get": {
                "summary": "How many more instances of a shape fit, and where",
                "parameters": [
                    {
                        "name": "resources",
                        "in": "query",
                        "required": True,
                        "description": "the shape, CLASS=AMOUNT,... (e.g. VCPU=4,MEMORY_MB=8192)",
                        "schema": {"type": "string"},
                    },
                    {"name": "availability_zone", "in": "query", "schema": {"type": "string"}},
                    *(
                        {
                            "name": name,
                            "in": "query",
                            "schema": {"type": "array", "items": {"type": "string"}},
                            "explode": True,
                        }
                        for name in ("required_trait", "forbidden_trait")
                    ),
                ],
                "responses": {
                    "200": _json(_ref("Headroom"), "the instances that would fit"),
                    "400": _ERROR,
                    "401": _ERROR,
                    "503": _ERROR,
                },
            }
        },
        "/v1/openapi.json": {
            "get": {
                "summary": "This description",
                "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1")},
            }
        },
    }


def _replies() -> dict[str, Any]:
    positions = {
        "type": "array",
        "items": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
        "description": "(partition, offset) of each, in the order given",
    }
    pending = {"type": "array", "items": {"type": "string"}}
    return {
        "Error": {
            "type": "object",
            "properties": {"error": {"type": "string"}},
            "required": ["error"],
        },
        "Appended": {
            "type": "object",
            "properties": {"appended": positions},
            "required": ["appended"],
        },
        "Decided": {
            "type": "object",
            "properties": {
                "appended": positions,
                "decisions": {
                    "type": "object",
                    "description": "event id -> the outcomes of its record",
                    "additionalProperties": {"type": "array", "items": {"type": "object"}},
                },
                "pending": pending,
            },
            "required": ["appended", "decisions"],
        },
        "Submitted": {
            "type": "object",
            "properties": {"submitted": positions},
            "required": ["submitted"],
        },
        "Answered": {
            "type": "object",
            "properties": {
                "submitted": positions,
                "answers": {
                    "type": "object",
                    "description": "request or batch id -> the scheduler's answer",
                    "additionalProperties": {"type": "object"},
                },
                "pending": pending,
            },
            "required": ["submitted", "answers"],
        },
        "Depth": {
            "type": "object",
            "properties": {"instances": {"type": "integer"}, "batches": {"type": "integer"}},
        },
        "Headroom": {
            "type": "object",
            "properties": {
                "instances": {"type": "integer"},
                "providers": {"type": "object", "additionalProperties": {"type": "integer"}},
            },
        },
    }


@functools.cache
def openapi() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for name, schema in (
        ("Event", TypeAdapter(Event).json_schema(ref_template=_REF)),
        ("PlacementRequest", PlacementRequest.model_json_schema(ref_template=_REF)),
        ("BatchRequest", BatchRequest.model_json_schema(ref_template=_REF)),
    ):
        schemas.update(schema.pop("$defs", {}))
        schemas[name] = schema
    schemas.update(_replies())
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Berth",
            "version": "1",
            "description": "The reservation ledger's HTTP edge: it validates, appends and "
            "reads; the partition writers decide.",
        },
        "paths": _paths(),
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        # the token is optional: an API started without one asks for none
        "security": [{}, {"bearer": []}],
    }
