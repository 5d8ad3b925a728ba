"""Allocation candidates over provider trees and sharing providers, with
Placement's semantics: each request group is answered on its own, then the
groups' answers are combined per anchor (the root of the tree they serve).

- A granular group (a suffix) takes all its resources from one provider
  that has its traits and is in its aggregates itself.
- The unsuffixed group may take each class from a different provider of
  one tree, or from a sharing provider (``MISC_SHARES_VIA_AGGREGATE``) in
  an aggregate with a provider of that tree; the providers it takes from
  together have its required traits and none has a forbidden one; its
  ``member_of`` is met by each provider or by its anchor.
- Combined, the groups' amounts on a provider must fit its capacity and
  ``max_unit``; ``group_policy=isolate`` wants the granular groups on
  distinct providers; ``same_subtree`` wants the providers of the groups
  named all below one of them; ``root_required`` the anchors' own traits.

When no provider has a parent and none shares (``ProviderIndex.flat``),
each provider answers alone: the candidates are the providers that meet
every group, in creation order, found from the index's most selective set
(the providers of a trait, of an aggregate, with enough free of a class)
and no further than ``limit``. Otherwise every provider is considered.

Pure: it reads the providers it is given (the view's, with their usage),
nothing else. Capacity is checked again by the writer when an allocation
is written; candidates only propose."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial

from berth.placement_api.candidate_index import SHARING, ProviderIndex
from berth.placement_api.candidate_query import Group, Query
from berth.placement_api.filters import has_room
from berth.placement_api.reads import Provider

__all__ = ["SHARING", "AllocationRequest", "search"]

Allows = Callable[[list[str]], set[str]]
"""Which of these providers another judge (Berth's engine) lets through."""

SELECTIVE = 8
"""A set this many times smaller than all the providers is read on its
own, sorted; a larger one is met walking the providers in order."""


@dataclass(frozen=True)
class AllocationRequest:
    """(provider, class) -> amount, and which providers serve each group."""

    anchor: str
    amounts: tuple[tuple[str, str, int], ...]
    mappings: tuple[tuple[str, frozenset[str]], ...]
    same_provider: bool = False

    def key(self) -> tuple[frozenset[tuple[str, str, int]], tuple[tuple[str, frozenset[str]], ...]]:
        return frozenset(self.amounts), self.mappings


@dataclass
class Tree:
    """The providers as trees: by uuid, their ancestors, the sharing ones."""

    by_uuid: dict[str, Provider]
    position: dict[str, int]
    has_trees: bool = False
    sharing: list[Provider] = field(default_factory=list)

    @classmethod
    def of(cls, providers: list[Provider]) -> Tree:
        tree = cls({p.uuid: p for p in providers}, {p.uuid: i for i, p in enumerate(providers)})
        tree.has_trees = any(p.parent is not None for p in providers)
        tree.sharing = [p for p in providers if SHARING in p.traits]
        return tree

    def anchors(self, sharing: Provider) -> list[str]:
        """The roots of the providers that share an aggregate with ``sharing``."""
        aggregates = set(sharing.aggregates)
        return sorted(
            {p.root for p in self.by_uuid.values() if aggregates & set(p.aggregates)},
            key=self._order,
        )

    def ancestors(self, uuid: str) -> set[str]:
        found = {uuid}
        parent = self.by_uuid[uuid].parent
        while parent is not None:
            found.add(parent)
            parent = self.by_uuid[parent].parent
        return found

    def _order(self, uuid: str) -> int:
        """Creation order: answers come out in an order that does not vary."""
        return self.position[uuid]


def search(
    found: list[Provider] | ProviderIndex,
    query: Query,
    nested_aware: bool,
    allows: Allows | None = None,
) -> tuple[list[AllocationRequest], list[Provider]]:
    """The allocation requests that meet ``query`` and the providers to
    summarise. ``allows``, given, further judges the providers of a query
    of one unsuffixed group on flat providers (Berth's engine does)."""
    index = found if isinstance(found, ProviderIndex) else ProviderIndex.of(found)
    if index.flat:
        return _flat(index, query, allows)
    return _search(index.providers(), query, nested_aware)


def _search(
    providers: list[Provider], query: Query, nested_aware: bool
) -> tuple[list[AllocationRequest], list[Provider]]:
    tree = Tree.of(providers)
    anchors = _anchor_roots(providers, query)
    if anchors is not None and not anchors:
        return [], []
    answers: dict[str, list[AllocationRequest]] = {}
    for suffix, group in query.groups.items():
        found = _group(tree, group, anchors)
        if not found:
            return [], []
        answers[suffix] = found
    # in creation order the first ``limit`` merged are the answer, unless
    # some are to be dropped after (nesting hidden before 1.29)
    hides_nesting = not nested_aware and tree.has_trees
    requests = _merge(tree, query, answers, None if hides_nesting else query.limit)
    roots = {tree.by_uuid[uuid].root for r in requests for uuid, _, _ in r.amounts}
    summarised = [p for p in providers if p.root in roots]
    if hides_nesting:
        requests, summarised = _without_nesting(tree, requests)
    if query.limit is not None and query.limit < len(requests):
        requests = requests[: query.limit]
        roots = {tree.by_uuid[uuid].root for r in requests for uuid, _, _ in r.amounts}
        summarised = [p for p in summarised if p.root in roots]
    return requests, summarised


def _anchor_roots(providers: list[Provider], query: Query) -> set[str] | None:
    if not (query.root_required or query.root_forbidden):
        return None
    return {
        p.uuid
        for p in providers
        if p.parent is None
        and query.root_required <= set(p.traits)
        and not query.root_forbidden & set(p.traits)
    }


def _in(anchors: set[str] | None, root: str) -> bool:
    return anchors is None or root in anchors


def _in_aggregates(p: Provider, member_of: list[set[str]]) -> bool:
    aggregates = set(p.aggregates)
    return all(aggregates & any_of for any_of in member_of)


def _with_room(tree: Tree, group: Group, rc: str, amount: int) -> dict[str, Provider]:
    """The providers (by uuid, in order) where ``amount`` of ``rc`` fits."""
    root: str | None = None
    if group.in_tree is not None:
        root = tree.by_uuid[group.in_tree].root
    return {
        p.uuid: p
        for p in tree.by_uuid.values()
        if has_room(p, {rc: amount}) and (root is None or p.root == root)
    }


def _group(tree: Tree, group: Group, anchors: set[str] | None) -> list[AllocationRequest]:
    if group.in_tree is not None and group.in_tree not in tree.by_uuid:
        return []
    wanted = group.wanted
    if wanted.member_of and not any(
        _in_aggregates(p, wanted.member_of) for p in tree.by_uuid.values()
    ):
        return []
    with_room = {rc: _with_room(tree, group, rc, n) for rc, n in wanted.resources.items()}
    if any(not found for found in with_room.values()):
        return []
    if not group.same_provider and (tree.sharing or tree.has_trees):
        return _several_providers(tree, group, anchors, with_room)
    return _one_provider(tree, group, anchors, with_room)


def _one_provider(
    tree: Tree, group: Group, anchors: set[str] | None, with_room: dict[str, dict[str, Provider]]
) -> list[AllocationRequest]:
    """Each provider that meets the whole group alone, once per anchor."""
    wanted = group.wanted
    filtered = wanted.required or wanted.member_of
    chosen = [
        p
        for p in tree.by_uuid.values()
        if all(set(p.traits) & any_of for any_of in wanted.required)
        and _in_aggregates(p, wanted.member_of)
        and not set(p.aggregates) & wanted.not_member_of
        and not set(p.traits) & wanted.forbidden
        and all(p.uuid in found for found in with_room.values())
    ]
    if not wanted.resources and not filtered:
        # as Placement: a group of no resources and no filter names nobody
        chosen = []
    found: list[AllocationRequest] = []
    for p in chosen:
        amounts = tuple((p.uuid, rc, n) for rc, n in wanted.resources.items())
        mappings = ((group.suffix, frozenset({p.uuid})),)
        roots = [p.root] if _in(anchors, p.root) else []
        if SHARING in p.traits:
            roots += [a for a in tree.anchors(p) if a != p.root and _in(anchors, a)]
        found += [AllocationRequest(root, amounts, mappings, group.same_provider) for root in roots]
    return found


def _several_providers(
    tree: Tree, group: Group, anchors: set[str] | None, with_room: dict[str, dict[str, Provider]]
) -> list[AllocationRequest]:
    """Per anchor, one provider per class: of the anchor's tree, or sharing."""
    wanted = group.wanted
    if wanted.required:
        named = set().union(*wanted.required)
        if not any(named & set(p.traits) for p in tree.by_uuid.values()):
            return []
    in_aggregates = {p.uuid for p in tree.by_uuid.values() if _in_aggregates(p, wanted.member_of)}
    bad = {p.uuid for p in tree.by_uuid.values() if set(p.aggregates) & wanted.not_member_of}
    by_anchor: dict[str, dict[str, list[str]]] = {}
    common: set[str] | None = None
    for rc, providers in with_room.items():
        pairs = {(p.uuid, p.root) for p in providers.values()}
        for sharing in tree.sharing:
            if (
                group.in_tree is None
                and sharing.uuid in providers
                and (not wanted.member_of or sharing.uuid in in_aggregates)
            ):
                pairs |= {(sharing.uuid, anchor) for anchor in tree.anchors(sharing)}
        pairs = {
            (uuid, anchor)
            for uuid, anchor in pairs
            if _in(anchors, anchor)
            and (not wanted.member_of or {uuid, anchor} & in_aggregates)
            and not {uuid, anchor} & bad
        }
        if not pairs:
            return []
        for uuid, anchor in sorted(pairs, key=lambda pair: tree._order(pair[0])):
            by_anchor.setdefault(anchor, {}).setdefault(rc, []).append(uuid)
        found_anchors = {anchor for _, anchor in pairs}
        common = found_anchors if common is None else common & found_anchors
    found: list[AllocationRequest] = []
    for anchor in sorted(common or (), key=tree._order):
        per_class = by_anchor[anchor]
        classes = list(wanted.resources)
        for chosen in itertools.product(*(per_class[rc] for rc in classes)):
            if not _traits_met(tree, set(chosen), group):
                continue
            amounts = tuple(
                (uuid, rc, wanted.resources[rc]) for uuid, rc in zip(chosen, classes, strict=True)
            )
            mappings = ((group.suffix, frozenset(chosen)),)
            found.append(AllocationRequest(anchor, amounts, mappings))
    return found


def _traits_met(tree: Tree, chosen: set[str], group: Group) -> bool:
    traits: set[str] = set()
    for uuid in chosen:
        own = set(tree.by_uuid[uuid].traits)
        if own & group.wanted.forbidden:
            return False
        traits |= own
    return all(traits & any_of for any_of in group.wanted.required)


def _merge(
    tree: Tree, query: Query, answers: dict[str, list[AllocationRequest]], enough: int | None
) -> list[AllocationRequest]:
    """Every combination of one answer per group on one anchor that keeps
    the group policy, the same subtrees and the providers' capacity (the
    first ``enough`` of them, when given)."""
    by_anchor: dict[str, dict[str, list[AllocationRequest]]] = {}
    for suffix, found in answers.items():
        for request in found:
            by_anchor.setdefault(request.anchor, {}).setdefault(suffix, []).append(request)
    granular = len([s for s in answers if s])
    merged: dict[object, AllocationRequest] = {}
    for anchor in sorted(by_anchor, key=tree._order):
        per_group = by_anchor[anchor]
        if set(per_group) != set(answers):
            continue
        for combination in itertools.product(*(per_group[s] for s in answers)):
            if query.group_policy == "isolate" and not _isolated(combination, granular):
                continue
            if not all(_same_subtree(tree, combination, s) for s in query.same_subtrees):
                continue
            request = _consolidate(anchor, combination)
            if _exceeds(tree.by_uuid, request):
                continue
            merged.setdefault(request.key(), request)
            if enough is not None and len(merged) >= enough:
                return list(merged.values())
    return list(merged.values())


def _isolated(combination: Iterable[AllocationRequest], granular: int) -> bool:
    used: set[str] = set()
    for request in combination:
        if request.same_provider:
            used |= request.mappings[0][1]
    return len(used) == granular


def _same_subtree(tree: Tree, combination: Iterable[AllocationRequest], suffixes: set[str]) -> bool:
    uuids: set[str] = set()
    for request in combination:
        for suffix, providers in request.mappings:
            if suffix in suffixes:
                uuids |= providers
    if len(uuids) <= 1:
        return True
    common = set.intersection(*(tree.ancestors(uuid) for uuid in uuids))
    return bool(common & uuids)


def _consolidate(anchor: str, combination: Iterable[AllocationRequest]) -> AllocationRequest:
    amounts: dict[tuple[str, str], int] = {}
    mappings: dict[str, set[str]] = {}
    for request in combination:
        for uuid, rc, n in request.amounts:
            amounts[uuid, rc] = amounts.get((uuid, rc), 0) + n
        for suffix, providers in request.mappings:
            mappings.setdefault(suffix, set()).update(providers)
    return AllocationRequest(
        anchor,
        tuple((uuid, rc, n) for (uuid, rc), n in amounts.items()),
        tuple((s, frozenset(p)) for s, p in sorted(mappings.items())),
    )


def _exceeds(by_uuid: Mapping[str, Provider], request: AllocationRequest) -> bool:
    for uuid, rc, amount in request.amounts:
        p = by_uuid[uuid]
        inv = p.inventories[rc]
        capacity = int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])
        if p.usage.get(rc, 0) + amount > capacity or amount > inv["max_unit"]:
            return True
    return False


def _without_nesting(
    tree: Tree, requests: list[AllocationRequest]
) -> tuple[list[AllocationRequest], list[Provider]]:
    """Before 1.29 a client cannot read trees: only requests that take from
    one provider per tree, and summaries of those providers alone."""
    kept = []
    used: set[str] = set()
    for request in requests:
        uuids = {uuid for uuid, _, _ in request.amounts}
        if len(uuids) == len({tree.by_uuid[u].root for u in uuids}):
            kept.append(request)
            used |= uuids
    return kept, [p for p in tree.by_uuid.values() if p.uuid in used]


def _flat(
    index: ProviderIndex, query: Query, allows: Allows | None
) -> tuple[list[AllocationRequest], list[Provider]]:
    """Each provider its own tree, none sharing: a candidate is one provider
    that meets every group, their amounts together, and the root traits;
    the first ``limit`` in creation order."""
    groups = list(query.groups.values())
    for group in groups:
        wanted = group.wanted
        if not wanted.resources and not (wanted.required or wanted.member_of):
            return [], []  # as Placement: a group of no resources and no filter names nobody
        if group.in_tree is not None and group.in_tree not in index.by_uuid:
            return [], []
    granular = len([s for s in query.groups if s])
    if query.group_policy == "isolate" and granular > 1:
        return [], []  # granular groups on distinct providers of a one-provider tree
    if allows is not None and not (
        len(groups) == 1 and groups[0].suffix == "" and groups[0].in_tree is None
    ):
        allows = None  # the engine judges one unsuffixed group, anywhere
    requests: list[AllocationRequest] = []
    chosen: list[Provider] = []
    pending: list[tuple[Provider, AllocationRequest]] = []
    limit = query.limit

    def judge() -> None:
        if not pending:
            return
        let_through = allows([p.uuid for p, _ in pending]) if allows is not None else None
        for p, request in pending:
            if limit is not None and len(requests) >= limit:
                break
            if let_through is None or p.uuid in let_through:
                requests.append(request)
                if request.amounts:  # summarised: the trees the requests take from
                    chosen.append(p)
        pending.clear()

    for p in _drawn(index, query):
        if not _meets(index, query, p):
            continue
        request = _consolidate(
            p.uuid,
            (
                AllocationRequest(
                    p.uuid,
                    tuple((p.uuid, rc, n) for rc, n in group.wanted.resources.items()),
                    ((group.suffix, frozenset({p.uuid})),),
                    group.same_provider,
                )
                for group in groups
            ),
        )
        if _exceeds(index.by_uuid, request):
            continue
        pending.append((p, request))
        if limit is not None and len(requests) + len(pending) >= limit:
            judge()
            if len(requests) >= limit:
                break
    judge()
    return requests, chosen


def _drawn(index: ProviderIndex, query: Query) -> Iterator[Provider]:
    """The providers a candidate may be, in creation order: the smallest of
    the sets the query names, when it is small; otherwise every provider."""
    sets: list[tuple[int, Callable[[], Iterable[str]]]] = []

    def union(named: dict[str, set[str]], names: set[str]) -> None:
        members = [named.get(name, set()) for name in names]
        sets.append((sum(len(m) for m in members), partial(set[str]().union, *members)))

    def free(rc: str, n: int) -> list[str]:
        return [uuid for _, _, uuid in index.with_free(rc, n)]

    for trait in query.root_required:
        union(index.by_trait, {trait})
    for group in query.groups.values():
        wanted = group.wanted
        if group.in_tree is not None and wanted.resources:
            sets.append((1, partial(list[str], [index.by_uuid[group.in_tree].root])))
        for any_of in wanted.required:
            union(index.by_trait, any_of)
        for any_of in wanted.member_of:
            union(index.by_aggregate, any_of)
        for rc, n in wanted.resources.items():
            sets.append((index.count_free(rc, n), partial(free, rc, n)))
    if sets:
        size, members = min(sets, key=lambda s: s[0])
        if size * SELECTIVE < len(index):
            for uuid in index.in_order(set(members())):
                yield index.by_uuid[uuid]
            return
    yield from index.walk()


def _meets(index: ProviderIndex, query: Query, p: Provider) -> bool:
    """Whether ``p`` alone meets every group of ``query`` and is a root it takes."""
    traits = set(p.traits)
    if not query.root_required <= traits or query.root_forbidden & traits:
        return False
    aggregates = set(p.aggregates)
    for group in query.groups.values():
        wanted = group.wanted
        # in_tree restricts where a group's resources come from (a group of
        # none is not held to it: the other groups place the candidate)
        if (
            group.in_tree is not None
            and wanted.resources
            and index.by_uuid[group.in_tree].root != p.root
        ):
            return False
        if (
            traits & wanted.forbidden
            or aggregates & wanted.not_member_of
            or not all(traits & any_of for any_of in wanted.required)
            or not all(aggregates & any_of for any_of in wanted.member_of)
            or not all(has_room(p, {rc: n}) for rc, n in wanted.resources.items())
        ):
            return False
    return True
