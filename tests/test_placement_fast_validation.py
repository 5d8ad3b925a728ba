"""The Placement API's quick judgement of request bodies
(berth.placement_api.http.surely_valid, and the one written by hand for PUT
/allocations, schemas.surely_consumer_allocations): whatever it calls valid,
jsonschema finds valid too, for every body schema of every microversion, so
skipping jsonschema for those changes no answer; and the common writes take
it."""

from __future__ import annotations

import random
import uuid
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.placement_api import schemas
from berth.placement_api.http import FORMATS, surely_valid, validate
from berth.placement_api.versions import MAX_VERSION, Version

_VERSIONS = [Version(1, minor) for minor in range(MAX_VERSION[1] + 1)]
_SCHEMAS: list[dict[str, Any]] = [
    *(
        build(version)
        for build in (
            schemas.create_provider,
            schemas.update_provider,
            schemas.allocations_for_consumer,
            schemas.allocations_post,
            schemas.reshaper,
        )
        for version in _VERSIONS
    ),
    schemas.UPDATE_INVENTORY,
    schemas.CREATE_INVENTORY,
    schemas.SET_INVENTORIES,
    schemas.SET_PROVIDER_TRAITS,
    schemas.SET_AGGREGATES,
    schemas.RESOURCE_CLASS,
]
_RP = "4e8e5957-649f-477b-9e5b-f1f75b21c03c"


def _names(schema: Any) -> set[str]:
    """Every property name and pattern a schema mentions."""
    if isinstance(schema, dict):
        found = set(schema.get("properties", {})) | set(schema.get("required", []))
        for value in schema.values():
            found |= _names(value)
        return found
    if isinstance(schema, list):
        return set().union(*(_names(value) for value in schema)) if schema else set()
    return set()


_KEYS = [
    *sorted(set().union(*(_names(s) for s in _SCHEMAS))),
    _RP,
    _RP.upper(),
    _RP.replace("-", ""),
    f"{_RP}\n",
    "VCPU",
    "vcpu",
    "CUSTOM_X",
    "",
]
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0, 1, 2**31 - 1, 2**31, 1.0, 1.5, -1.0]),
    st.sampled_from([_RP, "not-a-uuid", "", "x" * 256, "INSTANCE", "instance", "VCPU"]),
    st.text(max_size=4),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(_KEYS), inner, max_size=5)
    ),
    max_leaves=20,
)


def _errors(instance: Any, schema: dict[str, Any]) -> list[str]:
    validator = jsonschema.validators.validator_for(schema)(schema, format_checker=FORMATS)
    return [error.message for error in validator.iter_errors(instance)]


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(_SCHEMAS), _JSON)
def test_what_it_calls_valid_jsonschema_does_too(schema: dict[str, Any], instance: Any) -> None:
    if surely_valid(instance, schema):
        assert _errors(instance, schema) == []


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(_VERSIONS), _JSON)
def test_what_the_put_judgement_calls_valid_jsonschema_does_too(
    version: Version, instance: Any
) -> None:
    if schemas.surely_consumer_allocations(instance, version):
        assert _errors(instance, schemas.allocations_for_consumer(version)) == []


_ODD: list[Any] = [None, True, 0, -1, 1.0, 2**31, "", "x" * 256, "vcpu", f"{_RP}\n", [], {}]


def _mutated(body: Any, rng: random.Random) -> Any:
    """``body`` with one value somewhere in it replaced, removed or added to."""
    if not isinstance(body, dict) or not body or rng.random() < 0.3:
        return rng.choice(_ODD)
    key = rng.choice(sorted(body))
    changed = dict(body)
    roll = rng.random()
    if roll < 0.2:
        del changed[key]
    elif roll < 0.3:
        changed[rng.choice(["extra", _RP.upper(), "VCPU", "generation"])] = rng.choice(_ODD)
    else:
        changed[key] = _mutated(body[key], rng)
    return changed


def test_of_writes_near_valid_ones_it_calls_valid_only_the_valid() -> None:
    rng = random.Random(32)
    called_valid = by_hand = 0
    for _ in range(3000):
        version = rng.choice(_VERSIONS[12:])
        posted = rng.random() < 0.3
        body: Any = _race_body(version)
        for _ in range(rng.randrange(3)):
            body = _mutated(body, rng)
        schema = (schemas.allocations_post if posted else schemas.allocations_for_consumer)(version)
        instance = {_RP: body} if posted else body
        if surely_valid(instance, schema):
            called_valid += 1
            assert _errors(instance, schema) == [], instance
        if not posted and schemas.surely_consumer_allocations(body, version):
            by_hand += 1
            assert _errors(body, schema) == [], body
    assert called_valid > 300  # not a test of the invalid ones alone
    assert by_hand > 150


def _race_body(version: Version) -> dict[str, Any]:
    body: dict[str, Any] = {
        "allocations": {_RP: {"resources": {"VCPU": 1, "MEMORY_MB": 512}}},
        "project_id": "p",
        "user_id": "u",
    }
    if version.at_least(28):
        body["consumer_generation"] = None
    if version.at_least(38):
        body["consumer_type"] = "INSTANCE"
    return body


def test_a_write_of_allocations_is_judged_without_jsonschema() -> None:
    for version in _VERSIONS[13:]:
        body = _race_body(version)
        assert surely_valid(body, schemas.allocations_for_consumer(version))
        assert surely_valid({str(uuid.uuid4()): body}, schemas.allocations_post(version))
        by_hand = schemas.surely_consumer_allocations(body, version)
        assert by_hand == version.at_least(28)
        body["allocations"][_RP.upper()] = {"resources": {"DISK_GB": 1}, "generation": 3}
        assert schemas.surely_consumer_allocations(body, version) == by_hand


_NOT_BY_HAND: list[tuple[str, Any]] = [
    # (what changed, the value at that place)
    ("no user", ("user_id", None)),
    ("an empty project", ("project_id", "")),
    ("a project too long", ("project_id", "x" * 256)),
    ("a generation as text", ("consumer_generation", "1")),
    ("a generation true", ("consumer_generation", True)),
    ("a type in lower case", ("consumer_type", "instance")),
    ("a type with a newline", ("consumer_type", "INSTANCE\n")),
    ("mappings", ("mappings", {"x": [_RP]})),
    ("an extra key", ("extra", 1)),
    ("a provider key too short", ("allocations", {_RP[:-1]: {"resources": {"VCPU": 1}}})),
    ("a provider key with a newline", ("allocations", {f"{_RP}\n": {"resources": {"VCPU": 1}}})),
    ("no resources", ("allocations", {_RP: {"resources": {}}})),
    ("a zero amount", ("allocations", {_RP: {"resources": {"VCPU": 0}}})),
    ("an amount too big", ("allocations", {_RP: {"resources": {"VCPU": 2**31}}})),
    ("an amount 1.0", ("allocations", {_RP: {"resources": {"VCPU": 1.0}}})),
    ("a class in lower case", ("allocations", {_RP: {"resources": {"vcpu": 1}}})),
    (
        "a provider generation as text",
        ("allocations", {_RP: {"resources": {"VCPU": 1}, "generation": "1"}}),
    ),
    ("another key", ("allocations", {_RP: {"resources": {"VCPU": 1}, "other": 1}})),
]


def test_the_put_judgement_leaves_to_jsonschema_what_it_was_not_written_for() -> None:
    version = Version(1, 38)
    assert schemas.surely_consumer_allocations(_race_body(version), version)
    for what, (key, value) in _NOT_BY_HAND:
        body = _race_body(version)
        if value is None:
            del body[key]
        else:
            body[key] = value
        assert not schemas.surely_consumer_allocations(body, version), what
    # a version past the one it was written for
    assert not schemas.surely_consumer_allocations(_race_body(version), Version(1, 40))
    assert not schemas.surely_consumer_allocations([], version)


def test_what_it_cannot_judge_jsonschema_words() -> None:
    schema = schemas.allocations_for_consumer(Version(1, 38))
    body = _race_body(Version(1, 38))
    body["allocations"][_RP]["resources"]["VCPU"] = 1.0  # an integer, to jsonschema
    assert not surely_valid(body, schema)
    validate(body, schema)  # no error
    body["consumer_type"] = "instance"
    assert not surely_valid(body, schema)
    try:
        validate(body, schema)
    except jsonschema.ValidationError as error:
        assert "does not match" in error.message
    else:
        raise AssertionError("a consumer type in lower case passed")
