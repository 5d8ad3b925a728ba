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
than a cut and the sort of the few above it."""

_SAMPLED_EVERY = 8
"""The cut is guessed from every eighth score (see ``best_positions``)."""


def best_positions(scores: FloatArray, count: int) -> IntArray:
    """Positions of the ``count`` highest scores, highest first; equal scores
    in order of position, as the engine's own pick breaks ties (for the
    scriptlet's candidates and an answer's ranking). Found in O(n) from a
    cut: the scores at or above it, in position order, sorted stably.
    The cut is guessed from a sample (every eighth score) so that a few
    dozen pass it, which costs half of finding the exact ``count``-th
    score by a partition of them all (an answer ranks a thousand
    candidates); a cut that lets fewer than ``count`` through (NaN
    scores, or scores that rise by position) is made exact instead."""
    # the arrays' own methods: numpy's functions of the same name add a
    # Python wrapper that costs as much as the work on a few hundred
    size = len(scores)
    if size <= max(count, _SORTED_UP_TO):
        best: IntArray = (-scores).argsort(kind="stable")[:count]
        return best
    sample = scores[::_SAMPLED_EVERY].copy()
    # the sample's few highest: about their number x 8 scores pass the cut
    highest = min(len(sample), -(-count // _SAMPLED_EVERY) + 2)
    sample.partition(len(sample) - highest)
    chosen = (scores >= sample[len(sample) - highest]).nonzero()[0]
    if len(chosen) < count:
        chosen = _at_or_above_exact_cut(scores, count)
        if len(chosen) < count:  # NaN scores compare with nothing: sort them all
            everything: IntArray = (-scores).argsort(kind="stable")[:count]
            return everything
    # more than count when several tie at the cut: the stable sort keeps
    # the earlier ones
    ordered: IntArray = chosen[(-scores[chosen]).argsort(kind="stable")[:count]]
    return ordered


def _at_or_above_exact_cut(scores: FloatArray, count: int) -> IntArray:
    """The positions of the scores at or above the ``count``-th highest, in
    position order (fewer than ``count`` only with NaN scores)."""
    highest = scores.copy()
    highest.partition(len(scores) - count)
    chosen: IntArray = (scores >= highest[len(scores) - count]).nonzero()[0]
    return chosen
