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


def best_positions_in_rows(table: FloatArray, sizes: Sequence[int], count: int) -> IntArray:
    """``best_positions`` of each row of ``table`` (its first ``sizes``
    items, ``count`` or more, the rest -inf), a row of positions each, found
    together: each operation once for every row rather than once a row,
    which costs several times what it does on a few hundred scores.

    A row's cut is its ``count``-th highest score (a partition); those at
    the cut or above, in position order, are sorted by row, then score down,
    stably, so that equal scores stay in position order: the padding comes
    after the row's own -inf. NaN compares with nothing: rows that hold
    one are each sorted alone."""
    rows, widest = table.shape
    lowest = np.negative(table)
    lowest.partition(count - 1, axis=1)
    # -(-x) is x, bit for bit: the cut itself, the same row after row
    cut = np.repeat(np.negative(lowest[:, count - 1]), widest)
    kept = (table.ravel() >= cut).nonzero()[0]
    row, position = np.divmod(kept, widest)
    taken = np.bincount(row, minlength=rows)
    padded = min(sizes) < widest
    if int(taken.min()) < count or (padded and bool(np.isnan(table).any())):
        return np.array(
            [best_positions(table[n, :size], count) for n, size in enumerate(sizes)],
            dtype=np.int64,
        )
    # (row, -score) in order, as a complex number's two parts are; stable
    key = np.empty(len(kept), dtype=np.complex128)
    key.real = row
    key.imag = table.ravel()[kept]
    np.negative(key.imag, out=key.imag)
    order = key.argsort(kind="stable")
    firsts = taken.cumsum() - taken
    best: IntArray = position[order[firsts[:, None] + np.arange(count)]]
    return best
