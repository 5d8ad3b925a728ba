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
) -> tuple[FloatArray, list[Weigher], FloatArray]:
    """``weigh_all``'s scores, the weighers that took part, and each one's
    share of them (its multiplier times its normalised values; one row per
    weigher), for an answer to say why its pick ranked first. The same sums
    in the same order as ``weigh_all``: each share is what that weigher's
    ``add_to`` adds."""
    total = np.zeros(len(rows), dtype=np.float64)
    if len(rows) <= 1:
        return total, [], np.zeros((0, len(rows)), dtype=np.float64)
    active = [w for w in weighers if not w.idle(ctx)]
    parts = np.zeros((len(active), len(rows)), dtype=np.float64)
    for weigher, part in zip(active, parts, strict=True):
        weigher.add_to(part, ctx, rows)
    if len(active):
        # down the rows one after another, as weigh_all adds them to its total
        np.add.reduce(parts, axis=0, out=total)
    return total, active, parts


_SORTED_UP_TO = 512
"""Up to this many scores, a stable sort of them all finds the best sooner
than the partition, the selection and the sort of the few."""


def best_positions(scores: FloatArray, count: int) -> IntArray:
    """Positions of the ``count`` highest scores, highest first; equal scores
    in order of position, as the engine's own pick breaks ties (for the
    scriptlet's candidates and an answer's ranking). O(n) to find them: a
    full sort of ten thousand scores costs more than what they are for;
    a sample's few hundred cost less sorted (one call, not six)."""
    if len(scores) <= max(count, _SORTED_UP_TO):
        best: IntArray = np.argsort(-scores, kind="stable")[:count]
        return best
    cut = np.partition(scores, len(scores) - count)[len(scores) - count]
    above = np.flatnonzero(scores > cut)
    chosen = np.concatenate((above, np.flatnonzero(scores == cut)[: count - len(above)]))
    ordered: IntArray = chosen[np.lexsort((chosen, -scores[chosen]))]
    return ordered
