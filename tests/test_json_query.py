"""Conformance of scheduling.json_query with Nova's JsonFilter."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.json_query import InvalidQuery, evaluate

HOST: dict[str, Any] = {
    "free_ram_mb": 2048,
    "free_disk_mb": 204800,
    "vcpus_used": 0,
    "hypervisor_hostname": "node-1",
    "service": {"disabled": False, "zone": {"name": "az1"}},
    "capabilities": {"opt1": "match", "enabled": True},
    "nothing": None,
    "empty": "",
    "tags": ["gpu", "ssd"],
}

COMMAND_TABLE: list[tuple[list[Any], bool]] = [
    (["=", 1, 1], True),
    (["=", 1, 2], False),
    (["=", 1, 1, 1], True),  # first against every other
    (["=", 1, 1, 2], False),
    (["=", 1, 1.0], True),
    (["=", 1, True], True),  # Python equality: True == 1
    (["=", "1", 1], False),
    (["=", "a", "a"], True),
    (["=", {"a": 1}, {"a": 1}], True),  # objects are literals
    (["<", 1, 2], True),
    (["<", 1, 1], False),
    (["<", 2, 1], False),
    (["<", 1, 2, 3], True),
    (["<", 2, 3, 1], False),  # not a chain: 2 < 3 and 2 < 1
    ([">", 2, 1], True),
    ([">", 2, 2], False),
    ([">", 2, 3], False),
    ([">", 3, 1, 2], True),  # 3 > 1 and 3 > 2, though 1 < 2
    (["<=", 1, 2], True),
    (["<=", 1, 1], True),
    (["<=", 2, 1], False),
    ([">=", 2, 1], True),
    ([">=", 2, 2], True),
    ([">=", 2, 3], False),
    ([">=", "b", "a"], True),  # strings order lexicographically
    (["<", "10", "9"], True),
    (["in", 1, 1], True),
    (["in", 1, 1, 2, 3], True),
    (["in", 4, 1, 2, 3], False),
    (["in", "a", "abc"], False),  # membership among the arguments, not substring
    (["not", True], False),
    (["not", False], True),
    # A top-level "not" yields a list; the host passes if any entry is true.
    (["not", True, False, True, False], True),
    (["not", True, True, True], False),
    (["not", 0], True),
    (["or", True, False], True),
    (["or", False, False], False),
    (["or", 0, ""], False),  # "" is dropped, 0 is falsy
    (["or", 0, "x"], True),  # a plain string is a truthy literal
    (["and", True, True], True),
    (["and", False, False], False),
    (["and", True, False], False),
    (["and", 1, "x", {"k": 0}], True),
    # Too few arguments: comparisons fail, the rest follow Python's all/any.
    ([">", 1], False),
    (["=", 1], False),
    (["="], False),
    (["in", 1], False),
    (["and"], True),
    (["or"], False),
    (["not"], False),  # [] at the top level: nothing is true
    # Values Python cannot order fail the comparison (Nova raises TypeError).
    (["<", 1, "a"], False),
    ([">=", "$hypervisor_hostname", 5], False),
    (["<", {}, {}], False),
    (["=", 1, "a"], False),  # equality never raises, just differs
]


@pytest.mark.parametrize(("query", "expected"), COMMAND_TABLE)
def test_commands(query: list[Any], expected: bool) -> None:
    assert evaluate(query, HOST) is expected
    assert evaluate(json.dumps(query), HOST) is expected


NESTING_TABLE: list[tuple[list[Any], bool]] = [
    (["and", ["or", True, False], [">", 2, 1]], True),
    (["and", ["or", False, False], [">", 2, 1]], False),
    (["or", ["and", ["<", 1, 2], ["<", 3, 2]], ["=", 5, 5]], True),
    (["=", [">", 2, 1], True], True),  # sub-query results are values
    (["in", ["=", 1, 1], False, True], True),
    (["and", []], True),  # an empty sub-query is true
    (["or", [], False], True),
    # Nested "not" yields a list, and any non-empty list is truthy, so it
    # never vetoes an enclosing "and" (a Nova quirk kept as is).
    (["and", ["not", True]], True),
    (["and", ["not", False]], True),
    (["and", ["not", True, True]], True),
    (["and", ["not"]], False),  # an empty list is falsy
    (["or", ["not", True]], True),
    (["=", ["not", True], False], False),  # [False] is not False
    (["=", ["not", True], ["not", True]], True),
    (["not", ["not", True]], False),  # not [False] is False
    # The documented JsonFilter example shape.
    (
        [
            "and",
            "$capabilities.enabled",
            ["=", "$capabilities.opt1", "match"],
            ["or", ["<", "$free_ram_mb", 30], [">", "$free_ram_mb", 30]],
        ],
        True,
    ),
]


@pytest.mark.parametrize(("query", "expected"), NESTING_TABLE)
def test_nesting(query: list[Any], expected: bool) -> None:
    assert evaluate(query, HOST) is expected


VARIABLE_TABLE: list[tuple[list[Any], bool]] = [
    ([">=", "$free_ram_mb", 1024], True),
    ([">=", "$free_ram_mb", 4096], False),
    (["<", 1024, "$free_ram_mb"], True),
    (["=", "$hypervisor_hostname", "node-1"], True),
    (["in", "$hypervisor_hostname", "node-0", "node-1"], True),
    (["=", "$free_ram_mb", "$free_ram_mb"], True),
    (["=", "$service.zone.name", "az1"], True),
    (["not", "$service.disabled"], True),
    (["=", "$vcpus_used", 0], True),  # falsy values are kept
    (["=", "$empty", ""], False),  # variable kept, literal "" dropped
    (["=", "$empty", "$empty"], True),
    (["=", "free_ram_mb", "free_ram_mb"], True),  # no "$": a literal string
    (["=", "$tags", "gpu"], False),  # a list variable is a value, not a query
    (["in", "gpu", "$tags"], False),
    # A missing variable is dropped from the arguments.
    (["=", "$missing", 5], False),  # too few arguments left
    (["=", "$missing", 5, 5], True),
    (["=", "$........", 1, 1], True),
    ([">=", "$free_ram_mb", "$missing"], False),
    (["and", "$missing"], True),  # all([]) is true
    (["and", "$missing", True], True),
    (["or", "$missing"], False),
    (["not", "$missing"], False),
    (["=", "$nothing", 1, 1], True),  # None counts as missing
    (["=", "$service.missing", 1, 1], True),
    (["=", "$free_ram_mb.x", 1, 1], True),  # cannot walk into a number
    (["=", "$tags.0", 1, 1], True),  # nor into a list
    (["=", "$", 1, 1], True),
    (["=", "", 1, 1], True),  # the empty string is dropped too
    # Missing variables make a host pass an "and" of checks on them.
    (["and", [">=", "$gpus", 2]], False),
    (["and", "$gpus"], True),
]


@pytest.mark.parametrize(("query", "expected"), VARIABLE_TABLE)
def test_variables(query: list[Any], expected: bool) -> None:
    assert evaluate(query, HOST) is expected


@pytest.mark.parametrize("query", ["", "[]", "{}", "null", "0", "false", '""', []])
def test_empty_query_accepts_every_host(query: str | list[Any]) -> None:
    # Nova returns early for any falsy query, and its tests pin "{}" as passing.
    assert evaluate(query, {}) is True


INVALID_TABLE: list[tuple[str | list[Any], str]] = [
    ("[>=, 1]", r"^query is not valid JSON: Expecting value: line 1 column 2"),
    ("['=', 1, 1]", r"^query is not valid JSON"),
    ("   ", r"^query is not valid JSON"),  # only "" counts as empty
    ('["=", 1, 1', r"^query is not valid JSON"),
    ('{"and": [true]}', r"^query must be a JSON list .* got dict"),
    ('"and"', r"^query must be a JSON list .* got str 'and'"),
    ("5", r"^query must be a JSON list .* got int 5"),
    ("true", r"^query must be a JSON list .* got bool True"),
    (["!=", 1, 2], r"^query\[0\]: unknown command '!='; expected one of '=', '<'"),
    (["AND", True], r"^query\[0\]: unknown command 'AND'"),
    (["$free_ram_mb", 1], r"^query\[0\]: unknown command '\$free_ram_mb'"),
    ([1, 2], r"^query\[0\]: expected a command name, got int 1$"),
    ([None], r"^query\[0\]: expected a command name, got NoneType None$"),
    ([["=", 1, 1]], r"^query\[0\]: expected a command name, got list"),
    (["and", True, ["or", ["xor", 1]]], r"^query\[2\]\[1\]\[0\]: unknown command 'xor'"),
    # No short-circuit: an error after a decisive argument still surfaces.
    (["or", True, ["bogus"]], r"^query\[2\]\[0\]: unknown command 'bogus'"),
    (["and", False, ["bogus"]], r"^query\[2\]\[0\]: unknown command 'bogus'"),
    # A list literal is read as a sub-query, so it cannot hold plain values.
    (["in", "gpu", ["gpu", "ssd"]], r"^query\[2\]\[0\]: unknown command 'gpu'"),
    ("[" * 100_000 + "]" * 100_000, r"^query nests too deeply"),
]


@pytest.mark.parametrize(("query", "message"), INVALID_TABLE)
def test_invalid_queries(query: str | list[Any], message: str) -> None:
    with pytest.raises(InvalidQuery, match=message):
        evaluate(query, HOST)


def test_invalid_query_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        evaluate("not json", HOST)


def test_deeply_nested_list_is_invalid() -> None:
    query: list[Any] = []
    for _ in range(100_000):
        query = ["and", query]
    with pytest.raises(InvalidQuery, match="nests too deeply"):
        evaluate(query, HOST)


def test_query_is_not_mutated() -> None:
    query: list[Any] = ["and", [">=", "$free_ram_mb", 1], "$missing"]
    snapshot = json.dumps(query)
    evaluate(query, HOST)
    assert json.dumps(query) == snapshot


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.sampled_from(["=", "<", ">", "in", "<=", ">=", "not", "or", "and", "$free_ram_mb"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=20,
)


@given(_JSON)
def test_any_json_gives_a_bool_or_invalid_query(query: Any) -> None:
    try:
        result = evaluate(json.dumps(query), HOST)
    except InvalidQuery:
        return
    assert isinstance(result, bool)
