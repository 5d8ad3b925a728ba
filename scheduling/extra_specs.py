"""Nova's extra-spec operator grammar, as used by capability and aggregate filters.

A flavor extra spec such as ``capabilities:hypervisor_version`` carries a
*requirement* string like ``">= 1005003"``. The first whitespace-separated word
may be an operator; the words after it are operands. :func:`matches` decides
whether a host *value* satisfies a requirement, with the same outcomes as Nova's
``extra_specs_ops.match`` except that inputs on which Nova raises (non-numbers
for numeric operators, a bare ``<or>``) give ``False``. :func:`capability_value`
finds the value a scoped key names, as Nova's ``ComputeCapabilitiesFilter`` does.

Operators (numeric ones convert both sides with Python's ``float``)::

    =        value >= operand, numerically (not equality: "at least", as for vcpus)
    ==  !=   numeric equality / inequality
    >=  <=   numeric ordering (there is no bare ``>`` or ``<``)
    s== s!= s< s<= s> s>=   string comparisons
    <in>     operand is a substring of value
    <all-in> every operand is a substring of value
    <or>     value equals one of the alternatives: ``<or> a <or> b <or> c``

A requirement whose first word is not an operator is compared with ``==``
against the *whole, unstripped* requirement string.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["capability_value", "matches", "spec_applies"]

CAPABILITIES_SCOPE = "capabilities"

_NUMERIC: dict[str, Callable[[float, float], bool]] = {
    # Nova documents "=" as "equal to or greater than", so that a flavor can
    # ask for "= 4" vcpus and land on any host that has at least four.
    "=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    "<=": operator.le,
}
_STRING: dict[str, Callable[[str, str], bool]] = {
    "s==": operator.eq,
    "s!=": operator.ne,
    "s<": operator.lt,
    "s<=": operator.le,
    "s>": operator.gt,
    "s>=": operator.ge,
}
_IN = "<in>"
_ALL_IN = "<all-in>"
_OR = "<or>"
_OPERATORS = frozenset({*_NUMERIC, *_STRING, _IN, _ALL_IN, _OR})


def matches(value: str | None, requirement: str) -> bool:
    """Return whether ``value`` satisfies the extra-spec ``requirement``.

    ``value`` is text: Nova's capability filter passes ``str(capability)``, so a
    list capability arrives as ``"['aes', 'mmx']"`` and ``<all-in>`` is a
    substring test against that text, not a set test. ``None`` (a capability
    the host does not report) satisfies nothing.

    Only the first operand counts for every operator except ``<all-in>`` (all
    operands) and ``<or>`` (every second word). An operator with no operand is
    unsatisfiable. Numeric operators give ``False`` when either side is not a
    number ``float`` accepts; Nova raises ``ValueError`` there instead.
    """
    words = requirement.split()
    op = words[0] if words else None
    operands = words[1:]
    if op not in _OPERATORS:
        return value == requirement
    if value is None:
        return False
    if op == _OR:
        # Nova consumes the words in pairs without checking the separator, so
        # the alternatives are the words at even positions whatever sits
        # between them: "<or> a b c" accepts "a" and "c" but not "b".
        return value in operands[::2]
    if not operands:
        return False
    if op == _ALL_IN:
        return all(operand in value for operand in operands)
    wanted = operands[0]
    if op == _IN:
        return wanted in value
    if op in _STRING:
        return _STRING[op](value, wanted)
    try:
        have, need = float(value), float(wanted)
    except ValueError:
        # A host reporting junk for one capability should lose this host, not
        # abort the whole scheduling request as Nova's uncaught error does.
        return False
    return _NUMERIC[op](have, need)


def _split_scope(scoped_key: str) -> list[str] | None:
    segments = scoped_key.split(":")
    if len(segments) == 1:
        return segments
    if segments[0] != CAPABILITIES_SCOPE:
        return None
    return segments[1:]


def _top_level(capabilities: Mapping[str, Any], name: str) -> Any | None:
    found = capabilities.get(name)
    if found is None:
        # Nova looks a name up on HostState first and then in the free-form
        # stats the compute driver reported; a snapshot keeps those under
        # "stats", so the same fallback applies to the first segment.
        stats = capabilities.get("stats")
        if isinstance(stats, Mapping):
            found = stats.get(name)
    return found


def capability_value(capabilities: Mapping[str, Any], scoped_key: str) -> Any | None:
    """Return the capability an extra-spec key names, or ``None`` if there is none.

    ``capabilities:cpu_info:features`` drops the ``capabilities`` scope and walks
    ``cpu_info`` then ``features``, one ``:``-separated segment per level. A key
    without ``:`` is looked up directly. A key in any other scope (``hw:...``,
    ``aggregate_instance_extra_specs:...``) is not a capability: ``None``. Use
    :func:`spec_applies` to tell such keys, which Nova skips, from missing
    capabilities, which make Nova reject the host.

    A string met *before* the last segment is decoded as JSON and walked into,
    because drivers report nested structures such as ``cpu_info`` as JSON text;
    undecodable text, a non-mapping, or a missing or ``None`` entry on the way
    gives ``None``. The value at the last segment is returned as stored (not
    decoded): pass ``str()`` of it to :func:`matches`, as Nova does. The first
    segment falls back to ``capabilities["stats"]`` when absent at top level.
    """
    segments = _split_scope(scoped_key)
    if segments is None:
        return None
    node: Any = capabilities
    for depth, segment in enumerate(segments):
        if isinstance(node, str):
            try:
                node = json.loads(node)
            except (ValueError, RecursionError):
                return None
        if not isinstance(node, Mapping):
            return None
        node = _top_level(node, segment) if depth == 0 else node.get(segment)
        if node is None:
            return None
    return node


def spec_applies(capabilities: Mapping[str, Any], scoped_key: str) -> bool:
    """Return whether Nova's capability filter would check this key at all.

    Keys scoped ``capabilities:`` always apply (and fail the host if the value
    is missing). Keys in another scope never apply. An unscoped key applies only
    when the host reports it, which keeps old flavors written before scoping
    from rejecting every host that lacks the attribute.
    """
    scope, colon, _ = scoped_key.partition(":")
    if colon:
        return scope == CAPABILITIES_SCOPE
    stats = capabilities.get("stats")
    return scoped_key in capabilities or (isinstance(stats, Mapping) and scoped_key in stats)


def address_bits_short(capabilities: Mapping[str, Any], wanted: str, what: str) -> str | None:
    """Why a host CPU with ``capabilities`` cannot give a guest ``wanted``
    physical address bits (its ``cpu_info`` reports ``maxphysaddr.bits``
    fewer, or none), or None."""
    try:
        bits = int(wanted)
    except ValueError:
        return f"{what} {wanted!r} is not a number of bits"
    found = capability_value(capabilities, "capabilities:cpu_info:maxphysaddr:bits")
    if found is None:
        return f"{what} {bits}: the host reports no cpu_info maxphysaddr bits"
    if not isinstance(found, int) or isinstance(found, bool) or found < bits:
        return f"{what} {bits}: the host CPU has {found} physical address bits"
    return None
