"""Free identifiers of a numbered pool as disjoint intervals.

A pool of VXLAN VNIs (1 .. 16,777,215), VLAN IDs, addresses of a CIDR (as
integers) or any integer range. The cost depends on how fragmented the free
space is (k intervals) only through a binary search, never on the size of
the pool: 16 million VNIs cost what 10 do, and a pool fragmented into a
million intervals costs about what an unfragmented one does (the intervals
are kept in blocks, so a split moves one block, not the whole array).
Deterministic: the lowest free identifier is always chosen.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from schemas.pool_space import MAX_SPAN, PoolSpace


class IntervalPool:
    """Free identifiers in ``[first, last]``, less ``excluded``.

    Intervals are offsets from ``first`` in unsigned 64-bit arrays (16 bytes
    an interval; a pool may span 2**64 identifiers, an IPv6 /64), cut into
    blocks of at most ``2 * block`` intervals with the first start of each
    block kept aside: finding an identifier is two binary searches, and
    splitting or merging an interval moves at most one block, so a pool
    fragmented into a million intervals costs what an unfragmented one does.
    """

    __slots__ = ("_block", "_blocks", "_firsts", "_free", "first", "last")

    def __init__(
        self, first: int, last: int, excluded: Iterable[int] = (), block: int = 512
    ) -> None:
        if first > last:
            raise ValueError(f"empty range {first}..{last}")
        if last - first > MAX_SPAN:
            raise ValueError(f"a pool spans at most 2**64 identifiers, not {last - first + 1}")
        self.first = first
        self.last = last
        self._block = block
        self._blocks: list[tuple[array[int], array[int]]] = [
            (array("Q", [0]), array("Q", [last - first]))
        ]
        self._firsts: list[int] = [0]
        self._free = last - first + 1
        for identifier in sorted(set(excluded)):
            if first <= identifier <= last:
                self.take(identifier)

    def __len__(self) -> int:
        """How many identifiers are free (OverflowError past ``sys.maxsize``:
        use :attr:`count` where a pool may be an IPv6 /64)."""
        return self._free

    @property
    def count(self) -> int:
        """How many identifiers are free, up to 2**64."""
        return self._free

    @property
    def intervals(self) -> int:
        return sum(len(starts) for starts, _ in self._blocks)

    @property
    def nbytes(self) -> int:
        """Bytes held by the interval arrays."""
        return sum(
            len(starts) * starts.itemsize + len(ends) * ends.itemsize
            for starts, ends in self._blocks
        )

    def spans(self) -> list[tuple[int, int]]:
        """The free identifiers as (first, last) intervals, in order."""
        base = self.first
        return [
            (base + start, base + end)
            for starts, ends in self._blocks
            for start, end in zip(starts, ends, strict=True)
        ]

    def _find(self, offset: int) -> tuple[int, int]:
        """(block, index) of the last interval starting at or before ``offset``;
        block -1 when none does."""
        b = bisect.bisect_right(self._firsts, offset) - 1
        if b < 0:
            return -1, -1
        return b, bisect.bisect_right(self._blocks[b][0], offset) - 1

    def is_free(self, identifier: int) -> bool:
        if not self.first <= identifier <= self.last:
            return False
        offset = identifier - self.first
        b, i = self._find(offset)
        return b >= 0 and offset <= self._blocks[b][1][i]

    def take_lowest(self) -> int | None:
        """Take the lowest free identifier (None when the pool is exhausted)."""
        if not self._blocks:
            return None
        starts, ends = self._blocks[0]
        offset = starts[0]
        self._free -= 1
        if offset == ends[0]:
            self._delete(0, 0)
        else:
            starts[0] = offset + 1
            self._firsts[0] = offset + 1
        return self.first + offset

    def take(self, identifier: int) -> bool:
        """Take ``identifier`` if it is free; False if it is not."""
        if not self.first <= identifier <= self.last:
            return False
        offset = identifier - self.first
        b, i = self._find(offset)
        if b < 0:
            return False
        starts, ends = self._blocks[b]
        start, end = starts[i], ends[i]
        if offset > end:
            return False
        self._free -= 1
        if start == end:
            self._delete(b, i)
        elif offset == start:
            starts[i] = offset + 1
            if i == 0:
                self._firsts[b] = offset + 1
        elif offset == end:
            ends[i] = offset - 1
        else:  # split the interval around it
            ends[i] = offset - 1
            self._insert(b, i + 1, offset + 1, end)
        return True

    def give_back(self, identifier: int) -> bool:
        """Return ``identifier`` to the pool; False if it was already free or
        is outside the pool."""
        if not self.first <= identifier <= self.last or self.is_free(identifier):
            return False
        self._free += 1
        offset = identifier - self.first
        blocks = self._blocks
        b, i = self._find(offset)  # the interval before it, if any
        if b >= 0 and i + 1 < len(blocks[b][0]):
            nb, ni = b, i + 1
        elif b + 1 < len(blocks):
            nb, ni = b + 1, 0
        else:
            nb, ni = -1, -1
        joins_left = b >= 0 and blocks[b][1][i] == offset - 1
        joins_right = nb >= 0 and blocks[nb][0][ni] == offset + 1
        if joins_left and joins_right:
            blocks[b][1][i] = blocks[nb][1][ni]
            self._delete(nb, ni)
        elif joins_left:
            blocks[b][1][i] = offset
        elif joins_right:
            blocks[nb][0][ni] = offset
            if ni == 0:
                self._firsts[nb] = offset
        elif b >= 0:
            self._insert(b, i + 1, offset, offset)
        else:
            self._insert(0, 0, offset, offset)
        return True

    def _delete(self, b: int, i: int) -> None:
        starts, ends = self._blocks[b]
        del starts[i]
        del ends[i]
        if not starts:
            del self._blocks[b]
            del self._firsts[b]
        elif i == 0:
            self._firsts[b] = starts[0]

    def _insert(self, b: int, i: int, start: int, end: int) -> None:
        if not self._blocks:
            self._blocks.append((array("Q", [start]), array("Q", [end])))
            self._firsts.append(start)
            return
        starts, ends = self._blocks[b]
        starts.insert(i, start)
        ends.insert(i, end)
        if i == 0:
            self._firsts[b] = start
        if len(starts) > 2 * self._block:  # split the block in two halves
            half = len(starts) // 2
            self._blocks.insert(b + 1, (starts[half:], ends[half:]))
            self._firsts.insert(b + 1, starts[half])
            del starts[half:]
            del ends[half:]


@dataclass(slots=True, eq=False)
class PoolState:
    """One pool in a partition's state: its space and its free identifiers."""

    pool_id: str
    space: PoolSpace
    free: IntervalPool

    @classmethod
    def of(cls, pool_id: str, space: PoolSpace) -> PoolState:
        return cls(pool_id, space, IntervalPool(space.first, space.last, space.excluded))

    @property
    def taken(self) -> int:
        return self.space.size - self.free.count
