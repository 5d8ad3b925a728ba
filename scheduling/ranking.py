"""An answer's ranking: the best candidates for a request's first instance,
best first, with each weigher's normalised value and multiplier (Nova's
sum: a score is the sum of value x multiplier).

Working a ranking out is a dozen array operations on a few hundred numbers
(the best positions found, then each weigher's values taken out at them),
and each costs more to call than to do: alone, a ranking cost about a third
of its decision. So an engine's rankings are worked out together
(:class:`Rankings`), up to :data:`BATCH` at a time, in as many operations
as one: when the batch is full, when one of them is first read, or when
the engine ranks on other providers or other weighers. The numbers are
the same, bit for bit, as the ranking's alone (:func:`settle_alone`,
which those that cannot wait take: a multiplier an aggregate overrides,
asked of the snapshot; a weigher of an operator's, whose values the
engine does not keep; more candidates than :data:`BATCHED_UP_TO`).

A ranking keeps, once worked out, its providers' ids and one array of its
numbers in the order an answer records them (:mod:`schemas.ranked`):
neither the snapshot nor the request, since a scheduler keeps its answers'
rankings until they are written; until then it holds its candidates'
scores and values, at most :data:`BATCH` rankings an engine.
"""

from __future__ import annotations

import binascii
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray, Provider, Snapshot
from scheduling.weighers.base import Weigher
from scheduling.weighers.combine import best_positions, best_positions_in_rows
from schemas.ranked import plain, strings, written

_LITTLE_ENDIAN = sys.byteorder == "little"

BATCH = 128
"""Rankings an engine works out together at most: enough that the
operations' calls cost little a ranking."""

BATCHED_UP_TO = 320
"""A ranking of more candidates is worked out at once, alone. A batch
copies every score and value of its rankings into one array to take out
the best's: for a few hundred candidates that costs less than the calls
to take them ranking by ranking; for a thousand (a 10% sample of 10,000
providers) about as much as a ranking alone, whose partition the batch
does not make cheaper. (What a ranking holds until then must not grow
with the cluster, either.)"""


@dataclass(frozen=True, slots=True)
class Described:
    """What a ranking records of the weighers that took part, the same for
    every answer on one snapshot's aggregates (an engine keeps the last):
    their names, those names as JSON text, and their multipliers as a
    column (weigher x 1) when every candidate has each weigher's configured
    one (else None: asked row by row when the ranking is worked out)."""

    weighers: tuple[Weigher, ...]
    aggregates: object
    membership: object
    names: tuple[str, ...]
    names_text: str
    column: FloatArray | None
    flat: FloatArray
    """``column`` as one row (empty when ``column`` is None)."""
    batched: bool
    """Whether rankings by these weighers may wait for their batch: some
    weighers took part, the multipliers are the column, and the weighers
    are Berth's own, whose values are arrays of their own or of a
    snapshot's, never written to after (an operator's may reuse one)."""

    def fits(self, weighers: Sequence[Weigher], snapshot: Snapshot) -> bool:
        return (
            self.aggregates is snapshot.aggregates
            and self.membership is snapshot.membership
            and self.weighers == tuple(weighers)
        )

    @classmethod
    def of(cls, weighers: Sequence[Weigher], ctx: Context) -> Described:
        uniform = [w.uniform_multiplier(ctx) for w in weighers]
        column = None
        if None not in uniform and 0.0 not in uniform:  # no aggregate overrides one, none is off
            column = np.array(uniform, dtype=np.float64)[:, None]
            column.flags.writeable = False
        names = tuple(w.name for w in weighers)
        own = all(type(w).__module__.startswith("scheduling.weighers.") for w in weighers)
        snapshot = ctx.snapshot
        return cls(
            tuple(weighers),
            snapshot.aggregates,
            snapshot.membership,
            names,
            strings(names),
            column,
            np.zeros(0) if column is None else column.ravel(),
            column is not None and own and len(names) > 0,
        )


def _multipliers_of(ctx: Context, weighers: Sequence[Weigher], rows: IntArray) -> FloatArray:
    """weigher x row: each weigher's multiplier of ``rows`` as the request's
    first pick saw them (no earlier picks, the snapshot's usage)."""
    first = Context(ctx.snapshot, ctx.request, ctx.snapshot.used)
    first.reference, first.io_reference = ctx.reference, ctx.io_reference
    multipliers = np.empty((len(weighers), len(rows)), dtype=np.float64)
    for n, weigher in enumerate(weighers):
        multipliers[n] = weigher.multipliers(first, rows)
    return multipliers


class Ranking:
    """The best candidates for a request's first instance, best first, as
    the weighers ranked them: each one's score and each weigher's part of
    it, normalised value and multiplier. Made by :class:`Rankings`; worked
    out with its batch, or alone, when first read."""

    __slots__ = ("_batch", "_described", "_ids_of", "_ids_text", "_numbers", "_pieces", "_text")
    _ids_of: tuple[str, ...]
    _ids_text: str
    _pieces: list[FloatArray]
    """A ranking worked out alone: its scores, each weigher's values and
    its multipliers, until they are joined into its numbers."""

    def __init__(self, described: Described, batch: _Batch | None = None) -> None:
        # what it is worked out into is set then: _ids_of, the providers'
        # ids, and _ids_text, the same as JSON text (empty if not written)
        self._described = described
        self._batch = batch
        """The batch it waits in, until worked out."""
        self._numbers: FloatArray | None = None
        """The scores, each weigher's values and the multipliers, one after
        the other (:mod:`schemas.ranked`'s order), once worked out."""
        self._text: str | None = None

    def _settled(self) -> FloatArray:
        """The numbers, the ranking worked out first if it is not yet."""
        numbers = self._numbers
        if numbers is None:
            batch = self._batch
            if batch is not None:
                batch.settle()
            numbers = self._numbers
            if numbers is None:  # worked out alone: its pieces joined when first read
                numbers = self._numbers = np.concatenate(self._pieces)
                self._pieces = []
        return numbers

    def _numbers_b64(self) -> str:
        """The numbers as :mod:`schemas.ranked` records them: little-endian
        float64, base64, encoded at once rather than float by float."""
        numbers = self._numbers
        if numbers is None:
            numbers = self._settled()
        if not _LITTLE_ENDIAN:
            numbers = numbers.astype("<f8")
        # base64.b64encode's own call, without its Python wrapper; the
        # array's buffer as it is, without a copy into bytes first
        return binascii.b2a_base64(numbers, newline=False).decode("ascii")  # type: ignore[arg-type]

    def compact(self) -> dict[str, object]:
        """The ranking as an answer records it (:mod:`schemas.ranked`): the
        providers, the weighers and their numbers."""
        numbers = self._numbers_b64()
        return {
            "providers": list(self._ids_of),
            "weighers": list(self.weighers),
            "numbers": numbers,
        }

    def to_json(self) -> str:
        """``json.dumps(self.compact())``, written once (an answer's text
        sets it in as it is: :meth:`consumers.scheduler.Scheduled.encoded`)."""
        text = self._text
        if text is None:
            numbers = self._numbers_b64()  # worked out first, if it is not yet
            ids = self._ids_text or strings(self._ids_of)
            text = self._text = written(ids, self._described.names_text, numbers)
        return text

    @property
    def providers(self) -> tuple[str, ...]:
        self._settled()
        return self._ids_of

    @property
    def scores(self) -> FloatArray:
        numbers = self._settled()
        return numbers[: len(self._ids_of)]

    @property
    def weighers(self) -> tuple[str, ...]:
        return self._described.names

    @property
    def values(self) -> FloatArray:
        """weigher x candidate: the normalised value, in [0, 1]."""
        numbers = self._settled()
        k, w = len(self._ids_of), len(self._described.names)
        return numbers[k : k + w * k].reshape(w, k)

    @property
    def multipliers(self) -> FloatArray:
        """weigher x candidate: the multiplier (an aggregate's, if it sets one)."""
        numbers = self._settled()
        k, w = len(self._ids_of), len(self._described.names)
        multipliers = numbers[k + w * k :]
        if len(multipliers) == w * k:
            return multipliers.reshape(w, k)
        return np.broadcast_to(multipliers[:, None], (w, k))

    def __eq__(self, other: object) -> bool:
        """Equal when every candidate, score and part is (same placements)."""
        if not isinstance(other, Ranking):
            return NotImplemented
        return (
            self.providers == other.providers
            and self.weighers == other.weighers
            and np.array_equal(self.scores, other.scores)
            and np.array_equal(self.values, other.values)
            and np.array_equal(self.multipliers, other.multipliers)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Ranking({', '.join(self.providers)})"

    def to_dicts(self) -> list[dict[str, object]]:
        names = self.weighers
        values, multipliers = self.values.T.tolist(), self.multipliers.T.tolist()
        return [
            {
                "provider_id": pid,
                "score": score,
                "weighers": {
                    name: [v, m]
                    for name, v, m in zip(names, values[n], multipliers[n], strict=True)
                },
            }
            for n, (pid, score) in enumerate(zip(self.providers, self.scores.tolist(), strict=True))
        ]


class _Batch:
    """Rankings waiting to be worked out together: of one snapshot's
    providers, by the same weighers (``described``), ``count`` each; and
    what each holds until then: its candidates, their scores and each
    weigher's values (all the rankings' values one list, ranking after
    ranking, weigher after weigher)."""

    __slots__ = (
        "count",
        "described",
        "providers",
        "rankings",
        "rows",
        "scores",
        "values",
    )

    def __init__(self, described: Described, providers: Sequence[Provider], count: int) -> None:
        self.described = described
        self.providers = providers
        self.count = count
        self.rankings: list[Ranking] = []
        self.rows: list[IntArray] = []
        self.scores: list[FloatArray] = []
        self.values: list[FloatArray] = []

    def settle(self) -> None:
        """Work out every ranking of the batch (once): their best positions
        found together, then their scores, values and candidates' ids."""
        rankings = self.rankings
        if not rankings:
            return
        self.rankings = []
        if len(rankings) == 1:  # read as soon as made (a request at a time)
            self._alone(rankings[0])
            return
        sizes = [len(rows) for rows in self.rows]
        widest = max(sizes)
        if min(sizes) == widest:
            table = np.concatenate(self.scores).reshape(len(sizes), widest)
        else:
            table = _padded(self.scores, sizes)
        best = best_positions_in_rows(table, sizes, self.count)
        numbers = np.empty((len(sizes), self.width), dtype=np.float64)
        numbers[:, : self.count] = table[np.arange(len(sizes))[:, None], best]
        candidates = self._gathered(best, sizes, numbers)
        column = self.described.column
        assert column is not None
        numbers[:, self.width - len(column) :] = self.described.flat
        providers = self.providers
        ids = [tuple([providers[row].provider_id for row in rows]) for rows in candidates]
        # the ids checked once for the batch: written as they are, the common case
        as_they_are = plain("".join(["".join(these) for these in ids]))
        for ranking, these, row_numbers in zip(rankings, ids, numbers, strict=True):
            ranking._ids_of = these
            ranking._ids_text = '["' + '", "'.join(these) + '"]' if as_they_are else ""
            ranking._numbers = row_numbers
            ranking._batch = None
        self.rows, self.scores, self.values = [], [], []

    def _alone(self, ranking: Ranking) -> None:
        """The batch's one ranking worked out as :func:`settle_alone` does:
        the batch's operations cost more than they save for one."""
        (rows,), (scores,) = self.rows, self.scores
        best = best_positions(scores, self.count)
        providers = self.providers
        ranking._ids_of = tuple([providers[row].provider_id for row in rows[best].tolist()])
        ranking._ids_text = ""
        ranking._pieces = [scores[best], *[v[best] for v in self.values], self.described.flat]
        ranking._batch = None
        self.rows, self.scores, self.values = [], [], []

    @property
    def width(self) -> int:
        """A ranking's numbers: scores, values, multipliers (one each)."""
        weighers = len(self.described.names)
        return (weighers + 1) * self.count + weighers

    def _gathered(self, best: IntArray, sizes: list[int], numbers: FloatArray) -> list[list[int]]:
        """Every ranking's values at its ``best`` into ``numbers``, out of
        one array of them all (ranking after ranking, weigher after
        weigher), and its candidates' rows out of one of theirs."""
        weighers, count = len(self.described.names), self.count
        lengths = np.repeat(np.array(sizes, dtype=np.int64), weighers)
        starts = (lengths.cumsum() - lengths).reshape(len(sizes), weighers, 1)
        values = np.concatenate(self.values).take(starts + best[:, None, :])
        numbers[:, count : (weighers + 1) * count] = values.reshape(len(sizes), weighers * count)
        first = starts[:, 0] // weighers  # where each ranking's rows start
        rows: list[list[int]] = np.concatenate(self.rows).take(first + best).tolist()
        return rows


def _padded(scores: list[FloatArray], sizes: list[int]) -> FloatArray:
    """``scores`` a row each, each padded with -inf to the longest."""
    widest = max(sizes)
    padding = np.full(widest, -np.inf)
    pieces: list[FloatArray] = []
    for row, size in zip(scores, sizes, strict=True):
        pieces.append(row)
        if size < widest:
            pieces.append(padding[size:])
    table: FloatArray = np.concatenate(pieces).reshape(len(sizes), widest)
    return table


class Rankings:
    """An engine's rankings: each made where the engine weighs its
    request's first instance, worked out with others of its batch when
    first read (or the batch fills), or at once alone. Like the engine,
    for one thread at a time."""

    def __init__(self, batch: int = BATCH) -> None:
        self.batch = batch
        self._open: _Batch | None = None

    def rank(
        self,
        ctx: Context,
        rows: IntArray,
        scores: FloatArray,
        described: Described,
        parts: Sequence[tuple[FloatArray, bool]],
        count: int,
    ) -> Ranking:
        """The ``count`` best of ``rows`` by their ``scores``, with the
        weighers' ``parts`` (``weigh_parts``)."""
        if not count <= len(rows) <= BATCHED_UP_TO or not described.batched:
            return settle_alone(ctx, rows, scores, described, parts, count)
        values, shares = zip(*parts, strict=True) if parts else ((), ())
        if True in shares:
            return settle_alone(ctx, rows, scores, described, parts, count)
        providers = ctx.snapshot.providers
        batch = self._open
        if (
            batch is None
            or batch.described is not described
            or batch.providers is not providers
            or batch.count != count
            or not batch.rankings  # settled when one of them was read
        ):
            # one batch open at a time: what waits holds one snapshot's providers
            self.settle()
            batch = self._open = _Batch(described, providers, count)
        ranking = Ranking(described, batch)
        batch.rankings.append(ranking)
        batch.rows.append(rows)
        batch.scores.append(scores)
        batch.values += values
        if len(batch.rankings) >= self.batch:
            self.settle()
        return ranking

    def settle(self) -> None:
        """Work out the rankings that wait."""
        batch, self._open = self._open, None
        if batch is not None:
            batch.settle()


def settle_alone(
    ctx: Context,
    rows: IntArray,
    scores: FloatArray,
    described: Described,
    parts: Sequence[tuple[FloatArray, bool]],
    count: int,
) -> Ranking:
    """A ranking worked out at once: ties to the earlier row as the pick
    breaks them; a share kept apart (``weigh_parts``) divided by its
    multiplier (0 where that is 0); the multipliers asked of the snapshot
    where an aggregate may override one. Its numbers are kept in pieces
    until read (a scheduler that writes no answers never joins them)."""
    best = best_positions(scores, count)
    taken = rows[best]
    providers = ctx.snapshot.providers
    ids = tuple([providers[row].provider_id for row in taken.tolist()])
    column = described.column
    multipliers = column if column is not None else _multipliers_of(ctx, described.weighers, taken)
    pieces = [scores[best]]
    for n, (part, share) in enumerate(parts):
        values = part[best]
        if share:
            m = np.broadcast_to(multipliers[n], values.shape)
            values = np.divide(values, m, out=np.zeros_like(values), where=m != 0)
        pieces.append(values)
    pieces.append(described.flat if column is not None else multipliers.ravel())
    ranking = Ranking(described)
    ranking._ids_of, ranking._ids_text, ranking._pieces = ids, "", pieces
    return ranking
