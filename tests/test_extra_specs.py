"""Conformance of scheduling.extra_specs with Nova's extra-spec operators."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.extra_specs import capability_value, matches, spec_applies

FEATURES = str(["aes", "mmx", "aux"])  # how Nova stringifies a list capability

MATCH_TABLE: list[tuple[str | None, str, bool]] = [
    # No operator: plain equality with the whole requirement.
    ("1", "1", True),
    ("", "1", False),
    ("3", "1", False),
    ("222", "2", False),
    ("QEMU", "QEMU", True),
    ("qemu", "QEMU", False),
    ("", "", True),  # empty requirement equals only the empty value
    ("x", "", False),
    # The requirement is not stripped when there is no operator.
    ("1", " 1", False),
    ("1", "1 ", False),
    ("a b", "a b", True),
    ("a  b", "a b", False),
    # ">" and "<" are not extra-spec operators, so "> 2" is literal text.
    ("4", "> 2", False),
    ("> 2", "> 2", True),
    ("1", "< 2", False),
    # Operators are case-sensitive; "S==" is literal text too.
    ("1", "S== 1", False),
    ("S== 1", "S== 1", True),
    # "=" is numeric "at least", not equality (Nova: same as the vcpus case).
    ("123", "= 123", True),
    ("124", "= 123", True),
    ("34", "= 234", False),
    ("48", "= 48.0", True),
    ("34", "=", False),  # operator without operand
    ("48", "=48", False),  # no space: "=48" is one word, not an operator
    ("=48", "=48", True),
    # == and != compare as floats, so spelling does not matter.
    ("2000000", "== 2000000", True),
    ("2000000", "== 2e6", True),
    ("1.0", "== 1", True),
    ("1.5", "== 1", False),
    ("1", "!= 2", True),
    ("1.0", "!= 1", False),
    # >= and <= are numeric, unlike the s-prefixed string forms.
    ("3", ">= 1", True),
    ("2", ">= 3", False),
    ("10", ">= 9", True),  # "10" < "9" as strings; numerically fine
    ("2", "<= 10", True),
    ("3", "<= 2", False),
    ("2.5", "<= 2.5", True),
    ("-1", "<= 0", True),
    # Python float() spellings are accepted on either side.
    (" 12 ", ">= 12", True),
    ("1_000", ">= 999", True),
    ("inf", ">= 1e308", True),
    ("nan", "== nan", False),
    ("nan", "!= nan", True),
    # Non-numeric input to numeric operators does not match (Nova raises).
    ("abc", ">= 1", False),
    ("1", ">= abc", False),
    ("2.1.0", "= 2", False),
    ("", "== 0", False),
    ("abc", "!= 1", False),  # even "!=" fails rather than being vacuously true
    # Only the first operand counts for single-operand operators.
    ("5", ">= 1 100", True),
    ("2.1.0", "s== 2.1.0 junk", True),
    # Whitespace of any kind separates words.
    ("5", "  >=\t5  ", True),
    ("5", ">=\n4", True),
    # String comparisons are lexicographic.
    ("123", "s== 123", True),
    ("1234", "s== 123", False),
    ("2.1.0", "s== 2.1.0", True),
    ("", "s==", False),  # operator without operand never matches
    ("1234", "s!= 123", True),
    ("123", "s!= 123", False),
    ("1000", "s>= 234", False),
    ("234", "s>= 234", True),
    ("1234", "s<= 1000", False),
    ("1000", "s<= 1000", True),
    ("2", "s< 12", False),
    ("12", "s< 2", True),
    ("12", "s> 2", False),
    ("b", "s> a", True),
    ("B", "s> a", False),  # uppercase sorts first
    # <in> is a substring test against the first operand only.
    ("12311321", "<in> 11", True),
    ("12311321", "<in> 12311321", True),
    ("12311321", "<in> 12311321 <in>", True),
    ("12310321", "<in> 11", False),
    ("12310321", "<in> 11 <in>", False),
    ("compute_01", "<in> compute", True),
    ("compute_01", "<in> 01 zz", True),  # "zz" is ignored
    ("compute_01", "<in>", False),
    # <all-in> tests each operand as a substring of the stringified list.
    (FEATURES, "<all-in> aes mmx", True),
    (FEATURES, "<all-in> mmx", True),
    (FEATURES, "<all-in>  txt", False),
    (FEATURES, "<all-in> txt 3dnow", False),
    (FEATURES, "<all-in> txt aes", False),
    (FEATURES, "<all-in> mmx aes aux", True),  # order is irrelevant
    (FEATURES, "<all-in> ae", True),  # substring, so a prefix matches
    (FEATURES, "<all-in> ', '", True),  # even the list's punctuation
    (FEATURES, "<all-in>", False),
    ("aes,mmx", "<all-in> aes mmx", True),  # any text works, not just lists
    # <or>: equality with one of the alternatives.
    ("12", "<or> 11 <or> 12", True),
    ("12", "<or> 11 <or> 12 <or>", True),
    ("13", "<or> 11 <or> 12", False),
    ("13", "<or> 11 <or> 12 <or>", False),
    ("fpu", "<or> fpu <or> gpu", True),
    ("gpu", "<or> fpu <or> gpu", True),
    ("c", "<or> a <or> b <or> c <or> d", True),
    ("d", "<or> a <or> b <or> c <or> d", True),
    ("e", "<or> a <or> b <or> c <or> d", False),
    ("fp", "<or> fpu <or> gpu", False),  # equality, not substring
    ("<or>", "<or> a <or> b", False),  # separators are never alternatives
    # Nova skips every second word unchecked, whatever it says.
    ("c", "<or> a b c", True),
    ("b", "<or> a b c", False),
    ("b", "<or> a s== b", True),
    ("x", "<or>", False),  # Nova raises IndexError here
    ("a", "<or> a", True),
    # A missing capability satisfies nothing.
    (None, "1", False),
    (None, "", False),
    (None, "= 0", False),
    (None, "s!= x", False),
    (None, "<or> None", False),
    ("None", "<or> None", True),
]


@pytest.mark.parametrize(("value", "requirement", "expected"), MATCH_TABLE)
def test_match_table(value: str | None, requirement: str, expected: bool) -> None:
    assert matches(value, requirement) is expected


@given(st.one_of(st.none(), st.text()), st.text())
def test_match_never_raises(value: str | None, requirement: str) -> None:
    assert isinstance(matches(value, requirement), bool)


@given(st.text(), st.sampled_from(["=", "==", "!=", ">=", "<="]), st.text(min_size=1))
def test_numeric_ops_never_raise(value: str, op: str, operand: str) -> None:
    assert isinstance(matches(value, f"{op} {operand}"), bool)


HOST: dict[str, Any] = {
    "free_ram_mb": 4096,
    "hypervisor_type": "QEMU",
    "vcpus_used": 0,
    "enabled": False,
    "cpu_info": '{"arch": "x86_64", "topology": {"cores": 4}, "features": ["aes", "mmx"]}',
    "numa": {"nodes": 2, "detail": '{"node0": {"mem": 1024}}', "list": [1, 2]},
    "broken": "{not json",
    "nothing": None,
    "stats": {"io_workload": 3, "free_ram_mb": 1},
}

CAPABILITY_TABLE: list[tuple[str, Any]] = [
    ("capabilities:free_ram_mb", 4096),
    ("free_ram_mb", 4096),  # unscoped keys are looked up as they are
    ("capabilities:vcpus_used", 0),  # falsy values are still values
    ("capabilities:enabled", False),
    ("capabilities:missing", None),
    # Nested JSON text is decoded on the way down.
    ("capabilities:cpu_info:arch", "x86_64"),
    ("capabilities:cpu_info:topology:cores", 4),
    ("capabilities:cpu_info:features", ["aes", "mmx"]),
    ("capabilities:cpu_info:vendor", None),
    # The last value is returned as stored, JSON text included.
    ("capabilities:cpu_info", HOST["cpu_info"]),
    ("capabilities:numa:nodes", 2),
    ("capabilities:numa:detail:node0:mem", 1024),
    ("capabilities:numa:list:0", None),  # lists are not walked into
    ("capabilities:numa:nodes:x", None),  # nor are numbers
    ("capabilities:broken:x", None),  # undecodable JSON
    ("capabilities:nothing", None),
    ("capabilities:nothing:x", None),
    # The first segment falls back to the driver's stats.
    ("capabilities:io_workload", 3),
    ("io_workload", 3),
    ("capabilities:cpu_info:io_workload", None),  # only at the top level
    # Other scopes are not capabilities.
    ("hw:cpu_policy", None),
    ("aggregate_instance_extra_specs:free_ram_mb", None),
    ("Capabilities:free_ram_mb", None),  # the scope is case-sensitive
    ("capabilities:", None),
    ("capabilities:cpu_info::arch", None),
]


@pytest.mark.parametrize(("key", "expected"), CAPABILITY_TABLE)
def test_capability_value(key: str, expected: Any) -> None:
    assert capability_value(HOST, key) == expected


def test_capability_value_feeds_matches_as_text() -> None:
    # Nova stringifies the capability, which is why <all-in> sees list text.
    features = capability_value(HOST, "capabilities:cpu_info:features")
    assert matches(str(features), "<all-in> aes mmx")
    assert not matches(str(features), "<all-in> aes avx")
    assert matches(str(capability_value(HOST, "capabilities:free_ram_mb")), ">= 2048")
    assert matches(str(capability_value(HOST, "capabilities:enabled")), "False")


APPLIES_TABLE: list[tuple[str, bool]] = [
    ("capabilities:free_ram_mb", True),
    ("capabilities:missing", True),  # applies, then fails the host
    ("free_ram_mb", True),
    ("nothing", True),  # reported, even if as None
    ("io_workload", True),  # reported through stats
    ("missing", False),  # unscoped and unreported: skipped
    ("hw:cpu_policy", False),
    ("aggregate_instance_extra_specs:free_ram_mb", False),
]


@pytest.mark.parametrize(("key", "expected"), APPLIES_TABLE)
def test_spec_applies(key: str, expected: bool) -> None:
    assert spec_applies(HOST, key) is expected
