"""Bad input: records that are not valid events are refused with a one-line
reason naming the field; valid events about things that do not exist are
decided (recorded outcomes), never exceptions."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from projections.projector import apply
from schemas.codec import EventDecodeError, decode_event, encode_event
from schemas.events import MAX_AMOUNT, Claim
from schemas.outcomes import Code, Kind, Reason
from tests.builders import fresh_state

BASES: dict[str, dict[str, Any]] = {
    "tick": {"type": "tick", "event_id": "e1", "ts_ms": 5, "partition_key": "k"},
    "claim": {
        "type": "claim",
        "event_id": "e1",
        "ts_ms": 5,
        "partition_key": "n1",
        "reservation_id": "r1",
        "consumer_id": "c1",
        "project_id": "proj",
        "items": [{"provider_id": "n1", "resources": {"VCPU": 2}}],
    },
    "inventory_set": {
        "type": "inventory_set",
        "event_id": "e1",
        "ts_ms": 5,
        "partition_key": "n1",
        "provider_id": "n1",
        "inventories": {"VCPU": {"total": 8}},
    },
    "renew": {
        "type": "renew",
        "event_id": "e1",
        "ts_ms": 5,
        "partition_key": "r1",
        "reservation_id": "r1",
        "lease_ms": 1000,
    },
    "provider_registered": {
        "type": "provider_registered",
        "event_id": "e1",
        "ts_ms": 5,
        "partition_key": "n1",
        "provider_id": "n1",
        "name": "node-1",
    },
}

_MISSING = object()


def variant(base: str, path: str = "", value: object = _MISSING) -> bytes:
    """JSON of ``BASES[base]`` with the value at dotted ``path`` replaced by
    ``value`` (removed if ``value`` is not given)."""
    data = copy.deepcopy(BASES[base])
    if path:
        *parents, last = path.split(".")
        node: Any = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is _MISSING:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return json.dumps(data).encode()


@pytest.mark.parametrize("base", sorted(BASES))
def test_the_bases_are_valid(base: str) -> None:
    event = decode_event(variant(base))
    assert event.type == base
    assert decode_event(encode_event(event)) == event


BAD: list[tuple[str, bytes | str, list[str]]] = [
    # malformed JSON and non-objects
    ("truncated json", b'{"type": "tick", "event_id": ', ["Invalid JSON"]),
    ("empty record", b"", ["Invalid JSON"]),
    ("not utf-8", b"\xff\xfe\x00", ["Invalid JSON"]),
    ("trailing garbage", variant("tick") + b"}", ["Invalid JSON"]),
    ("a json array", b"[]", ["event", "object"]),
    ("json null", "null", ["event", "object"]),
    # event types
    ("unknown type", variant("tick", "type", "teleport"), ["teleport", "'type'"]),
    ("type is not a string", variant("tick", "type", 7), ["'type'"]),
    ("no type", variant("tick", "type"), ["'type'"]),
    # wrong types
    ("string for ts_ms", variant("tick", "ts_ms", "5"), ["tick.ts_ms", "integer"]),
    ("float for ts_ms", variant("tick", "ts_ms", 5.5), ["tick.ts_ms", "integer"]),
    ("number for event_id", variant("tick", "event_id", 7), ["tick.event_id", "string"]),
    (
        "string for an amount",
        variant("claim", "items.0.resources.VCPU", "2"),
        ["claim.items.0.resources.VCPU", "integer"],
    ),
    (
        "bool for an amount",
        variant("claim", "items.0.resources.VCPU", True),
        ["claim.items.0.resources.VCPU", "integer"],
    ),
    (
        "string for a total",
        variant("inventory_set", "inventories.VCPU.total", "8"),
        ["inventory_set.inventories.VCPU.total", "integer"],
    ),
    ("bool for lease_ms", variant("renew", "lease_ms", True), ["renew.lease_ms", "integer"]),
    ("object for items", variant("claim", "items", {}), ["claim.items"]),
    # out-of-range amounts
    (
        "zero amount",
        variant("claim", "items.0.resources.VCPU", 0),
        ["claim.items.0.resources.VCPU", "greater than or equal to 1"],
    ),
    (
        "negative amount",
        variant("claim", "items.0.resources.VCPU", -3),
        ["claim.items.0.resources.VCPU", "greater than or equal to 1"],
    ),
    (
        "amount above 2**31-1",
        variant("claim", "items.0.resources.VCPU", MAX_AMOUNT + 1),
        ["claim.items.0.resources.VCPU", f"less than or equal to {MAX_AMOUNT}"],
    ),
    (
        "huge amount",
        variant("claim", "items.0.resources.VCPU", 10**30),
        ["claim.items.0.resources.VCPU"],
    ),
    (
        "total above 2**31-1",
        variant("inventory_set", "inventories.VCPU.total", MAX_AMOUNT + 1),
        ["inventory_set.inventories.VCPU.total", f"less than or equal to {MAX_AMOUNT}"],
    ),
    (
        "negative total",
        variant("inventory_set", "inventories.VCPU.total", -1),
        ["inventory_set.inventories.VCPU.total", "greater than or equal to 0"],
    ),
    (
        "zero allocation_ratio",
        variant("inventory_set", "inventories.VCPU.allocation_ratio", 0),
        ["inventory_set.inventories.VCPU.allocation_ratio", "greater than 0"],
    ),
    (
        "reserved above total",
        variant("inventory_set", "inventories.VCPU.reserved", 9),
        ["inventory_set.inventories.VCPU", "reserved (9) exceeds total (8)"],
    ),
    (
        "zero step_size",
        variant("inventory_set", "inventories.VCPU.step_size", 0),
        ["inventory_set.inventories.VCPU.step_size"],
    ),
    ("zero lease", variant("renew", "lease_ms", 0), ["renew.lease_ms"]),
    ("lease above a week", variant("renew", "lease_ms", 8 * 86_400_000), ["renew.lease_ms"]),
    ("negative ts_ms", variant("tick", "ts_ms", -1), ["tick.ts_ms"]),
    # shapes of names and collections
    ("empty event_id", variant("tick", "event_id", ""), ["tick.event_id"]),
    ("event_id too long", variant("tick", "event_id", "x" * 256), ["tick.event_id"]),
    (
        "lower-case resource class",
        variant("claim", "items.0.resources", {"vcpu": 2}),
        ["claim.items.0.resources.vcpu", "pattern"],
    ),
    (
        "no items",
        variant("claim", "items", []),
        ["claim", "at least one item, identifier or server group"],
    ),
    ("no resources", variant("claim", "items.0.resources", {}), ["claim.items.0.resources"]),
    (
        "one provider named twice",
        variant(
            "claim",
            "items",
            [
                {"provider_id": "n1", "resources": {"VCPU": 1}},
                {"provider_id": "n1", "resources": {"MEMORY_MB": 1}},
            ],
        ),
        ["claim.items", "at most once"],
    ),
    (
        "unknown provider state",
        json.dumps(
            {
                "type": "provider_state_set",
                "event_id": "e1",
                "ts_ms": 1,
                "partition_key": "n1",
                "provider_id": "n1",
                "state": "melting",
            }
        ),
        ["provider_state_set.state"],
    ),
    (
        "partition_key is not the provider",
        variant("provider_registered", "partition_key", "n2"),
        ["provider_registered", "partition_key must equal provider_id"],
    ),
    # missing fields
    ("missing ts_ms", variant("tick", "ts_ms"), ["tick.ts_ms", "Field required"]),
    ("missing event_id", variant("tick", "event_id"), ["tick.event_id", "Field required"]),
    (
        "missing reservation_id",
        variant("claim", "reservation_id"),
        ["claim.reservation_id", "Field required"],
    ),
    (
        "missing items",
        variant("claim", "items"),
        ["claim", "at least one item, identifier or server group"],
    ),
    (
        "missing provider_id of an item",
        variant("claim", "items.0.provider_id"),
        ["claim.items.0.provider_id", "Field required"],
    ),
    (
        "missing lease of a renew",
        variant("renew", "lease_ms"),
        ["renew.lease_ms", "Field required"],
    ),
    (
        "missing total",
        variant("inventory_set", "inventories.VCPU.total"),
        ["inventory_set.inventories.VCPU.total", "Field required"],
    ),
    # extra fields
    ("extra top-level field", variant("tick", "priority", 1), ["tick.priority", "Extra inputs"]),
    (
        "extra field in an item",
        variant("claim", "items.0.weight", 1),
        ["claim.items.0.weight", "Extra inputs"],
    ),
    (
        "extra field in an inventory",
        variant("inventory_set", "inventories.VCPU.colour", "red"),
        ["inventory_set.inventories.VCPU.colour", "Extra inputs"],
    ),
    (
        "a field of another event type",
        variant("tick", "reservation_id", "r1"),
        ["tick.reservation_id", "Extra inputs"],
    ),
    # schema versions
    (
        "schema_version 2 (newer)",
        variant("tick", "schema_version", 2),
        ["tick.schema_version", "version 2", "newest is 1", "upgrade"],
    ),
    (
        "schema_version 2 of a claim",
        variant("claim", "schema_version", 2),
        ["claim.schema_version", "version 2"],
    ),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [pytest.param(raw, expected, id=name) for name, raw, expected in BAD]
)
def test_decode_refuses_with_a_reason_naming_the_field(
    raw: bytes | str, expected: list[str]
) -> None:
    with pytest.raises(EventDecodeError) as caught:
        decode_event(raw)
    error = caught.value
    assert isinstance(error, ValueError)
    assert str(error) == error.reason
    assert "\n" not in error.reason
    for part in expected:
        assert part in error.reason, f"{part!r} not in {error.reason!r}"


def test_every_failing_field_is_named() -> None:
    data = copy.deepcopy(BASES["claim"])
    data["ts_ms"] = "soon"
    data["items"][0]["resources"]["VCPU"] = 0
    data["lease_ms"] = -1
    with pytest.raises(EventDecodeError) as caught:
        decode_event(json.dumps(data))
    reason = caught.value.reason
    for field in ("claim.ts_ms", "claim.items.0.resources.VCPU", "claim.lease_ms"):
        assert field in reason


def test_schema_version_1_is_accepted_explicitly() -> None:
    event = decode_event(variant("tick", "schema_version", 1))
    assert event.schema_version == 1


def test_a_claim_on_an_unknown_provider_is_a_recorded_rejection() -> None:
    event = decode_event(variant("claim"))
    assert isinstance(event, Claim)
    state = fresh_state()
    outcomes = apply(state, 7, event)
    assert len(outcomes) == 1
    (outcome,) = outcomes
    assert (outcome.kind, outcome.subject, outcome.offset, outcome.seq) == (
        Kind.REJECTED,
        "r1",
        7,
        0,
    )
    assert outcome.reasons == (Reason(Code.PROVIDER_NOT_FOUND, "n1"),)
    assert outcome.to_dict()["reasons"] == [{"code": "PROVIDER_NOT_FOUND", "provider_id": "n1"}]
    assert state.reservations == {}
    assert state.finished == {}
    # and the partition carries on: the clock moved, nothing else did
    assert state.clock_ms == 5


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(variant("renew"), id="renew"),
        pytest.param(variant("inventory_set"), id="inventory_set"),
        pytest.param(
            json.dumps({**BASES["tick"], "type": "consume", "reservation_id": "r1"}),
            id="consume",
        ),
        pytest.param(
            json.dumps({**BASES["tick"], "type": "release", "reservation_id": "r1"}),
            id="release",
        ),
        pytest.param(
            json.dumps(
                {
                    **BASES["tick"],
                    "type": "provider_retired",
                    "partition_key": "n1",
                    "provider_id": "n1",
                }
            ),
            id="provider_retired",
        ),
    ],
)
def test_events_about_nothing_known_are_decided_not_raised(raw: bytes | str) -> None:
    (outcome,) = apply(fresh_state(), 0, decode_event(raw))
    assert outcome.kind in (Kind.NOOP, Kind.REJECTED)
    assert [reason.code for reason in outcome.reasons] in (
        [Code.UNKNOWN_RESERVATION],
        [Code.PROVIDER_NOT_FOUND],
    )
