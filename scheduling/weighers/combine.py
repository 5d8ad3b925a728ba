"""Nova's weight handler over whole arrays: every weigher's raw values are
normalised, multiplied per provider and summed.

For each weigher in order: raw = ``weigh``; scores += ``multipliers`` x
``normalize(raw, minval, maxval)`` (``normalize`` clamps to fixed bounds
first, as Nova's ``weigh_objects`` does). Each weigher's ``add_to`` does
that step, some with fewer array operations that give the same numbers
bit for bit; an idle weigher is skipped. With one candidate or none nothing
is weighed and every score is 0.0, as in Nova's ``get_weighed_objects``;
this also keeps a weigher that raises (metrics with ``required=True``) from
failing a request that had only one choice anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray
from scheduling.weighers.base import Weigher


def weigh_all(weighers: Sequence[Weigher], ctx: Context, rows: IntArray) -> FloatArray:
    """The combined score of each of ``rows`` (higher wins)."""
    total = np.zeros(len(rows), dtype=np.float64)
    if len(rows) <= 1:
        return total
    for weigher in weighers:
        if not weigher.idle(ctx):
            weigher.add_to(total, ctx, rows)
    return total


def weigh_parts(
    weighers: Sequence[Weigher], ctx: Context, rows: IntArray
) -> tuple[FloatArray, list[Weigher], list[tuple[FloatArray, bool]]]:
    """``weigh_all``'s scores, the same sums in the same order, with the
    weighers that took part and what each multiplied, for an answer to say
    why its pick ranked first: its normalised values (one per row) as its
    ``add_to`` returns them; or, from an ``add_to`` that returns none (an
    operator's own), its share (value x multiplier) weighed again apart,
    marked True, for the reader to divide."""
    total = np.zeros(len(rows), dtype=np.float64)
    active: list[Weigher] = []
    parts: list[tuple[FloatArray, bool]] = []
    if len(rows) <= 1:
        return total, active, parts
    for weigher in weighers:
        if weigher.idle(ctx):
            continue
        values = weigher.add_to(total, ctx, rows)
        if values is None:
            share = np.zeros(len(rows), dtype=np.float64)
            weigher.add_to(share, ctx, rows)
            parts.append((share, True))
        else:
            parts.append((values, False))
        active.append(weigher)
    return total, active, parts


_SORTED_UP_TO = 100
"""Up to this many scores, a stable sort of them all finds the best sooner
than the partition, the selection and the sort of the few."""


def best_positions(scores: FloatArray, count: int) -> IntArray:
    """Positions of the ``count`` highest scores, highest first; equal scores
    in order of position, as the engine's own pick breaks ties (for the
    scriptlet's candidates and an answer's ranking). O(n) to find them: a
    full sort of a sample's two hundred scores costs more than what they
    are for; a few dozen cost less sorted (one call, not five)."""
    # the arrays' own methods: numpy's functions of the same name add a
    # Python wrapper that costs as much as the work on a few hundred
    size = len(scores)
    if size <= max(count, _SORTED_UP_TO):
        best: IntArray = (-scores).argsort(kind="stable")[:count]
        return best
    highest = scores.copy()
    highest.partition(size - count)
    cut = highest[size - count]
    # those at the cut or above, in position order: more than count when
    # several tie at the cut, and the stable sort keeps the earlier ones
    chosen = (scores >= cut).nonzero()[0]
    if len(chosen) < count:  # NaN scores compare with nothing: sort them all
        everything: IntArray = (-scores).argsort(kind="stable")[:count]
        return everything
    ordered: IntArray = chosen[(-scores[chosen]).argsort(kind="stable")[:count]]
    return ordered
