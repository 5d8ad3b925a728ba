"""An answer's ranking: the best candidates for a request's first instance,
best first, each one's score and each weigher's part of it.

The best are found, and their numbers gathered, in one call: by the C
kernel ``scheduling._ranked`` where ``python -m berth.compile build`` (which
``make`` runs) built it, else by numpy (:func:`ranked_by_numpy`), the same
rows and the same bits. A ranking is made for every request placed, from
up to a thousand scores; numpy takes some twenty calls on small arrays,
each costing more than its work: with callgrind, the ten best of 700
scores and four weighers' values at them cost 65,000 instructions by
numpy, and the kernel's of about a thousand 4,100 (a placement through
the scheduler worker costs about 1.7 million). The kernel also writes
the ranking's text for the answer (:meth:`Ranking.to_json`).
"""

from __future__ import annotations

import binascii
import hashlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray, Snapshot
from scheduling.weighers.base import Weigher
from scheduling.weighers.combine import best_positions
from schemas.ranked import strings
from schemas.ranked import text as ranked_text

_LITTLE_ENDIAN = sys.byteorder == "little"
KERNEL_SOURCE = Path(__file__).resolve().parent / "_ranked.c"


class StaleKernel(ImportError):
    """The compiled ranking kernel was built from another source."""


Ranked = Callable[[FloatArray, IntArray, tuple[FloatArray, ...], int], tuple[list[int], bytes]]
"""(scores, their rows, each weigher's values, count) -> (the rows of the
best, best first, and their numbers): :func:`ranked_by_numpy`."""

Texted = Callable[[tuple[str, ...], str, bytes, bytes], str | None]
"""(providers, weighers as JSON text, numbers, multipliers) -> the ranking's
text as :func:`schemas.ranked.text` writes it, the numbers and multipliers
in base64; None when a provider's id needs an escape."""


def _kernel() -> tuple[Ranked, Texted] | None:
    """The compiled kernel's ``rank`` and ``text``, if built."""
    try:
        from scheduling._ranked import SOURCE_DIGEST, rank, text
    except ImportError:
        return None
    refuse_stale(SOURCE_DIGEST)
    return rank, text


def refuse_stale(built_from: str, source: Path = KERNEL_SOURCE) -> None:
    """:class:`StaleKernel` unless the kernel's ``source`` has the digest it
    was ``built_from``: a kernel left from an older source would rank by
    old code unnoticed."""
    if built_from != hashlib.sha256(source.read_bytes()).hexdigest():
        raise StaleKernel(
            f"{source.name} changed since compiled: run `make` to compile again, or "
            "`python -m berth.compile remove` to rank with numpy"
        )


def ranked_by_numpy(
    scores: FloatArray, rows: IntArray, parts: tuple[FloatArray, ...], count: int
) -> tuple[list[int], bytes]:
    """The rows of the ``count`` best ``scores``, best first (ties to the
    earlier row), and their numbers as native float64 bytes: their scores,
    then each part's values at them."""
    best = best_positions(scores, count)
    picked = [scores[best].tobytes(), *[part[best].tobytes() for part in parts]]
    return rows[best].tolist(), b"".join(picked)


_native, _native_text = _kernel() or (None, None)


def ranked_natively(
    scores: FloatArray, rows: IntArray, parts: tuple[FloatArray, ...], count: int
) -> tuple[list[int], bytes]:
    """:func:`ranked_by_numpy`'s answer, from the kernel."""
    assert _native is not None
    try:
        return _native(scores, rows, parts, count)
    except ValueError:  # an array the kernel does not read: numpy reads any
        return ranked_by_numpy(scores, rows, parts, count)


ranked: Ranked = ranked_by_numpy if _native is None else ranked_natively
""":func:`ranked_by_numpy`, by the kernel when it is built."""


def native() -> bool:
    """Whether the compiled kernel ranks."""
    return _native is not None


@dataclass(frozen=True, slots=True)
class Described:
    """What a ranking records of the weighers that took part, the same for
    every answer on one snapshot's aggregates (an engine keeps the last):
    their names, those names as JSON text, and their multipliers as a
    column (weigher x 1) when every candidate has each weigher's configured
    one (else None: asked row by row when the answer is written)."""

    weighers: tuple[Weigher, ...]
    aggregates: object
    membership: object
    names: tuple[str, ...]
    names_text: str
    column: FloatArray | None
    column_bytes: bytes
    """``column`` as an answer records it (little-endian float64; empty
    when ``column`` is None), written once rather than for every answer."""

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
        snapshot = ctx.snapshot
        written = b"" if column is None else column.astype("<f8", copy=False).tobytes()
        return cls(
            tuple(weighers),
            snapshot.aggregates,
            snapshot.membership,
            names,
            strings(names),
            column,
            written,
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
    it, normalised value and multiplier (Nova's sum: a score is the sum of
    value x multiplier).

    Only the ``count`` best are kept, taken out of the weighing when the
    ranking is made (:data:`ranked`): every candidate's score and values,
    kept until the answer is written, grew with the cluster (about 3 MB a
    request at 100,000 providers scanned whole) and a stream of answers
    written together ran out of memory. Their numbers are kept as the bytes
    an answer records, and read as arrays only where asked (explain, the
    tests); the answer's text is worked out once, when first read. It holds
    neither the snapshot nor the request: a scheduler keeps its answers'
    rankings until they are written (the sustained benchmark every one), and
    each holding its wave's snapshot kept every wave's alive, a few MB each
    at 10,000 providers; the providers' ids are read when it is made (under
    a microsecond) and the multipliers then too where an aggregate sets
    some (else the engine's column)."""

    __slots__ = (
        "_described",
        "_ids_of",
        "_multiplied",
        "_numbers",
        "_picked",
        "_settled",
        "_shares",
        "_text",
    )

    def __init__(
        self,
        ctx: Context,
        rows: IntArray,
        scores: FloatArray,
        described: Described,
        parts: Sequence[tuple[FloatArray, bool]],
        count: int,
    ) -> None:
        """The ``count`` best of ``rows`` by their ``scores``, the weighers
        that took part (``described``) and their ``parts`` as ``weigh_parts``
        gives them."""
        taken, self._picked = ranked(scores, rows, tuple([part for part, _ in parts]), count)
        providers = ctx.snapshot.providers
        self._ids_of = tuple([providers[row].provider_id for row in taken])
        self._shares = tuple([share for _, share in parts])
        self._described = described
        column = described.column  # None: an aggregate overrides one, or one is off
        self._multiplied: FloatArray = (
            column
            if column is not None
            else _multipliers_of(ctx, described.weighers, np.array(taken, dtype=np.int64))
        )
        self._settled: tuple[FloatArray, FloatArray] | None = None
        self._numbers: str | None = None
        self._text: str | None = None

    def _settle(self) -> tuple[FloatArray, FloatArray]:
        """(scores, values), read from the numbers kept; a share kept apart
        (``weigh_parts``) is divided by its multiplier (0 where that is 0)."""
        if self._settled is None:
            multipliers = self._multiplied
            kept = np.frombuffer(self._picked, dtype=np.float64)
            kept = kept.reshape(1 + len(self._shares), len(self._ids_of))
            values = np.zeros((len(self._shares), len(self._ids_of)), dtype=np.float64)
            for n, share in enumerate(self._shares):
                part = kept[1 + n]
                if share:
                    m = np.broadcast_to(multipliers[n], part.shape)
                    np.divide(part, m, out=values[n], where=m != 0)
                else:
                    values[n] = part
            self._settled = (kept[0], values)
        return self._settled

    def _as_recorded(self) -> bool:
        """Whether the numbers kept are those an answer records, followed
        by :meth:`_multipliers_recorded`: no share was kept apart, and
        native float64 is little-endian."""
        return _LITTLE_ENDIAN and True not in self._shares

    def _multipliers_recorded(self) -> bytes:
        """The multipliers as recorded: the engine's column, written once
        for every answer, else this ranking's own."""
        return self._described.column_bytes or self._multiplied.tobytes()

    def _numbers_b64(self) -> str:
        """The scores, values and multipliers as :mod:`schemas.ranked`
        records them: little-endian float64, base64, encoded at once
        rather than float by float."""
        if self._numbers is None:
            if self._as_recorded():
                numbers = self._picked + self._multipliers_recorded()
            else:
                multipliers = self._multiplied
                scores, settled = self._settle()
                joined = np.concatenate((scores, settled, multipliers), axis=None)
                numbers = joined.astype("<f8", copy=False).tobytes()
            # base64.b64encode's own call, without its Python wrapper
            self._numbers = binascii.b2a_base64(numbers, newline=False).decode("ascii")
        return self._numbers

    def compact(self) -> dict[str, object]:
        """The ranking as an answer records it (:mod:`schemas.ranked`): the
        providers, the weighers and their numbers."""
        return {
            "providers": list(self._ids_of),
            "weighers": list(self.weighers),
            "numbers": self._numbers_b64(),
        }

    def to_json(self) -> str:
        """``json.dumps(self.compact())``, written once (an answer's text
        sets it in as it is: :meth:`consumers.scheduler.Scheduled.encoded`)."""
        if self._text is None:
            names = self._described.names_text
            text = None
            if _native_text is not None and self._as_recorded():
                # the kernel encodes and joins it all in one call, a fifth
                # of the instructions of the same in Python
                text = _native_text(self._ids_of, names, self._picked, self._multipliers_recorded())
            self._text = text or ranked_text(self._ids_of, names, self._numbers_b64())
        return self._text

    @property
    def providers(self) -> tuple[str, ...]:
        return self._ids_of

    @property
    def scores(self) -> FloatArray:
        return self._settle()[0]

    @property
    def weighers(self) -> tuple[str, ...]:
        return self._described.names

    @property
    def values(self) -> FloatArray:
        """weigher x candidate: the normalised value, in [0, 1]."""
        return self._settle()[1]

    @property
    def multipliers(self) -> FloatArray:
        """weigher x candidate: the multiplier (an aggregate's, if it sets one)."""
        shape = (len(self._described.names), len(self._ids_of))
        return np.broadcast_to(self._multiplied, shape)

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
        providers, (scores, values_by_weigher) = self._ids_of, self._settle()
        names = self.weighers
        values, multipliers = values_by_weigher.T.tolist(), self.multipliers.T.tolist()
        return [
            {
                "provider_id": pid,
                "score": score,
                "weighers": {
                    name: [v, m]
                    for name, v, m in zip(names, values[n], multipliers[n], strict=True)
                },
            }
            for n, (pid, score) in enumerate(zip(providers, scores.tolist(), strict=True))
        ]
