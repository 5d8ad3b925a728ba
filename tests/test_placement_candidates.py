"""Allocation candidates' search on its own (pure, on providers as the view
reads them): scenario tables for trees, sharing providers, granular groups
and the request-wide rules, each checked against what Placement answers;
and the index's answer for flat providers against every provider read."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from berth.placement_api import candidate_search
from berth.placement_api.candidate_index import ProviderIndex
from berth.placement_api.candidate_query import Group, Query
from berth.placement_api.candidate_search import search
from berth.placement_api.filters import Wanted
from berth.placement_api.reads import Provider


def _inv(total: int, **fields: Any) -> dict[str, Any]:
    return {
        "total": total,
        "reserved": 0,
        "allocation_ratio": 1.0,
        "min_unit": 1,
        "max_unit": total,
        "step_size": 1,
        **fields,
    }


def _rp(
    uuid: str,
    parent: str | None = None,
    root: str | None = None,
    traits: tuple[str, ...] = (),
    aggregates: tuple[str, ...] = (),
    usage: dict[str, int] | None = None,
    **inventories: dict[str, Any],
) -> Provider:
    return Provider(
        uuid,
        uuid,
        0,
        parent,
        root or uuid,
        list(traits),
        list(aggregates),
        dict(inventories),
        0,
        0,
        dict(usage or {}),
    )


def _query(*groups: Group, limit: int | None = None, policy: str | None = None) -> Query:
    return Query(groups={g.suffix: g for g in groups}, limit=limit, group_policy=policy)


def _group(suffix: str = "", **resources: int) -> Group:
    return Group(suffix, Wanted(resources=resources))


def _allocations(found: list[Any]) -> list[set[tuple[str, str, int]]]:
    return [set(r.amounts) for r in found]


# cn1 (VCPU) with two NUMA children (VCPU); ss shares DISK_GB with cn1 by aggregate A
TREE = [
    _rp("cn1", aggregates=("A",), VCPU=_inv(8)),
    _rp("numa1", "cn1", "cn1", VCPU=_inv(4)),
    _rp("numa2", "cn1", "cn1", VCPU=_inv(4), usage={"VCPU": 3}),
    _rp("ss", traits=("MISC_SHARES_VIA_AGGREGATE",), aggregates=("A",), DISK_GB=_inv(100)),
]


def test_the_unsuffixed_group_takes_each_class_from_the_tree_or_a_sharing_provider() -> None:
    found, summaries = search(TREE, _query(_group(VCPU=2, DISK_GB=10)), nested_aware=True)
    assert _allocations(found) == [
        {("cn1", "VCPU", 2), ("ss", "DISK_GB", 10)},
        {("numa1", "VCPU", 2), ("ss", "DISK_GB", 10)},
    ]  # numa2 has 1 VCPU left
    assert [p.uuid for p in summaries] == ["cn1", "numa1", "numa2", "ss"]


def test_before_1_29_a_request_takes_one_provider_per_tree() -> None:
    memory = [*TREE[:1], _rp("numa1", "cn1", "cn1", VCPU=_inv(4), MEMORY_MB=_inv(512))]
    query = _query(_group(VCPU=2, MEMORY_MB=256))
    nested, _ = search(memory, query, nested_aware=True)
    assert _allocations(nested) == [
        {("cn1", "VCPU", 2), ("numa1", "MEMORY_MB", 256)},
        {("numa1", "VCPU", 2), ("numa1", "MEMORY_MB", 256)},
    ]
    found, summaries = search(memory, query, nested_aware=False)
    assert _allocations(found) == [{("numa1", "VCPU", 2), ("numa1", "MEMORY_MB", 256)}]
    assert [p.uuid for p in summaries] == ["numa1"]


def test_isolate_puts_granular_groups_on_distinct_providers() -> None:
    groups = (_group("1", VCPU=1), _group("2", VCPU=1))
    isolated, _ = search(TREE, _query(*groups, policy="isolate"), nested_aware=True)
    shared, _ = search(TREE, _query(*groups, policy="none"), nested_aware=True)
    assert all(len({u for u, _, _ in r.amounts}) == 2 for r in isolated)
    assert {("numa2", "VCPU", 2)} not in _allocations(shared)  # only 1 VCPU left there
    assert {("cn1", "VCPU", 2)} in _allocations(shared)
    # each group on its own provider of cn1's tree, in both orders (the
    # mappings differ, so Placement counts them apart too)
    assert len(isolated) == 6


def test_the_combined_amount_must_fit_one_provider() -> None:
    groups = (_group("1", VCPU=3), _group("2", VCPU=3))
    found, _ = search(TREE, _query(*groups, policy="none"), nested_aware=True)
    assert {("numa1", "VCPU", 6)} not in _allocations(found)
    assert {("cn1", "VCPU", 6)} in _allocations(found)


def test_limit_keeps_the_first_and_summarises_their_trees_only() -> None:
    flat = [_rp(f"cn{i}", VCPU=_inv(4)) for i in range(5)]
    found, summaries = search(flat, _query(_group(VCPU=1), limit=2), nested_aware=True)
    assert _allocations(found) == [{("cn0", "VCPU", 1)}, {("cn1", "VCPU", 1)}]
    assert [p.uuid for p in summaries] == ["cn0", "cn1"]


TRAITS = ("HW_A", "HW_B", "HW_C")
AGGREGATES = ("agg1", "agg2")
CLASSES = ("VCPU", "DISK_GB")


@st.composite
def flat_providers(draw: st.DrawFn) -> list[Provider]:
    """Providers of no trees and no sharing, some full, odd unit rules."""
    found = []
    for i in range(draw(st.integers(0, 8))):
        inventories = {}
        usage = {}
        for rc in draw(st.sets(st.sampled_from(CLASSES))):
            total = draw(st.integers(1, 8))
            inventories[rc] = _inv(
                total,
                reserved=draw(st.integers(0, 1)),
                max_unit=draw(st.integers(1, total)),
                step_size=draw(st.sampled_from([1, 2])),
                allocation_ratio=draw(st.sampled_from([1.0, 1.5])),
            )
            usage[rc] = draw(st.integers(0, total))
        traits = sorted(draw(st.sets(st.sampled_from(TRAITS))))
        aggregates = sorted(draw(st.sets(st.sampled_from(AGGREGATES))))
        found.append(
            Provider(
                f"p{i}", f"p{i}", 0, None, f"p{i}", traits, aggregates, inventories, 0, 0, usage
            )
        )
    return found


@st.composite
def queries(draw: st.DrawFn, names: list[str]) -> Query:
    groups = []
    for suffix in draw(st.lists(st.sampled_from(["", "1", "2"]), min_size=1, unique=True)):
        wanted = Wanted(
            resources=draw(st.dictionaries(st.sampled_from(CLASSES), st.integers(1, 4))),
            required=draw(st.lists(st.sets(st.sampled_from(TRAITS), min_size=1), max_size=2)),
            forbidden=draw(st.sets(st.sampled_from(TRAITS), max_size=1)),
            member_of=draw(st.lists(st.sets(st.sampled_from(AGGREGATES), min_size=1), max_size=1)),
            not_member_of=draw(st.sets(st.sampled_from(AGGREGATES), max_size=1)),
        )
        in_tree = draw(st.sampled_from([None, *names[:2], "absent"]))
        groups.append(Group(suffix, wanted, in_tree))
    query = _query(
        *groups,
        limit=draw(st.sampled_from([None, 1, 2])),
        policy=draw(st.sampled_from([None, "none", "isolate"])),
    )
    query.root_required = draw(st.sets(st.sampled_from(TRAITS), max_size=1))
    query.root_forbidden = draw(st.sets(st.sampled_from(TRAITS), max_size=1)) - query.root_required
    return query


@given(st.data(), flat_providers(), st.sampled_from([1, 8]))
@settings(max_examples=400, deadline=None)
def test_the_index_answers_flat_providers_as_every_provider_read_does(
    data: st.DataObject, providers: list[Provider], selective: int
) -> None:
    """With no trees and no sharing, the index's walk (from its most
    selective set, stopping at the limit) gives the general search's answer."""
    query = data.draw(queries([p.uuid for p in providers]))
    saved = candidate_search.SELECTIVE
    candidate_search.SELECTIVE = selective  # 1: read a set whenever it is the smaller
    try:
        indexed = search(providers, query, nested_aware=True)
    finally:
        candidate_search.SELECTIVE = saved
    scanned = candidate_search._search(providers, query, nested_aware=True)
    assert indexed[0] == scanned[0]
    assert [p.uuid for p in indexed[1]] == [p.uuid for p in scanned[1]]


@given(flat_providers(), st.lists(st.tuples(st.integers(0, 7), st.booleans())))
@settings(max_examples=200, deadline=None)
def test_an_index_changed_provider_by_provider_is_the_index_built_anew(
    providers: list[Provider], changes: list[tuple[int, bool]]
) -> None:
    index = ProviderIndex.of(providers)
    present = {p.uuid: p for p in providers}
    for i, removed in changes:
        if not providers:
            break
        p = providers[i % len(providers)]
        if removed:
            index.remove(p.uuid)
            present.pop(p.uuid, None)
        else:
            used = dataclasses.replace(p, usage={rc: 0 for rc in p.inventories})
            index.put(used, (providers.index(p), p.uuid))
            present[p.uuid] = used
    anew = ProviderIndex()
    for position, q in enumerate(providers):
        if q.uuid in present:
            anew.put(present[q.uuid], (position, q.uuid))
    assert index.providers() == anew.providers()
    assert index.by_class == anew.by_class
    assert index.by_trait == anew.by_trait
    assert index.by_aggregate == anew.by_aggregate
    assert index.trees == anew.trees
