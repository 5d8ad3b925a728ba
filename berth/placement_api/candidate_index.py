"""The providers of Placement's model as allocation candidates are found
from them: in creation order, and indexed by what a request group asks
(per resource class the providers ordered by free capacity, the members
of each trait and aggregate, the providers of each tree, the sharing
ones), so a request is answered from its most selective set rather than
by reading every provider.

``ProviderIndex`` is the structure (pure: built from providers, changed
provider by provider); ``LiveIndex`` keeps one current with the view,
re-reading only the providers that changed since it last looked: the
``placement_providers`` rows and the usage of the Berth providers whose
``updated_offset`` moved past the offsets it had seen."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, or_, select

from berth.placement_api.reads import Provider, provider_rows
from projections.view.engine import read_one_snapshot
from projections.view.loader import committed_offsets
from projections.view.tables import (
    inventories,
    placement_providers,
    provider_usage,
)

SHARING = "MISC_SHARES_VIA_AGGREGATE"

Order = tuple[int, str]
"""Where a provider comes in creation order: (created, uuid), or (position, uuid)."""


def capacity(inv: dict[str, Any]) -> int:
    """What an inventory holds for allocations, as Placement counts it."""
    return int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])


class ProviderIndex:
    """Providers by uuid, in creation order, and the sets a request group
    picks them from. Changed only through :meth:`put` and :meth:`remove`."""

    def __init__(self) -> None:
        self.by_uuid: dict[str, Provider] = {}
        self.order: dict[str, Order] = {}
        self.ordered: list[tuple[Order, str]] = []
        self.by_class: dict[str, list[tuple[int, Order, str]]] = {}
        """Resource class -> (free capacity, order, uuid) of the providers
        with an inventory of it, ascending."""
        self.by_trait: dict[str, set[str]] = {}
        self.by_aggregate: dict[str, set[str]] = {}
        self.trees: dict[str, set[str]] = {}
        """Root -> the providers of its tree."""
        self.sharing: set[str] = set()
        self.children = 0
        """How many providers have a parent."""

    @classmethod
    def of(cls, found: Iterable[Provider]) -> ProviderIndex:
        """``found`` indexed in the order given."""
        index = cls()
        for position, p in enumerate(found):
            index.put(p, (position, p.uuid))
        return index

    def __len__(self) -> int:
        return len(self.by_uuid)

    @property
    def flat(self) -> bool:
        """No trees and no sharing providers: each provider answers alone."""
        return self.children == 0 and not self.sharing

    def providers(self) -> list[Provider]:
        return [self.by_uuid[uuid] for _, uuid in self.ordered]

    def in_order(self, uuids: Iterable[str]) -> list[str]:
        return sorted(uuids, key=self.order.__getitem__)

    def walk(self) -> Iterator[Provider]:
        """Every provider in creation order, read as it goes."""
        for _, uuid in self.ordered:
            yield self.by_uuid[uuid]

    def free(self, p: Provider, rc: str) -> int:
        return capacity(p.inventories[rc]) - p.usage.get(rc, 0)

    def with_free(self, rc: str, amount: int) -> list[tuple[int, Order, str]]:
        """The providers of ``rc`` with at least ``amount`` free (unit rules unchecked)."""
        entries = self.by_class.get(rc, [])
        return entries[bisect.bisect_left(entries, (amount,)) :]

    def count_free(self, rc: str, amount: int) -> int:
        entries = self.by_class.get(rc, [])
        return len(entries) - bisect.bisect_left(entries, (amount,))

    def put(self, p: Provider, order: Order) -> None:
        """Add ``p``, or replace the provider of its uuid."""
        if p.uuid in self.by_uuid:
            self.remove(p.uuid)
        self.by_uuid[p.uuid] = p
        self.order[p.uuid] = order
        bisect.insort(self.ordered, (order, p.uuid))
        for rc in p.inventories:
            bisect.insort(self.by_class.setdefault(rc, []), (self.free(p, rc), order, p.uuid))
        for trait in p.traits:
            self.by_trait.setdefault(trait, set()).add(p.uuid)
        for aggregate in p.aggregates:
            self.by_aggregate.setdefault(aggregate, set()).add(p.uuid)
        self.trees.setdefault(p.root, set()).add(p.uuid)
        if SHARING in p.traits:
            self.sharing.add(p.uuid)
        if p.parent is not None:
            self.children += 1

    def remove(self, uuid: str) -> None:
        p = self.by_uuid.pop(uuid, None)
        if p is None:
            return
        order = self.order.pop(uuid)
        _discard(self.ordered, (order, uuid))
        for rc in p.inventories:
            entries = self.by_class[rc]
            _discard(entries, (self.free(p, rc), order, uuid))
            if not entries:
                del self.by_class[rc]
        for trait in p.traits:
            _drop(self.by_trait, trait, uuid)
        for aggregate in p.aggregates:
            _drop(self.by_aggregate, aggregate, uuid)
        _drop(self.trees, p.root, uuid)
        self.sharing.discard(uuid)
        if p.parent is not None:
            self.children -= 1


def _discard(entries: list[Any], entry: Any) -> None:
    at = bisect.bisect_left(entries, entry)
    if at < len(entries) and entries[at] == entry:
        del entries[at]


def _drop(sets: dict[str, set[str]], name: str, uuid: str) -> None:
    members = sets.get(name)
    if members is not None:
        members.discard(uuid)
        if not members:
            del sets[name]


class LiveIndex:
    """A :class:`ProviderIndex` of the view's providers kept current: each
    call reads the partitions' committed offsets and, where they moved,
    only the providers written since (their Placement rows, their usage);
    everything again when providers went away. Not thread-safe: the
    caller serialises calls and the reads of what they return."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.index: ProviderIndex | None = None
        self.seen: dict[int, int] = {}

    def __call__(self) -> ProviderIndex:
        with self.engine.connect() as conn:
            # the offsets describe exactly the rows read with them
            read_one_snapshot(conn)
            offsets = committed_offsets(conn)
            if self.index is None:
                return self._full(conn, offsets)
            moved = [p for p, o in offsets.items() if o != self.seen.get(p)]
            if not moved:
                return self.index
            if not self._update(conn, moved):
                return self._full(conn, offsets)
        self.seen = offsets
        return self.index

    def _full(self, conn: Connection, offsets: dict[int, int]) -> ProviderIndex:
        index = ProviderIndex()
        for p in provider_rows(conn):
            index.put(p, (p.created_ms, p.uuid))
        self.index, self.seen = index, offsets
        return index

    def _update(self, conn: Connection, moved: list[int]) -> bool:
        """Bring the index up to date with the partitions ``moved``; False
        when only reading everything again can (a provider went away)."""
        assert self.index is not None
        index = self.index
        pp = placement_providers.c
        since = or_(
            *(and_(pp.partition == p, pp.updated_offset > self.seen.get(p, -1)) for p in moved)
        )
        changed = {p.uuid: p for p in provider_rows(conn, since)}
        u = provider_usage.c
        # provider_usage's own partition: the (partition, updated_offset)
        # index gives the rows changed, not every row of the partitions
        used = conn.execute(
            select(u.provider_id).where(
                or_(
                    *(
                        and_(u.partition == p, u.updated_offset > self.seen.get(p, -1))
                        for p in moved
                    )
                )
            )
        ).scalars()
        for uuid in used:
            if uuid in changed:
                continue
            current = index.by_uuid.get(uuid)
            if current is not None:
                changed[uuid] = _with_usage(current, {})
        usage = _usage(conn, sorted(changed))
        for uuid in sorted(changed):
            p = changed[uuid]
            p.usage = usage.get(uuid, {})
            index.put(p, (p.created_ms, p.uuid))
        total = conn.execute(select(func.count()).select_from(placement_providers)).scalar_one()
        return int(total) == len(index)


def _with_usage(p: Provider, usage: dict[str, int]) -> Provider:
    return Provider(
        p.uuid,
        p.name,
        p.generation,
        p.parent,
        p.root,
        p.traits,
        p.aggregates,
        p.inventories,
        p.created_ms,
        p.updated_ms,
        usage,
    )


def _usage(conn: Connection, uuids: list[str]) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    i = inventories.c
    for start in range(0, len(uuids), 500):
        rows = conn.execute(
            select(i.provider_id, i.resource_class, i.held, i.consumed).where(
                i.provider_id.in_(uuids[start : start + 500])
            )
        )
        for pid, rc, held, consumed in rows:
            found.setdefault(pid, {})[rc] = int(held) + int(consumed)
    return found
