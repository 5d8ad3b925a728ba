"""An answer's ranking on the wire: its best candidates, each weigher's
normalised value and multiplier, in a compact form that followers of the
placements topic which do not read it skip without decoding.

``{"providers": [...], "weighers": [...], "numbers": BASE64}``: the numbers
are little-endian float64, bit for bit what the engine computed: the
candidates' scores (one per provider), then each weigher's values (weigher
after weigher, one per provider), then the multipliers: one per weigher when
every candidate has that weigher's configured one (the common case), else
one per weigher and provider, laid out as the values. The number of each is
known from the two lists, and which layout from the count. Floats written as
text cost ten times more to encode than the rest of an answer;
:func:`expand` gives the readable form (a candidate per dict) where one is
shown or explained. :func:`text` writes the compact form as ``json.dumps``
would, at a fraction of its cost: an answer is written for every request
placed.
"""

from __future__ import annotations

import base64
import json
import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Any


def text(providers: Sequence[str], weighers: str, numbers: str) -> str:
    """``json.dumps({"providers": ..., "weighers": ..., "numbers": ...})``
    for ``numbers`` in base64 and ``weighers`` already written
    (``strings``, the same for all of an engine's answers): the same text,
    base64 needing no escapes and the names seldom any."""
    return f'{{"providers": {strings(providers)}, "weighers": {weighers}, "numbers": "{numbers}"}}'


_PLAIN = bytes(c for c in range(0x20, 0x7F) if chr(c) not in '"\\')
"""The characters JSON writes as they are: printable ASCII, but quotes and
backslashes."""


def strings(items: Sequence[str]) -> str:
    """``json.dumps(list(items))``: joined as they are when none needs an
    escape (printable ASCII without quotes or backslashes, as provider ids
    and class names are), which costs a third of encoding them one by one.
    Whether they need none is asked of their bytes (what is left when the
    plain ones are taken out), in a third of the instructions
    ``str.isprintable`` takes."""
    if not items:
        return "[]"
    joined = "".join(items)
    if joined.isascii() and not joined.encode().translate(None, _PLAIN):
        return '["' + '", "'.join(items) + '"]'
    return json.dumps(list(items))


def expand(ranked: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The candidates best first, each ``{"provider_id", "score", "weighers":
    {name: [normalised value, multiplier]}}``."""
    providers: list[str] = list(ranked["providers"])
    weighers: list[str] = list(ranked["weighers"])
    numbers = array("d", base64.b64decode(ranked["numbers"]))
    if sys.byteorder != "little":
        numbers.byteswap()
    n, w = len(providers), len(weighers)
    scores, values, multipliers = numbers[:n], numbers[n : n + w * n], numbers[n + w * n :]
    uniform = len(multipliers) == w
    if len(multipliers) not in (w, w * n):
        raise ValueError(f"{len(numbers)} numbers for {n} candidates and {w} weighers")
    return [
        {
            "provider_id": pid,
            "score": scores[c],
            "weighers": {
                name: [values[k * n + c], multipliers[k] if uniform else multipliers[k * n + c]]
                for k, name in enumerate(weighers)
            },
        }
        for c, pid in enumerate(providers)
    ]


def candidates_of(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An answer's candidates, readable: from its compact ``ranked``, or its
    ``candidates`` as answers recorded them before it (none: empty)."""
    ranked = answer.get("ranked")
    if ranked is not None:
        return expand(ranked)
    return list(answer.get("candidates") or ())
