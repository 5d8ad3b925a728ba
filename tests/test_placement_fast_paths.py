"""The engine's shortcuts give the very numbers of the plain path: the
weighers' ``add_to`` against Nova's ``multipliers x normalize(weigh)``, bit
for bit (signed zeros included), and ``Context.free`` read from a run of
consecutive rows against gathering the rows one by one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.filters.base import Context
from scheduling.model import Aggregate, FloatArray, IntArray, Provider, Request, Snapshot
from scheduling.registry import WEIGHERS
from scheduling.weighers.base import Weigher, normalize
from scheduling.weighers.metrics import MetricsWeigher

CLASSES = ("DISK_GB", "MEMORY_MB", "VCPU")
MULTIPLIERS = (1.0, -1.0, 0.0, -0.0, 2.5, -0.5, 1e6)
KEYS = (
    "ram_weight_multiplier",
    "cpu_weight_multiplier",
    "io_ops_weight_multiplier",
    "build_failure_weight_multiplier",
)


@st.composite
def contexts(draw: st.DrawFn) -> tuple[Context, IntArray]:
    """A snapshot with overcommitted and empty classes, odd io counts and
    (sometimes) aggregates overriding multipliers; a request with 0-2 picks
    made; and the candidate rows."""
    n = draw(st.integers(2, 12))
    aggregates = {
        f"a{i}": Aggregate(
            f"a{i}",
            {
                k: draw(st.sampled_from(["2", "0.5", "0", "x"]))
                for k in draw(st.sets(st.sampled_from(KEYS)))
            },
        )
        for i in range(draw(st.integers(0, 2)))
    }
    providers = [
        Provider(
            f"p{i}",
            num_io_ops=draw(st.integers(-1, 4)),
            build_failures=draw(st.integers(0, 2)),
            capabilities={"hypervisor_version": draw(st.sampled_from([0, 1000, 2000]))},
            aggregates=frozenset(draw(st.sets(st.sampled_from(sorted(aggregates) or ["none"])))),
            groups={"g": draw(st.integers(0, 2))},
            tags={"t": draw(st.integers(0, 2))},
        )
        for i in range(n)
    ]
    absent = draw(st.sampled_from([None, *CLASSES]))
    inventories = {
        p.provider_id: {
            rc: {
                "total": draw(st.sampled_from([0, 4, 64])),
                "used": draw(st.integers(-2, 80)),
                "allocation_ratio": draw(st.sampled_from([1.0, 1.5])),
            }
            for rc in CLASSES
            if rc != absent
        }
        for p in providers
    }
    snap = Snapshot.build(providers, inventories, aggregates)
    request = Request(
        "r",
        {"VCPU": 1},
        group_id="g",
        group_policy=draw(st.sampled_from(["soft-affinity", "soft-anti-affinity"])),
    )
    ctx = Context.start(snap, request)
    ctx.picked.extend(draw(st.lists(st.integers(0, n - 1), max_size=2)))
    keep = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    rows: IntArray = np.arange(n, dtype=np.int64)[np.array(keep, dtype=np.bool_)]
    return ctx, rows


def _weighers(multiplier: float) -> list[Weigher]:
    built: list[Weigher] = []
    for name, cls in WEIGHERS.items():
        if name == "MetricsWeigher":
            continue  # reports no metrics here; it has no shortcut either
        if name == "PCIWeigher" and multiplier < 0:
            continue  # refuses a negative multiplier, as Nova does
        built.append(cls(multiplier))
    return built


def _plain(weigher: Weigher, ctx: Context, rows: IntArray, total: FloatArray) -> FloatArray:
    raw = np.asarray(weigher.weigh(ctx, rows), dtype=np.float64)
    out: FloatArray = total + weigher.multipliers(ctx, rows) * normalize(
        raw, weigher.minval, weigher.maxval
    )
    return out


def _same(a: FloatArray, b: FloatArray) -> bool:
    return bool(np.array_equal(a, b) and np.array_equal(np.signbit(a), np.signbit(b)))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(contexts(), st.sampled_from(MULTIPLIERS), st.sampled_from([0.0, 0.25, -3.0]))
def test_add_to_adds_what_the_plain_handler_adds(
    case: tuple[Context, IntArray], multiplier: float, start: float
) -> None:
    ctx, rows = case
    for weigher in _weighers(multiplier):
        total = np.full(len(rows), start, dtype=np.float64)
        expected = _plain(weigher, ctx, rows, total)
        weigher.add_to(total, ctx, rows)
        assert _same(total, expected), weigher.name


@settings(max_examples=200, deadline=None, derandomize=True)
@given(contexts())
def test_a_lone_metrics_weigher_still_weighs_the_plain_way(case: tuple[Context, IntArray]) -> None:
    ctx, rows = case
    weigher = MetricsWeigher(weight_setting="cpu=1.0", required=False)
    total = np.zeros(len(rows), dtype=np.float64)
    expected = _plain(weigher, ctx, rows, total)
    weigher.add_to(total, ctx, rows)
    assert _same(total, expected)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.integers(1, 30),
    st.data(),
)
def test_free_reads_a_run_like_gathered_rows(n: int, data: st.DataObject) -> None:
    providers = [Provider(f"p{i}") for i in range(n)]
    inventories = {
        p.provider_id: {
            rc: {"total": data.draw(st.integers(0, 64)), "used": data.draw(st.integers(-2, 80))}
            for rc in CLASSES
        }
        for p in providers
    }
    snap = Snapshot.build(providers, inventories)
    capacity = snap.capacity_by_class()
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start, n))
    run: IntArray = np.arange(start, stop, dtype=np.int64)
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(run), max_size=len(run))))
    keep = keep.astype(np.bool_)
    kept: IntArray = run[keep]

    ctx = Context(snap, Request("r", {}), snap.used)
    ctx.consecutive(run, start)
    assert np.array_equal(ctx.free(run, capacity), _gathered(snap, run))
    ctx.narrow(run, keep, kept)
    assert np.array_equal(ctx.free(kept, capacity), _gathered(snap, kept))

    fresh = Context(snap, Request("r", {}), snap.used)
    fresh.consecutive(run, start)
    fresh.narrow(run, keep, kept)  # nothing asked before the cut: read from the run
    assert np.array_equal(fresh.free(kept, capacity), _gathered(snap, kept))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(1, 30), st.data())
def test_gather_reads_a_run_like_gathered_rows(n: int, data: st.DataObject) -> None:
    column = np.array(data.draw(st.lists(st.floats(-5, 5), min_size=n, max_size=n)))
    start = data.draw(st.integers(0, n - 1))
    run: IntArray = np.arange(start, data.draw(st.integers(start, n)), dtype=np.int64)
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(run), max_size=len(run))))
    kept: IntArray = run[keep.astype(np.bool_)]
    snap = Snapshot.build([Provider(f"p{i}") for i in range(n)], {})
    ctx = Context(snap, Request("r", {}), snap.used)
    ctx.consecutive(run, start)
    read = [ctx.gather(column, run)]
    ctx.narrow(run, keep.astype(np.bool_), kept)
    read.append(ctx.gather(column, kept))
    read.append(ctx.gather(column, kept[::-1].copy()))  # not the run: gathered one by one
    for got, rows in zip(read, (run, kept, kept[::-1]), strict=True):
        assert np.array_equal(got, column[rows])
        assert not np.shares_memory(got, column)  # its own: the weighers write in it


def _gathered(snap: Snapshot, rows: IntArray) -> IntArray:
    free: IntArray = (snap.capacity()[rows] - snap.used[rows]).T
    return free
