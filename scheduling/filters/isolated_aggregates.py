"""Nova's isolated aggregates prefilter (``enable_isolated_aggregate_filtering``):
aggregates that admit only requests asking for their traits.

An aggregate whose metadata has ``trait:NAME = required`` keeps out every
request that does not itself require ``NAME`` (in its required traits, its
flavor's extra specs or its image's properties), so hosts kept for, say,
GPU workloads take nothing else. A provider in several such aggregates
needs the request to require the traits of them all.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np

from scheduling.filters.base import Context, HostFilter
from scheduling.filters.traits import wanted_traits
from scheduling.model import Aggregate, BoolArray, IntArray, Provider, Request, Snapshot

_PREFIX = "trait:"


def isolating(aggregate: Aggregate) -> frozenset[str]:
    """The traits ``aggregate`` requires of the requests it admits."""
    return frozenset(
        key.removeprefix(_PREFIX)
        for key, value in aggregate.metadata.items()
        if key.startswith(_PREFIX) and value == "required"
    )


def requested_traits(request: Request) -> frozenset[str]:
    """What the request requires: its traits, its flavor's extra specs and its
    image's ``trait:NAME = required`` properties."""
    required, _ = wanted_traits(request)
    image = isolating(Aggregate("image", request.image_properties))
    return required | image


class IsolatedAggregatesFilter(HostFilter):
    name = "IsolatedAggregatesFilter"
    cost = 3
    static = True

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return provider.aggregates

    def __init__(self) -> None:
        self._known: tuple[Mapping[str, Aggregate], tuple[Provider, ...], _Isolated] | None = None
        """The last snapshot's aggregates and providers, and what isolates
        which of its rows."""

    def _isolated(self, snapshot: Snapshot) -> _Isolated:
        known = self._known
        aggregates, providers = snapshot.aggregates, snapshot.providers
        if known is None or known[0] is not aggregates or known[1] is not providers:
            traits = {n: t for n, a in aggregates.items() if (t := isolating(a))}
            by_row: dict[int, tuple[str, frozenset[str]]] = {}
            for row, p in enumerate(providers):
                names = sorted(p.aggregates & traits.keys())
                if names:
                    by_row[row] = (",".join(names), frozenset().union(*(traits[n] for n in names)))
            rows = np.fromiter(sorted(by_row), np.int64, len(by_row))
            known = self._known = (aggregates, providers, _Isolated(by_row, rows))
        return known[2]

    def request_key(self, request: Request) -> Hashable:
        return requested_traits(request)

    def reject(self, ctx: Context, row: int) -> str | None:
        isolating_row = self._isolated(ctx.snapshot).by_row.get(row)
        if isolating_row is None:
            return None
        return _why(isolating_row, requested_traits(ctx.request))

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        isolated = self._isolated(ctx.snapshot)
        keep = np.ones(len(rows), dtype=np.bool_)
        if not len(isolated.rows):
            return keep
        requested = requested_traits(ctx.request)
        # only the rows in an isolating aggregate need a look, one by one
        for k in np.flatnonzero(np.isin(rows, isolated.rows)).tolist():
            keep[k] = _why(isolated.by_row[int(rows[k])], requested) is None
        return keep


def _why(isolating_row: tuple[str, frozenset[str]], requested: frozenset[str]) -> str | None:
    names, wanted = isolating_row
    missing = sorted(wanted - requested)
    if not missing:
        return None
    return f"aggregate {names} admits only requests requiring {', '.join(missing)}"


@dataclass(frozen=True, slots=True)
class _Isolated:
    by_row: dict[int, tuple[str, frozenset[str]]]
    """Row -> the names of its isolating aggregates (comma separated) and
    the traits they require together."""
    rows: IntArray
    """Those rows, ascending."""
