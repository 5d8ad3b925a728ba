"""ResourceFilter: capacity, allocation ratios and their per-aggregate
overrides, inventory constraints, virtual consumption, and agreement of the
vectorised mask with the per-row reasons."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import Engine
from scheduling.filters.base import Context
from scheduling.filters.resources import ResourceFilter, effective_ratios, ratio_keys
from scheduling.model import Aggregate, Provider, Request, Snapshot

Inventory = Mapping[str, Mapping[str, Any]]


def snapshot(
    inventories: Mapping[str, Inventory], aggregates: Mapping[str, Mapping[str, str]] | None = None
) -> Snapshot:
    """Providers named by ``inventories``; a provider belongs to every
    aggregate whose name starts with its id followed by ``-``, or ``all``."""
    aggs = {name: Aggregate(name, dict(meta)) for name, meta in (aggregates or {}).items()}
    providers = [
        Provider(
            pid, aggregates=frozenset(a for a in aggs if a == "all" or a.startswith(pid + "-"))
        )
        for pid in inventories
    ]
    return Snapshot.build(providers, inventories, aggs)


def reason(snap: Snapshot, resources: Mapping[str, int], row: int = 0) -> str | None:
    ctx = Context.start(snap, Request("r", resources))
    return ResourceFilter().reject(ctx, row)


def passes(snap: Snapshot, resources: Mapping[str, int]) -> list[bool]:
    ctx = Context.start(snap, Request("r", resources))
    return [bool(x) for x in ResourceFilter().mask(ctx, np.arange(snap.size, dtype=np.int64))]


# (case, inventory of provider "p", request, expected reason)
TABLE: list[tuple[str, Inventory, dict[str, int], str | None]] = [
    ("fits exactly", {"VCPU": {"total": 4}}, {"VCPU": 4}, None),
    ("one too many", {"VCPU": {"total": 4}}, {"VCPU": 5}, "VCPU wanted 5, free 4"),
    ("used counts", {"VCPU": {"total": 4, "used": 3}}, {"VCPU": 2}, "VCPU wanted 2, free 1"),
    (
        "reserved counts",
        {"MEMORY_MB": {"total": 8192, "reserved": 4096}},
        {"MEMORY_MB": 8192},
        "MEMORY_MB wanted 8192, free 4096",
    ),
    ("ratio multiplies", {"VCPU": {"total": 4, "allocation_ratio": 4.0}}, {"VCPU": 16}, None),
    (
        "ratio after reserved",
        {"VCPU": {"total": 4, "reserved": 2, "allocation_ratio": 4.0}},
        {"VCPU": 9},
        "VCPU wanted 9, free 8",
    ),
    (
        "fractional capacity truncates",
        {"VCPU": {"total": 3, "allocation_ratio": 1.5}},
        {"VCPU": 5},
        "VCPU wanted 5, free 4",
    ),
    (
        "ratio below one",
        {"MEMORY_MB": {"total": 1000, "allocation_ratio": 0.5}},
        {"MEMORY_MB": 501},
        "MEMORY_MB wanted 501, free 500",
    ),
    (
        "overcommitted already",
        {"VCPU": {"total": 4, "used": 6}},
        {"VCPU": 1},
        "VCPU wanted 1, free -2",
    ),
    ("class absent from snapshot", {"VCPU": {"total": 4}}, {"VGPU": 1}, "VGPU not provided"),
    ("zero total is not provided", {"VCPU": {"total": 0}}, {"VCPU": 1}, "VCPU not provided"),
    ("zero amount asks nothing", {"VCPU": {"total": 4}}, {"VGPU": 0, "VCPU": 1}, None),
    (
        "below min_unit",
        {"VCPU": {"total": 8, "min_unit": 2}},
        {"VCPU": 1},
        "VCPU 1 is below min_unit 2",
    ),
    ("at min_unit", {"VCPU": {"total": 8, "min_unit": 2}}, {"VCPU": 2}, None),
    (
        "above max_unit",
        {"VCPU": {"total": 64, "max_unit": 16}},
        {"VCPU": 17},
        "VCPU 17 is above max_unit 16",
    ),
    ("at max_unit", {"VCPU": {"total": 64, "max_unit": 16}}, {"VCPU": 16}, None),
    (
        "off step",
        {"DISK_GB": {"total": 100, "step_size": 10}},
        {"DISK_GB": 15},
        "DISK_GB 15 is not a multiple of step_size 10",
    ),
    ("on step", {"DISK_GB": {"total": 100, "step_size": 10}}, {"DISK_GB": 20}, None),
    (
        "step checked before free",
        {"DISK_GB": {"total": 10, "step_size": 4}},
        {"DISK_GB": 15},
        "DISK_GB 15 is not a multiple of step_size 4",
    ),
    (
        "every class must fit",
        {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 512}},
        {"VCPU": 2, "MEMORY_MB": 1024},
        "MEMORY_MB wanted 1024, free 512",
    ),
]


@pytest.mark.parametrize(
    ("case", "inventory", "wanted", "expected"), TABLE, ids=[t[0] for t in TABLE]
)
def test_inventory_table(
    case: str, inventory: Inventory, wanted: dict[str, int], expected: str | None
) -> None:
    snap = snapshot({"p": inventory})
    assert reason(snap, wanted) == expected
    assert passes(snap, wanted) == [expected is None]


def test_missing_class_only_on_some_providers() -> None:
    snap = snapshot(
        {"a": {"VCPU": {"total": 4}, "VGPU": {"total": 1}}, "b": {"VCPU": {"total": 4}}}
    )
    assert passes(snap, {"VGPU": 1}) == [True, False]
    assert reason(snap, {"VGPU": 1}, row=1) == "VGPU not provided"


def test_ratio_keys() -> None:
    assert ratio_keys("VCPU") == ("vcpu_allocation_ratio", "cpu_allocation_ratio")
    assert ratio_keys("MEMORY_MB") == ("memory_mb_allocation_ratio", "ram_allocation_ratio")
    assert ratio_keys("DISK_GB") == ("disk_gb_allocation_ratio", "disk_allocation_ratio")
    assert ratio_keys("CUSTOM_FPGA") == ("custom_fpga_allocation_ratio",)


VCPU4 = {"VCPU": {"total": 4, "allocation_ratio": 2.0}}  # capacity 8 without overrides

# (case, metadata of aggregates "p-1", "p-2", ... the provider is in, VCPU capacity)
AGGREGATE_RATIOS: list[tuple[str, list[dict[str, str]], int]] = [
    ("no aggregate", [], 8),
    ("aggregate without the key", [{"other": "x"}], 8),
    ("generic key", [{"vcpu_allocation_ratio": "4.0"}], 16),
    ("nova key", [{"cpu_allocation_ratio": "3"}], 12),
    ("override may lower", [{"cpu_allocation_ratio": "0.5"}], 2),
    (
        "minimum of several aggregates",
        [{"cpu_allocation_ratio": "4"}, {"cpu_allocation_ratio": "3"}],
        12,
    ),
    (
        "minimum across both keys",
        [{"cpu_allocation_ratio": "4", "vcpu_allocation_ratio": "1.5"}],
        6,
    ),
    ("same value twice", [{"cpu_allocation_ratio": "4"}, {"cpu_allocation_ratio": "4"}], 16),
    ("not a number", [{"cpu_allocation_ratio": "lots"}], 8),
    ("zero is invalid", [{"cpu_allocation_ratio": "0"}], 8),
    ("negative is invalid", [{"cpu_allocation_ratio": "-1"}], 8),
    ("infinity is invalid", [{"cpu_allocation_ratio": "inf"}], 8),
    ("nan is invalid", [{"cpu_allocation_ratio": "nan"}], 8),
    ("empty is invalid", [{"cpu_allocation_ratio": ""}], 8),
    ("spaces are fine", [{"cpu_allocation_ratio": " 3 "}], 12),
    # Nova casts all values before the minimum: one bad value drops them all.
    ("one invalid among valid", [{"cpu_allocation_ratio": "3"}, {"cpu_allocation_ratio": "x"}], 8),
    (
        "other classes' keys ignored",
        [{"ram_allocation_ratio": "9", "disk_allocation_ratio": "9"}],
        8,
    ),
]


@pytest.mark.parametrize(
    ("case", "metadata", "capacity"), AGGREGATE_RATIOS, ids=[t[0] for t in AGGREGATE_RATIOS]
)
def test_aggregate_ratio(case: str, metadata: list[dict[str, str]], capacity: int) -> None:
    snap = snapshot({"p": VCPU4}, {f"p-{i}": meta for i, meta in enumerate(metadata)})
    assert reason(snap, {"VCPU": capacity}) is None
    assert reason(snap, {"VCPU": capacity + 1}) == f"VCPU wanted {capacity + 1}, free {capacity}"
    assert passes(snap, {"VCPU": capacity + 1}) == [False]


def test_nova_names_for_memory_and_disk_and_custom_classes() -> None:
    inventory = {
        "MEMORY_MB": {"total": 1000},
        "DISK_GB": {"total": 100},
        "CUSTOM_FPGA": {"total": 2},
    }
    meta = {
        "ram_allocation_ratio": "1.5",
        "disk_allocation_ratio": "2",
        "custom_fpga_allocation_ratio": "3",
    }
    snap = snapshot({"p": inventory}, {"p-0": meta})
    assert reason(snap, {"MEMORY_MB": 1500, "DISK_GB": 200, "CUSTOM_FPGA": 6}) is None
    assert reason(snap, {"MEMORY_MB": 1501}) == "MEMORY_MB wanted 1501, free 1500"
    assert reason(snap, {"DISK_GB": 201}) == "DISK_GB wanted 201, free 200"
    assert reason(snap, {"CUSTOM_FPGA": 7}) == "CUSTOM_FPGA wanted 7, free 6"


def test_override_applies_only_to_members() -> None:
    snap = snapshot({"a": VCPU4, "b": VCPU4}, {"a-fast": {"cpu_allocation_ratio": "4"}})
    assert passes(snap, {"VCPU": 16}) == [True, False]
    ratios = effective_ratios(snap)
    assert ratios[:, 0].tolist() == [4.0, 2.0]
    assert snap.allocation_ratio[:, 0].tolist() == [2.0, 2.0]  # the snapshot is untouched


def test_aggregate_missing_from_snapshot_is_ignored() -> None:
    providers = [Provider("p", aggregates=frozenset({"ghost"}))]
    snap = Snapshot.build(providers, {"p": VCPU4})
    assert reason(snap, {"VCPU": 8}) is None


def test_one_filter_follows_a_new_snapshot() -> None:
    f = ResourceFilter()
    request = Request("r", {"VCPU": 12})
    plain = snapshot({"p": VCPU4})
    boosted = snapshot({"p": VCPU4}, {"all": {"cpu_allocation_ratio": "3"}})
    rows = np.arange(1, dtype=np.int64)
    for snap, fits in [(plain, False), (boosted, True), (plain, False)]:
        ctx = Context.start(snap, request)
        assert bool(f.mask(ctx, rows)[0]) is fits
        assert (f.reject(ctx, 0) is None) is fits


def test_virtual_consumption_of_earlier_picks() -> None:
    snap = snapshot({"p": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}})
    ctx = Context.start(snap, Request("r", {"VCPU": 2, "MEMORY_MB": 2048}, num_instances=3))
    vcpu, memory = snap.column("VCPU"), snap.column("MEMORY_MB")
    assert vcpu is not None and memory is not None
    f = ResourceFilter()
    rows = np.arange(1, dtype=np.int64)
    for _ in range(2):
        assert f.mask(ctx, rows).tolist() == [True]
        ctx.used[0, vcpu] += 2
        ctx.used[0, memory] += 2048
        ctx.picked.append(0)
    assert f.mask(ctx, rows).tolist() == [False]
    assert f.reject(ctx, 0) == "MEMORY_MB wanted 2048, free 0"
    assert snap.used.sum() == 0  # picks consume in the context only


def test_engine_spreads_a_multi_instance_request_by_capacity() -> None:
    snap = snapshot({"a": {"VCPU": {"total": 4}}, "b": {"VCPU": {"total": 2}}})
    placement = Engine([ResourceFilter()]).place(snap, Request("r", {"VCPU": 2}, num_instances=4))
    assert placement.providers == ("a", "a", "b")
    assert not placement.placed
    assert placement.trace is not None
    assert [str(e) for e in placement.trace.eliminations] == [
        "a: VCPU wanted 2, free 0 (ResourceFilter)",
        "b: VCPU wanted 2, free 0 (ResourceFilter)",
    ]


def test_mask_over_a_subset_of_rows_in_any_order() -> None:
    snap = snapshot({f"p{i}": {"VCPU": {"total": i}} for i in range(6)})
    ctx = Context.start(snap, Request("r", {"VCPU": 3}))
    rows = np.array([5, 1, 3, 2], dtype=np.int64)
    assert ResourceFilter().mask(ctx, rows).tolist() == [True, False, True, False]
    assert ResourceFilter().mask(ctx, rows[:0]).tolist() == []


CLASSES = ["VCPU", "MEMORY_MB", "DISK_GB", "CUSTOM_X"]
RATIO_TEXT = ["0.5", "1", "1.5", "2", "16", "0", "-2", "x", "inf", " 3 "]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Snapshot, Request, np.ndarray[Any, Any]]:
    n = draw(st.integers(1, 6))
    inventories: dict[str, dict[str, dict[str, Any]]] = {}
    for i in range(n):
        inventory: dict[str, dict[str, Any]] = {}
        for rc in draw(st.lists(st.sampled_from(CLASSES), unique=True)):
            total = draw(st.integers(0, 40))
            inventory[rc] = {
                "total": total,
                "reserved": draw(st.integers(0, 10)),
                "used": draw(st.integers(0, 50)),
                "allocation_ratio": draw(st.sampled_from([0.5, 1.0, 1.3, 2.0, 3.7])),
                "min_unit": draw(st.integers(0, 4)),
                "max_unit": draw(st.integers(0, 40)),
                "step_size": draw(st.integers(0, 5)),
            }
        inventories[f"p{i}"] = inventory
    if not any(inventories.values()):
        inventories["p0"] = {"VCPU": {"total": 1}}
    keys = [k for rc in CLASSES for k in ratio_keys(rc)]
    aggregates = {
        f"p{draw(st.integers(0, n - 1))}-{j}": dict(
            draw(
                st.lists(st.tuples(st.sampled_from(keys), st.sampled_from(RATIO_TEXT)), max_size=3)
            )
        )
        for j in range(draw(st.integers(0, 4)))
    }
    if draw(st.booleans()):
        aggregates["all"] = {draw(st.sampled_from(keys)): draw(st.sampled_from(RATIO_TEXT))}
    snap = snapshot(inventories, aggregates)
    resources = draw(st.dictionaries(st.sampled_from([*CLASSES, "VGPU"]), st.integers(0, 30)))
    extra = draw(st.lists(st.integers(0, 20), min_size=snap.total.size, max_size=snap.total.size))
    return snap, Request("r", resources), np.array(extra, dtype=np.int64).reshape(snap.total.shape)


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_mask_agrees_with_reject(
    scenario: tuple[Snapshot, Request, np.ndarray[Any, Any]], rnd: Any
) -> None:
    snap, request, extra = scenario
    ctx = Context.start(snap, request)
    ctx.used += extra  # earlier picks' virtual consumption
    f = ResourceFilter()
    rows = np.arange(snap.size, dtype=np.int64)
    expected = [f.reject(ctx, int(r)) is None for r in rows]
    assert f.mask(ctx, rows).tolist() == expected
    shuffled = [int(r) for r in rows]
    rnd.shuffle(shuffled)
    subset = np.array(shuffled[: rnd.randint(0, len(shuffled))], dtype=np.int64)
    assert f.mask(ctx, subset).tolist() == [expected[r] for r in subset]
