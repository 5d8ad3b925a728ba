"""The weighers and Nova's weight handler: every weigher's raw values and edge
cases, per-aggregate multipliers, and normalize / weigh_all against tables
worked out by hand from Nova's rules."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.filters.base import Context
from scheduling.model import (
    Aggregate,
    FloatArray,
    GroupPolicy,
    IntArray,
    Provider,
    Request,
    Snapshot,
    TagRules,
)
from scheduling.weighers.affinity import (
    ServerGroupSoftAffinityWeigher,
    ServerGroupSoftAntiAffinityWeigher,
)
from scheduling.weighers.base import Weigher, normalize
from scheduling.weighers.build_failure import BuildFailureWeigher
from scheduling.weighers.combine import weigh_all
from scheduling.weighers.cpu import CPUWeigher
from scheduling.weighers.disk import DiskWeigher
from scheduling.weighers.hypervisor_version import HypervisorVersionWeigher
from scheduling.weighers.io_ops import IoOpsWeigher
from scheduling.weighers.metrics import MetricNotFound, MetricsWeigher, parse_weight_setting
from scheduling.weighers.num_instances import NumInstancesWeigher
from scheduling.weighers.ram import RAMWeigher
from scheduling.weighers.tag_affinity import TagAffinityWeigher

Inventories = Mapping[str, Mapping[str, Mapping[str, Any]]]


# --- helpers -----------------------------------------------------------------


def snapshot(
    providers: Sequence[Provider],
    inventories: Inventories | None = None,
    aggregates: Sequence[Aggregate] = (),
) -> Snapshot:
    return Snapshot.build(
        providers, inventories or {}, {a.name: a for a in aggregates} if aggregates else None
    )


def context(snap: Snapshot, request: Request | None = None) -> Context:
    return Context.start(snap, request or Request("r", {}))


def rows(n: int) -> IntArray:
    return np.arange(n, dtype=np.int64)


def raw(weigher: Weigher, ctx: Context) -> list[float]:
    return [float(x) for x in weigher.weigh(ctx, rows(ctx.snapshot.size))]


def scores(weighers: Sequence[Weigher], ctx: Context) -> list[float]:
    return [float(x) for x in weigh_all(weighers, ctx, rows(ctx.snapshot.size))]


def pick(ctx: Context, row: int, resources: Mapping[str, int] | None = None) -> None:
    """What the engine does after choosing ``row`` for one instance."""
    for rc, amount in (resources or {}).items():
        column = ctx.snapshot.column(rc)
        assert column is not None
        ctx.used[row, column] += amount
    ctx.picked.append(row)


def memory(*free: tuple[int, int]) -> tuple[list[Provider], dict[str, dict[str, dict[str, int]]]]:
    """Providers p0.. with MEMORY_MB (total, used)."""
    providers = [Provider(f"p{i}") for i in range(len(free))]
    inventories = {
        f"p{i}": {"MEMORY_MB": {"total": total, "used": used}}
        for i, (total, used) in enumerate(free)
    }
    return providers, inventories


def in_aggregates(provider: Provider, *names: str) -> Provider:
    return replace(provider, aggregates=frozenset(names))


# --- the table of weighers ---------------------------------------------------


@pytest.mark.parametrize(
    ("weigher", "name", "key", "minval", "multiplier"),
    [
        (RAMWeigher(), "RAMWeigher", "ram_weight_multiplier", 0.0, 1.0),
        (CPUWeigher(), "CPUWeigher", "cpu_weight_multiplier", 0.0, 1.0),
        (DiskWeigher(), "DiskWeigher", "disk_weight_multiplier", 0.0, 1.0),
        (IoOpsWeigher(), "IoOpsWeigher", "io_ops_weight_multiplier", 0.0, -1.0),
        (
            NumInstancesWeigher(),
            "NumInstancesWeigher",
            "num_instances_weight_multiplier",
            None,
            0.0,
        ),
        (MetricsWeigher(), "MetricsWeigher", "metrics_weight_multiplier", None, 1.0),
        (
            ServerGroupSoftAffinityWeigher(),
            "ServerGroupSoftAffinityWeigher",
            "soft_affinity_weight_multiplier",
            None,
            1.0,
        ),
        (
            ServerGroupSoftAntiAffinityWeigher(),
            "ServerGroupSoftAntiAffinityWeigher",
            "soft_anti_affinity_weight_multiplier",
            None,
            1.0,
        ),
        (
            BuildFailureWeigher(),
            "BuildFailureWeigher",
            "build_failure_weight_multiplier",
            None,
            1e6,
        ),
        (
            HypervisorVersionWeigher(),
            "HypervisorVersionWeigher",
            "hypervisor_version_weight_multiplier",
            None,
            1.0,
        ),
        (TagAffinityWeigher(), "TagAffinityWeigher", "tag_affinity_weight_multiplier", None, 1.0),
    ],
)
def test_names_keys_bounds_and_nova_default_multipliers(
    weigher: Weigher, name: str, key: str, minval: float | None, multiplier: float
) -> None:
    assert weigher.name == name
    assert weigher.multiplier_key == key
    assert weigher.minval == minval
    assert weigher.maxval is None
    assert weigher.multiplier == multiplier


# --- normalize -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "minval", "maxval", "expected"),
    [
        ([1, 2, 3], None, None, [0.0, 0.5, 1.0]),
        ([3, 1, 2], None, None, [1.0, 0.0, 0.5]),
        ([5, 5, 5], None, None, [0.0, 0.0, 0.0]),  # empty range
        ([1000, 2000], 0, None, [0.5, 1.0]),  # anchored at 0, not at 1000
        ([5, 5, 5], 0, None, [1.0, 1.0, 1.0]),  # equal but not an empty range
        ([0, 0], 0, None, [0.0, 0.0]),
        ([-5, -3], 0, None, [0.0, 0.0]),  # both clamped to 0: empty range
        ([-10, 10, 30], 0, None, [0.0, 1 / 3, 1.0]),  # -10 clamped, range 0..30
        ([0, 50, 200], None, 100, [0.0, 0.5, 1.0]),  # 200 clamped to 100
        ([0, 50, 200], 0, 100, [0.0, 0.5, 1.0]),
        ([2, 4, 6], -2, None, [0.5, 0.75, 1.0]),
        ([7, 9], 3, 3, [0.0, 0.0]),
        ([-4.0, 0.0], None, None, [0.0, 1.0]),
    ],
)
def test_normalize_table(
    values: list[float], minval: float | None, maxval: float | None, expected: list[float]
) -> None:
    got = normalize(np.array(values, dtype=np.float64), minval, maxval)
    assert [float(x) for x in got] == pytest.approx(expected, abs=1e-12)


def test_normalize_of_nothing_is_nothing() -> None:
    assert len(normalize(np.array([], dtype=np.float64), 0.0)) == 0


def _nova_normalize(values: list[float], minval: float | None) -> list[float]:
    """Nova's weigh_objects clamp followed by its normalize, on plain lists."""
    if minval is not None:
        values = [max(v, minval) for v in values]
    low = min(values) if minval is None else minval
    high = max(values)
    if low == high:
        return [0.0] * len(values)
    return [(v - low) / (high - low) for v in values]


@given(
    st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=30),
    st.sampled_from([None, 0.0]),
)
def test_normalize_matches_novas_clamp_then_normalize(
    values: list[int], minval: float | None
) -> None:
    floats = [float(v) for v in values]
    got = [float(x) for x in normalize(np.array(floats), minval)]
    assert got == pytest.approx(_nova_normalize(floats, minval), abs=1e-12)
    assert all(0.0 <= x <= 1.0 for x in got)
    order = sorted(range(len(floats)), key=floats.__getitem__)
    assert all(got[a] <= got[b] for a, b in itertools.pairwise(order))


# --- per-aggregate multipliers --------------------------------------------------


def _agg_cluster(*metadata: Mapping[str, str]) -> Context:
    """p0 in every aggregate given, p1 in none."""
    aggregates = [Aggregate(f"a{i}", dict(m)) for i, m in enumerate(metadata)]
    providers = [Provider("p0", aggregates=frozenset(a.name for a in aggregates)), Provider("p1")]
    return context(snapshot(providers, aggregates=aggregates))


def _multipliers(weigher: Weigher, ctx: Context) -> list[float]:
    return [float(x) for x in weigher.multipliers(ctx, rows(ctx.snapshot.size))]


def test_no_aggregate_setting_means_the_configured_multiplier() -> None:
    assert _multipliers(RAMWeigher(3.0), _agg_cluster()) == [3.0, 3.0]
    assert _multipliers(RAMWeigher(3.0), _agg_cluster({"cpu_weight_multiplier": "9"})) == [3.0, 3.0]


def test_an_aggregate_overrides_the_multiplier_of_its_members_only() -> None:
    ctx = _agg_cluster({"ram_weight_multiplier": "2.5"})
    assert _multipliers(RAMWeigher(1.0), ctx) == [2.5, 1.0]


def test_several_aggregates_the_smallest_value_wins() -> None:
    ctx = _agg_cluster({"ram_weight_multiplier": "2"}, {"ram_weight_multiplier": "1.5"})
    assert _multipliers(RAMWeigher(1.0), ctx) == [1.5, 1.0]
    ctx = _agg_cluster({"ram_weight_multiplier": "3"}, {"ram_weight_multiplier": "-1"})
    assert _multipliers(RAMWeigher(1.0), ctx) == [-1.0, 1.0]


def test_an_invalid_value_falls_back_to_the_configured_multiplier(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = _agg_cluster({"ram_weight_multiplier": "lots"})
    with caplog.at_level(logging.WARNING):
        assert _multipliers(RAMWeigher(4.0), ctx) == [4.0, 4.0]
    assert "not a number" in caplog.text


def test_one_invalid_value_discards_the_valid_ones_too() -> None:
    # Nova casts the whole set of aggregate values at once; one ValueError
    # and the configured multiplier is used, not the min of the rest.
    ctx = _agg_cluster({"ram_weight_multiplier": "0.5"}, {"ram_weight_multiplier": "lots"})
    assert _multipliers(RAMWeigher(4.0), ctx) == [4.0, 4.0]


def test_aggregates_that_leave_every_provider_one_multiplier_make_it_uniform() -> None:
    # every provider in an aggregate that sets the same value: one multiplier,
    # weighed on the common path, to the same numbers as row by row
    both = [
        Aggregate("a", {"ram_weight_multiplier": "2.5"}),
        Aggregate("b", {"ram_weight_multiplier": "2.5"}),
    ]
    providers = [
        Provider("p0", aggregates=frozenset({"a"})),
        Provider("p1", aggregates=frozenset({"a", "b"})),
        Provider("p2", aggregates=frozenset({"b"})),
    ]
    inventories = {
        p.provider_id: {"MEMORY_MB": {"total": 4096, "used": used}}
        for p, used in zip(providers, (0, 1024, 3000), strict=True)
    }
    ctx = context(snapshot(providers, inventories, both))
    weigher = RAMWeigher(1.0)
    assert weigher.uniform_multiplier(ctx) == 2.5
    assert _multipliers(weigher, ctx) == [2.5, 2.5, 2.5]
    every = rows(3)
    by_row = weigher.multipliers(ctx, every) * normalize(weigher.weigh(ctx, every), 0.0)
    assert scores([weigher], ctx) == [float(x) for x in by_row]
    # one provider outside them keeps the configured 1.0: row by row again
    outside = context(snapshot([*providers, Provider("p3")], aggregates=both))
    assert RAMWeigher(1.0).uniform_multiplier(outside) is None
    # 0.0 and -0.0 are not one value (a product's sign differs)
    signs = [
        Aggregate("a", {"ram_weight_multiplier": "0.0"}),
        Aggregate("b", {"ram_weight_multiplier": "-0.0"}),
    ]
    split = context(snapshot(providers[:1] + providers[2:], aggregates=signs))
    assert RAMWeigher(1.0).uniform_multiplier(split) is None


def test_aggregates_the_snapshot_does_not_know_are_ignored() -> None:
    ctx = context(snapshot([Provider("p0", aggregates=frozenset({"ghost"})), Provider("p1")]))
    assert _multipliers(RAMWeigher(2.0), ctx) == [2.0, 2.0]


# --- weigh_all -------------------------------------------------------------------


def _three_providers(aggregates: Sequence[Aggregate] = ()) -> Context:
    """p0: 3072 MB free, 2 io ops, no failures.
    p1: 8192 MB free, 0 io ops, 1 failure.
    p2: overcommitted (-512 MB free), 4 io ops, no failures."""
    providers = [
        Provider("p0", num_io_ops=2),
        Provider("p1", build_failures=1, aggregates=frozenset(a.name for a in aggregates)),
        Provider("p2", num_io_ops=4),
    ]
    inventories = {
        "p0": {"MEMORY_MB": {"total": 4096, "used": 1024}},
        "p1": {"MEMORY_MB": {"total": 8192}},
        "p2": {"MEMORY_MB": {"total": 2048, "used": 2560}},
    }
    return context(snapshot(providers, inventories, aggregates))


def test_weigh_all_table() -> None:
    ctx = _three_providers()
    # RAM x1:          raw [3072, 8192, -512] -> clamp [3072, 8192, 0] -> /8192 [0.375, 1, 0]
    # IoOps x-1:       raw [2, 0, 4] -> /4 [0.5, 0, 1] -> [-0.5, 0, -1]
    # BuildFailure 10: raw [0, 1, 0] -> [0, 1, 0] -> x-10 [0, -10, 0]
    assert raw(RAMWeigher(), ctx) == [3072.0, 8192.0, -512.0]
    assert scores([RAMWeigher()], ctx) == [0.375, 1.0, 0.0]
    assert scores([IoOpsWeigher()], ctx) == [-0.5, 0.0, -1.0]
    assert scores([BuildFailureWeigher(10.0)], ctx) == [0.0, -10.0, 0.0]
    together = [RAMWeigher(), IoOpsWeigher(), BuildFailureWeigher(10.0)]
    assert scores(together, ctx) == [-0.125, -9.0, -1.0]


def test_weigh_all_table_with_aggregate_overrides() -> None:
    aggregates = [
        Aggregate("slow", {"ram_weight_multiplier": "2", "build_failure_weight_multiplier": "0.5"}),
        Aggregate("fast", {"ram_weight_multiplier": "3"}),
    ]
    ctx = _three_providers(aggregates)
    # p1 (in both): RAM min(2, 3) x 1 = 2; io 0; failures -0.5 x 1 -> 1.5
    together = [RAMWeigher(), IoOpsWeigher(), BuildFailureWeigher(10.0)]
    assert scores(together, ctx) == [-0.125, 1.5, -1.0]


def test_a_single_candidate_is_not_weighed() -> None:
    ctx = _three_providers()
    one = np.array([1], dtype=np.int64)
    assert [float(x) for x in weigh_all([RAMWeigher(), BuildFailureWeigher()], ctx, one)] == [0.0]
    # not even a required metric it lacks can fail it, as in Nova
    required = MetricsWeigher(weight_setting="load=1", required=True)
    assert [float(x) for x in weigh_all([required], ctx, one)] == [0.0]
    assert len(weigh_all([RAMWeigher()], ctx, np.array([], dtype=np.int64))) == 0


def test_weigh_all_weighs_only_the_rows_given() -> None:
    ctx = _three_providers()
    subset = np.array([2, 0], dtype=np.int64)
    # RAM raw [-512, 3072] -> clamp [0, 3072] -> [0, 1]
    assert [float(x) for x in weigh_all([RAMWeigher()], ctx, subset)] == [0.0, 1.0]


def test_weigh_all_rejects_a_weigher_returning_the_wrong_shape() -> None:
    class Broken(Weigher):
        name = "Broken"
        multiplier_key = "broken_weight_multiplier"

        def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
            return np.zeros(len(rows) + 1, dtype=np.float64)

    with pytest.raises(ValueError, match="Broken returned weights of shape"):
        weigh_all([Broken()], _three_providers(), rows(3))


@st.composite
def _clusters(draw: st.DrawFn) -> tuple[Context, list[Weigher]]:
    n = draw(st.integers(2, 6))
    values = ["2", "0.5", "-1", "0", "x"]
    aggregates = [
        Aggregate(
            f"a{i}",
            {
                k: draw(st.sampled_from(values))
                for k in draw(
                    st.sets(st.sampled_from(["ram_weight_multiplier", "io_ops_weight_multiplier"]))
                )
            },
        )
        for i in range(3)
    ]
    providers = [
        Provider(
            f"p{i}",
            num_io_ops=draw(st.integers(0, 5)),
            aggregates=frozenset(draw(st.sets(st.sampled_from(["a0", "a1", "a2"])))),
            instances=frozenset(f"i{i}-{k}" for k in range(draw(st.integers(0, 4)))),
        )
        for i in range(n)
    ]
    inventories = {
        p.provider_id: {
            "MEMORY_MB": {"total": draw(st.integers(0, 4096)), "used": draw(st.integers(0, 4096))}
        }
        for p in providers
    }
    weighers: list[Weigher] = [
        RAMWeigher(draw(st.sampled_from([1.0, -1.0, 2.5]))),
        IoOpsWeigher(draw(st.sampled_from([-1.0, 0.0, 3.0]))),
        NumInstancesWeigher(draw(st.sampled_from([-1.0, 0.0, 1.0]))),
    ]
    return context(snapshot(providers, inventories, aggregates)), weighers


def _nova_multiplier(ctx: Context, row: int, weigher: Weigher) -> float:
    """Nova's get_weight_multiplier: the set of aggregate values, all cast, min."""
    found = {
        a.metadata[weigher.multiplier_key]
        for a in ctx.snapshot.aggregates_of(row)
        if weigher.multiplier_key in a.metadata
    }
    if not found:
        return weigher.multiplier
    try:
        return min(float(v) for v in found)
    except ValueError:
        return weigher.multiplier


@given(_clusters())
def test_weigh_all_matches_novas_handler_host_by_host(case: tuple[Context, list[Weigher]]) -> None:
    ctx, weighers = case
    n = ctx.snapshot.size
    expected = [0.0] * n
    for weigher in weighers:
        values = [float(x) for x in weigher.weigh(ctx, rows(n))]
        for i, w in enumerate(_nova_normalize(values, weigher.minval)):
            expected[i] += _nova_multiplier(ctx, i, weigher) * w
    assert scores(weighers, ctx) == pytest.approx(expected, abs=1e-9)


# --- RAM, CPU, disk -----------------------------------------------------------------


def test_ram_spreads_by_default_and_is_anchored_at_zero() -> None:
    ctx = context(snapshot(*memory((1000, 0), (2000, 0))))
    assert scores([RAMWeigher()], ctx) == [0.5, 1.0]


def test_ram_negative_multiplier_stacks() -> None:
    ctx = context(snapshot(*memory((1000, 0), (2000, 0))))
    got = scores([RAMWeigher(-1.0)], ctx)
    assert got == [-0.5, -1.0]
    assert int(np.argmax(got)) == 0


def test_ram_all_equal_free_is_not_all_zero() -> None:
    # minval = 0 keeps the range open: equal free RAM scores the full multiplier
    ctx = context(snapshot(*memory((2048, 0), (4096, 2048), (3072, 1024))))
    assert scores([RAMWeigher(2.0)], ctx) == [2.0, 2.0, 2.0]


def test_ram_all_full_is_all_zero() -> None:
    ctx = context(snapshot(*memory((2048, 2048), (1024, 1024))))
    assert scores([RAMWeigher()], ctx) == [0.0, 0.0]


def test_ram_overcommitted_counts_as_zero_free() -> None:
    ctx = context(snapshot(*memory((1000, 1500), (1000, 0))))
    assert raw(RAMWeigher(), ctx) == [-500.0, 1000.0]
    assert scores([RAMWeigher()], ctx) == [0.0, 1.0]


def test_ram_counts_reserved_allocation_ratio_and_earlier_picks() -> None:
    providers = [Provider("p0"), Provider("p1")]
    inventories: Inventories = {
        "p0": {"MEMORY_MB": {"total": 1000, "reserved": 200, "allocation_ratio": 1.5, "used": 100}},
        "p1": {"MEMORY_MB": {"total": 1000}},
    }
    ctx = context(snapshot(providers, inventories))
    assert raw(RAMWeigher(), ctx) == [1100.0, 1000.0]  # (1000 - 200) x 1.5 - 100
    pick(ctx, 0, {"MEMORY_MB": 300})
    assert raw(RAMWeigher(), ctx) == [800.0, 1000.0]
    assert scores([RAMWeigher()], ctx) == [0.8, 1.0]


def test_resource_weighers_without_the_class_weigh_zero() -> None:
    ctx = context(snapshot(*memory((1000, 0), (2000, 0))))
    assert raw(CPUWeigher(), ctx) == [0.0, 0.0]
    assert raw(DiskWeigher(), ctx) == [0.0, 0.0]
    assert scores([CPUWeigher(), DiskWeigher()], ctx) == [0.0, 0.0]


def test_cpu_weighs_free_vcpus_after_overcommit() -> None:
    providers = [Provider("p0"), Provider("p1"), Provider("p2")]
    inventories: Inventories = {
        "p0": {"VCPU": {"total": 4, "allocation_ratio": 16.0, "used": 10}},  # 64 - 10
        "p1": {"VCPU": {"total": 8, "used": 0}},
        "p2": {"VCPU": {"total": 8, "used": 12}},  # overcommitted: clamped to 0
    }
    ctx = context(snapshot(providers, inventories))
    assert raw(CPUWeigher(), ctx) == [54.0, 8.0, -4.0]
    assert scores([CPUWeigher()], ctx) == pytest.approx([1.0, 8 / 54, 0.0])
    pick(ctx, 0, {"VCPU": 27})
    assert scores([CPUWeigher()], ctx) == pytest.approx([1.0, 8 / 27, 0.0])


def test_disk_weighs_free_disk_gb() -> None:
    providers = [Provider("p0"), Provider("p1")]
    inventories = {
        "p0": {"DISK_GB": {"total": 500, "reserved": 100, "used": 100}},
        "p1": {"DISK_GB": {"total": 1200, "used": 0}},
    }
    ctx = context(snapshot(providers, inventories))
    assert raw(DiskWeigher(), ctx) == [300.0, 1200.0]
    assert scores([DiskWeigher(-2.0)], ctx) == [-0.5, -2.0]


# --- IO ops and instance counts -----------------------------------------------------


def test_io_ops_default_prefers_the_lighter_provider() -> None:
    ctx = context(snapshot([Provider("p0", num_io_ops=0), Provider("p1", num_io_ops=3)]))
    got = scores([IoOpsWeigher()], ctx)
    assert got == [0.0, -1.0]
    assert int(np.argmax(got)) == 0
    assert scores([IoOpsWeigher(1.0)], ctx) == [0.0, 1.0]


def test_io_ops_count_earlier_picks_and_all_equal_is_full_multiplier() -> None:
    ctx = context(snapshot([Provider("p0", num_io_ops=1), Provider("p1", num_io_ops=3)]))
    pick(ctx, 0)
    pick(ctx, 0)
    assert raw(IoOpsWeigher(), ctx) == [3.0, 3.0]
    # minval = 0 again: equal non-zero counts all normalise to 1.0
    assert scores([IoOpsWeigher()], ctx) == [-1.0, -1.0]


def test_num_instances_is_off_by_default() -> None:
    ctx = context(snapshot([Provider("p0", instances=frozenset({"a", "b"})), Provider("p1")]))
    assert raw(NumInstancesWeigher(), ctx) == [2.0, 0.0]
    assert scores([NumInstancesWeigher()], ctx) == [0.0, 0.0]


def test_num_instances_negative_spreads_and_counts_earlier_picks() -> None:
    providers = [
        Provider("p0", instances=frozenset({"a", "b"})),
        Provider("p1", instances=frozenset({"c", "d", "e", "f"})),
        Provider("p2", instances=frozenset({"g", "h", "i"})),
    ]
    ctx = context(snapshot(providers))
    # no minval: range 2..4, not 0..4
    assert scores([NumInstancesWeigher(-1.0)], ctx) == [0.0, -1.0, -0.5]
    pick(ctx, 0)
    pick(ctx, 0)
    assert raw(NumInstancesWeigher(), ctx) == [4.0, 4.0, 3.0]
    assert scores([NumInstancesWeigher(-1.0)], ctx) == [-1.0, -1.0, 0.0]


def test_num_instances_all_equal_is_zero() -> None:
    providers = [Provider(f"p{i}", instances=frozenset({f"x{i}"})) for i in range(3)]
    assert scores([NumInstancesWeigher(5.0)], context(snapshot(providers))) == [0.0, 0.0, 0.0]


# --- metrics ----------------------------------------------------------------------


def test_weight_setting_parses_strings_and_lists() -> None:
    assert parse_weight_setting("cpu.percent=1.0, mem.free = -0.5,") == (
        ("cpu.percent", 1.0),
        ("mem.free", -0.5),
    )
    assert parse_weight_setting(["a=2", " b=1e3 "]) == (("a", 2.0), ("b", 1000.0))
    assert parse_weight_setting("") == ()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("cpu.percent", "'cpu.percent' is not of the form name=ratio"),
        ("a=1, =2", "'=2' has no metric name"),
        ("a=high", "ratio 'high' of metric 'a' is not a number"),
        ("a=", "ratio '' of metric 'a' is not a number"),
        ("a=nan", "ratio of metric 'a' must be finite"),
        ("a=-inf", "ratio of metric 'a' must be finite"),
    ],
)
def test_weight_setting_errors_are_clear(setting: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MetricsWeigher(weight_setting=setting)


def _metric_cluster(*metrics: Mapping[str, float], aggregates: Sequence[Aggregate] = ()) -> Context:
    providers = [Provider(f"p{i}", metrics=dict(m)) for i, m in enumerate(metrics)]
    if aggregates:
        providers[-1] = in_aggregates(providers[-1], *(a.name for a in aggregates))
    return context(snapshot(providers, aggregates=aggregates))


def test_metrics_weighted_sum() -> None:
    ctx = _metric_cluster({"a": 10, "b": 2}, {"a": 4, "b": 0}, {"a": 1, "b": 1, "c": 99})
    weigher = MetricsWeigher(weight_setting="a=1, b=-2")
    assert raw(weigher, ctx) == [6.0, 4.0, -1.0]
    assert scores([weigher], ctx) == pytest.approx([1.0, 5 / 7, 0.0])


def test_metrics_missing_and_required_raises() -> None:
    ctx = _metric_cluster({"a": 1, "b": 1}, {"a": 1})
    with pytest.raises(MetricNotFound, match="'p1' does not report metric 'b'") as caught:
        weigh_all([MetricsWeigher(weight_setting="a=1, b=1", required=True)], ctx, rows(2))
    assert (caught.value.provider_id, caught.value.metric) == ("p1", "b")


def test_metrics_missing_and_required_raises_even_for_a_zero_ratio() -> None:
    # Nova checks "required" before looking at the ratio
    ctx = _metric_cluster({"a": 1, "b": 1}, {"a": 1})
    with pytest.raises(MetricNotFound):
        MetricsWeigher(weight_setting="a=1, b=0", required=True).weigh(ctx, rows(2))


def test_metrics_missing_and_not_required_sinks_the_provider() -> None:
    ctx = _metric_cluster({"a": 3, "b": 1}, {"a": 2}, {"a": 1, "b": 5})
    weigher = MetricsWeigher(weight_setting="a=1, b=1", required=False)
    assert raw(weigher, ctx) == [4.0, -10000.0, 6.0]
    assert scores([weigher], ctx) == pytest.approx([10004 / 10006, 0.0, 1.0])
    custom = MetricsWeigher(weight_setting="a=1, b=1", required=False, weight_of_unavailable=-1.0)
    assert raw(custom, ctx) == [4.0, -1.0, 6.0]


def test_metrics_missing_with_zero_ratio_or_multiplier_is_skipped() -> None:
    ctx = _metric_cluster({"a": 3, "b": 1}, {"a": 2})
    zero_ratio = MetricsWeigher(weight_setting="a=1, b=0", required=False)
    assert raw(zero_ratio, ctx) == [3.0, 2.0]
    zero_multiplier = MetricsWeigher(0.0, weight_setting="a=1, b=1", required=False)
    assert raw(zero_multiplier, ctx) == [4.0, 2.0]


def test_metrics_missing_with_an_aggregate_zero_multiplier_is_skipped_there_only() -> None:
    off = Aggregate("off", {"metrics_weight_multiplier": "0"})
    ctx = _metric_cluster({"a": 3, "b": 1}, {"a": 2}, {"a": 7}, aggregates=[off])
    weigher = MetricsWeigher(weight_setting="a=1, b=1", required=False)
    assert raw(weigher, ctx) == [4.0, -10000.0, 7.0]


def test_metrics_without_a_setting_weigh_zero() -> None:
    ctx = _metric_cluster({"a": 3}, {})
    assert raw(MetricsWeigher(required=True), ctx) == [0.0, 0.0]


def test_metrics_lone_candidate_is_never_checked() -> None:
    ctx = _metric_cluster({"a": 3}, {})
    weigher = MetricsWeigher(weight_setting="b=1", required=True)
    assert [float(x) for x in weigher.weigh(ctx, np.array([1], dtype=np.int64))] == [0.0]


# --- server-group soft affinity ---------------------------------------------------


def _group_cluster(
    policy: GroupPolicy | None, group: str | None = "g", *members: Mapping[str, int]
) -> Context:
    providers = [Provider(f"p{i}", groups=dict(m)) for i, m in enumerate(members)]
    return context(snapshot(providers), Request("r", {}, group_id=group, group_policy=policy))


@pytest.mark.parametrize(
    ("policy", "group"),
    [(None, None), ("soft-affinity", None), ("affinity", "g"), ("anti-affinity", "g")],
)
def test_soft_affinity_weighers_ignore_other_requests(
    policy: GroupPolicy | None, group: str | None
) -> None:
    ctx = _group_cluster(policy, group, {"g": 2}, {})
    for weigher in (ServerGroupSoftAffinityWeigher(), ServerGroupSoftAntiAffinityWeigher()):
        assert raw(weigher, ctx) == [0.0, 0.0]
        assert scores([weigher], ctx) == [0.0, 0.0]


def test_each_soft_weigher_answers_only_its_own_policy() -> None:
    ctx = _group_cluster("soft-anti-affinity", "g", {"g": 2}, {})
    assert raw(ServerGroupSoftAffinityWeigher(), ctx) == [0.0, 0.0]
    ctx = _group_cluster("soft-affinity", "g", {"g": 2}, {})
    assert raw(ServerGroupSoftAntiAffinityWeigher(), ctx) == [0.0, 0.0]


def test_soft_affinity_counts_members_and_earlier_picks() -> None:
    ctx = _group_cluster("soft-affinity", "g", {"g": 2}, {}, {"other": 5})
    weigher = ServerGroupSoftAffinityWeigher()
    assert raw(weigher, ctx) == [2.0, 0.0, 0.0]
    pick(ctx, 1)
    pick(ctx, 1)
    pick(ctx, 1)
    assert raw(weigher, ctx) == [2.0, 3.0, 0.0]
    assert scores([weigher], ctx) == pytest.approx([2 / 3, 1.0, 0.0])


def test_soft_anti_affinity_is_the_negated_count() -> None:
    ctx = _group_cluster("soft-anti-affinity", "g", {"g": 1}, {}, {"g": 3})
    weigher = ServerGroupSoftAntiAffinityWeigher()
    assert raw(weigher, ctx) == [-1.0, 0.0, -3.0]
    assert scores([weigher], ctx) == pytest.approx([2 / 3, 1.0, 0.0])


def test_soft_anti_affinity_spreads_one_request_over_empty_providers() -> None:
    ctx = _group_cluster("soft-anti-affinity", "g", {}, {}, {})
    weighers = [ServerGroupSoftAntiAffinityWeigher()]
    chosen = []
    for _ in range(3):
        best = int(np.argmax(weigh_all(weighers, ctx, rows(3))))
        chosen.append(best)
        pick(ctx, best)
    assert sorted(chosen) == [0, 1, 2]


def test_soft_affinity_keeps_one_request_together() -> None:
    ctx = _group_cluster("soft-affinity", "g", {}, {}, {})
    weighers = [ServerGroupSoftAffinityWeigher()]
    chosen = []
    for _ in range(3):
        best = int(np.argmax(weigh_all(weighers, ctx, rows(3))))
        chosen.append(best)
        pick(ctx, best)
    assert chosen == [0, 0, 0]


def test_a_negative_soft_affinity_multiplier_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        ServerGroupSoftAffinityWeigher(-1.0)
        ServerGroupSoftAntiAffinityWeigher(-1.0)
    assert "turns it into soft anti-affinity" in caplog.text
    assert "turns it into soft affinity" in caplog.text


# --- build failures ----------------------------------------------------------------


def _failures(*counts: int, aggregates: Sequence[Aggregate] = ()) -> Context:
    names = frozenset(a.name for a in aggregates)
    providers = [
        Provider(f"p{i}", build_failures=c, aggregates=names) for i, c in enumerate(counts)
    ]
    return context(snapshot(providers, aggregates=aggregates))


def test_build_failures_novas_table() -> None:
    ctx = _failures(0, 1, 10, 100)
    assert raw(BuildFailureWeigher(), ctx) == [0.0, 1.0, 10.0, 100.0]
    assert scores([BuildFailureWeigher(1000.0)], ctx) == [0.0, -10.0, -100.0, -1000.0]
    assert scores([BuildFailureWeigher(0.0)], ctx) == [0.0, 0.0, 0.0, 0.0]
    assert scores([BuildFailureWeigher()], ctx) == [0.0, -10000.0, -100000.0, -1000000.0]


def test_build_failures_aggregate_override_is_negated_too() -> None:
    agg = Aggregate("a", {"build_failure_weight_multiplier": "1000"})
    ctx = _failures(0, 1, 10, 100, aggregates=[agg])
    assert scores([BuildFailureWeigher(0.0)], ctx) == [0.0, -10.0, -100.0, -1000.0]
    two = [
        Aggregate("a", {"build_failure_weight_multiplier": "500"}),
        Aggregate("b", {"build_failure_weight_multiplier": "1000"}),
    ]
    ctx = _failures(1, 2, aggregates=two)
    assert [float(x) for x in BuildFailureWeigher(0.0).multipliers(ctx, rows(2))] == [
        -500.0,
        -500.0,
    ]


def test_no_build_failures_anywhere_weighs_nothing() -> None:
    assert scores([BuildFailureWeigher()], _failures(0, 0, 0)) == [0.0, 0.0, 0.0]
    assert scores([BuildFailureWeigher()], _failures(3, 3)) == [0.0, 0.0]


# --- hypervisor version ---------------------------------------------------------------


def test_newer_hypervisors_win_and_missing_versions_count_as_zero() -> None:
    providers = [
        Provider("p0", capabilities={"hypervisor_version": 6000000}),
        Provider("p1", capabilities={"hypervisor_version": 8000000}),
        Provider("p2"),
        Provider("p3", capabilities={"hypervisor_version": "8.0.0"}),
        Provider("p4", capabilities={"hypervisor_version": None}),
    ]
    ctx = context(snapshot(providers))
    assert raw(HypervisorVersionWeigher(), ctx) == [6e6, 8e6, 0.0, 0.0, 0.0]
    assert scores([HypervisorVersionWeigher()], ctx) == [0.75, 1.0, 0.0, 0.0, 0.0]
    older = scores([HypervisorVersionWeigher(-1.0)], ctx)
    assert older == [-0.75, -1.0, 0.0, 0.0, 0.0]


def test_hypervisor_version_without_minval_ignores_the_common_part() -> None:
    providers = [
        Provider("p0", capabilities={"hypervisor_version": 8000000}),
        Provider("p1", capabilities={"hypervisor_version": 8000002}),
        Provider("p2", capabilities={"hypervisor_version": 8000001}),
    ]
    assert scores([HypervisorVersionWeigher()], context(snapshot(providers))) == [0.0, 1.0, 0.5]


# --- tag affinity ------------------------------------------------------------------------


def _tagged(rules: TagRules, *tags: Mapping[str, int]) -> Context:
    providers = [Provider(f"p{i}", tags=dict(t)) for i, t in enumerate(tags)]
    return context(snapshot(providers), Request("r", {}, tags=rules))


def test_tag_affinity_plus_one_with_minus_one_without() -> None:
    rules = TagRules(prefer_with=frozenset({"db"}), prefer_without=frozenset({"web"}))
    ctx = _tagged(rules, {"web": 2, "db": 1}, {"web": 1}, {}, {"db": 3, "cache": 9})
    weigher = TagAffinityWeigher()
    assert raw(weigher, ctx) == [-1.0, -1.0, 0.0, 3.0]
    assert scores([weigher], ctx) == [0.0, 0.0, 0.25, 1.0]


def test_tag_affinity_counts_per_tag_and_a_tag_in_both_sets_cancels() -> None:
    rules = TagRules(prefer_with=frozenset({"a", "b"}), prefer_without=frozenset({"b"}))
    ctx = _tagged(rules, {"a": 1, "b": 2}, {"b": 5}, {})
    assert raw(TagAffinityWeigher(), ctx) == [1.0, 0.0, 0.0]


def test_tag_affinity_without_preferences_or_required_only_weighs_zero() -> None:
    ctx = _tagged(TagRules(), {"web": 2}, {})
    assert raw(TagAffinityWeigher(), ctx) == [0.0, 0.0]
    ctx = _tagged(TagRules(require_with=frozenset({"web"})), {"web": 2}, {})
    assert raw(TagAffinityWeigher(), ctx) == [0.0, 0.0]


def test_tag_affinity_aggregate_override() -> None:
    agg = Aggregate("a", {"tag_affinity_weight_multiplier": "-3"})
    providers = [
        Provider("p0", tags={"db": 2}),
        Provider("p1", tags={"db": 1}, aggregates=frozenset({"a"})),
        Provider("p2"),
    ]
    rules = TagRules(prefer_with=frozenset({"db"}))
    ctx = context(snapshot(providers, aggregates=[agg]), Request("r", {}, tags=rules))
    assert scores([TagAffinityWeigher()], ctx) == [1.0, -1.5, 0.0]


# --- negative multipliers stacking across weighers -----------------------------------


def test_negative_multipliers_stack_on_the_fullest_provider() -> None:
    providers = [Provider("p0"), Provider("p1"), Provider("p2")]
    inventories = {
        "p0": {"MEMORY_MB": {"total": 4096, "used": 3072}, "VCPU": {"total": 8, "used": 6}},
        "p1": {"MEMORY_MB": {"total": 4096, "used": 0}, "VCPU": {"total": 8, "used": 0}},
        "p2": {"MEMORY_MB": {"total": 4096, "used": 2048}, "VCPU": {"total": 8, "used": 4}},
    }
    ctx = context(snapshot(providers, inventories))
    # RAM free [1024, 4096, 2048] -> [0.25, 1, 0.5]; CPU free [2, 8, 4] -> [0.25, 1, 0.5]
    stack = [RAMWeigher(-1.0), CPUWeigher(-1.0)]
    assert scores(stack, ctx) == [-0.5, -2.0, -1.0]
    chosen = []
    for _ in range(2):
        best = int(np.argmax(weigh_all(stack, ctx, rows(3))))
        chosen.append(best)
        pick(ctx, best, {"MEMORY_MB": 512, "VCPU": 1})
    assert chosen == [0, 0]
