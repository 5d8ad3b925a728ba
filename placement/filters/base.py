"""The filter port: one small unit with one job, configured by its constructor.

A filter answers for one provider with ``reject(ctx, row)``: ``None`` if the
provider passes, else a short reason a person can act on (``"MEMORY_MB
wanted 8192, free 4096"``). The engine calls ``mask`` for the fast path;
the default loops over ``reject``, and the resource filters override it with
whole-array NumPy operations.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from placement.model import BoolArray, IntArray, Request, Snapshot


@dataclass(slots=True)
class Context:
    """One request being placed: the snapshot, the request, and what earlier
    picks of the same request have virtually consumed."""

    snapshot: Snapshot
    request: Request
    used: IntArray
    """``snapshot.used`` plus the virtual consumption of earlier picks."""
    picked: list[int] = field(default_factory=list)
    """Rows already picked for this request (one per earlier instance)."""
    _free: tuple[IntArray, IntArray, int, IntArray] | None = None
    """(rows, capacity, picks so far, capacity[rows] - used[rows]) of the
    last ``free`` call: the resource filter and the three resource weighers
    of one pick ask about the same rows."""

    def free(self, rows: IntArray, capacity: IntArray) -> IntArray:
        """``capacity[rows] - used[rows]``, every class, one row per row asked."""
        memo = self._free
        if (
            memo is not None
            and memo[0] is rows
            and memo[1] is capacity
            and memo[2] == len(self.picked)
        ):
            return memo[3]
        free: IntArray = capacity.take(rows, axis=0) - self.used.take(rows, axis=0)
        self._free = (rows, capacity, len(self.picked), free)
        return free

    @classmethod
    def start(cls, snapshot: Snapshot, request: Request) -> Context:
        return cls(snapshot, request, snapshot.used.copy())


class HostFilter(ABC):
    """Base of every filter. ``cost`` orders them (cheapest first);
    ``per_pick`` marks filters whose answer changes as a multi-instance
    request picks providers (resources, affinity), so they run for every pick
    instead of once per request."""

    name: ClassVar[str]
    cost: ClassVar[int] = 10
    per_pick: ClassVar[bool] = False

    def applies(self, request: Request) -> bool:
        """False when ``request`` asks nothing of this filter, so the engine
        can skip it: most requests use few hints and constraints."""
        return True

    @abstractmethod
    def reject(self, ctx: Context, row: int) -> str | None:
        """Why ``row`` cannot take the request, or None if it can."""

    def reasons(self, ctx: Context, rows: IntArray) -> list[str]:
        """Why each of ``rows`` (all rejected by ``mask``) was rejected; for the
        diagnostics, which may ask about thousands of providers at once."""
        return [self.reject(ctx, int(row)) or "rejected" for row in rows]

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        """Which of ``rows`` pass (vectorised filters override this)."""
        return np.fromiter(
            (self.reject(ctx, int(row)) is None for row in rows), dtype=np.bool_, count=len(rows)
        )
