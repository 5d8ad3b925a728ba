"""The API's OpenAPI description: valid OpenAPI 3.1 (by the OpenAPI
initiative's own validator), every path the API serves and no other, every
reference resolved, and every event type in the event schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

from openapi_spec_validator import validate

from berth.api import ROUTES, Api
from berth.app import App, Settings
from berth.openapi import openapi
from schemas.events import Event
from tests.http_calls import call, serving


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_the_description_is_valid_openapi_3_1() -> None:
    validate(openapi())


def test_it_describes_every_route_the_api_serves_and_no_other() -> None:
    described = {
        (method.upper(), path) for path, item in openapi()["paths"].items() for method in item
    }
    assert described == {(route.method, route.template) for route in ROUTES}


def test_every_reference_resolves() -> None:
    spec = openapi()
    schemas = spec["components"]["schemas"]
    refs = set(_refs(spec))
    assert refs  # the bodies are references to the models' schemas
    for ref in refs:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


def test_the_event_schema_has_every_event_type() -> None:
    union, _ = get_args(Event)
    types = {get_args(model.model_fields["type"].annotation)[0] for model in get_args(union)}
    event = openapi()["components"]["schemas"]["Event"]
    assert set(event["discriminator"]["mapping"]) == types


def test_the_api_serves_it(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app, serving(Api(app)) as url:
        status, spec = call(url, "/v1/openapi.json")
    assert status == 200 and spec == openapi()
