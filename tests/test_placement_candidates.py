"""Allocation candidates' search on its own (pure, on providers as the view
reads them): scenario tables for trees, sharing providers, granular groups
and the request-wide rules, each checked against what Placement answers."""

from __future__ import annotations

from typing import Any

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
