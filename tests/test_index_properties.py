"""Properties of bounded placement and its feasibility index
(scheduling/index.py): the index finds exactly the providers a full scan
lets through, bounded mode never answers "no valid host" when a full scan
places the request, with room for every candidate it decides as a full scan
does, and an index kept up to date twin after twin draws what a fresh one
draws."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from scheduling.engine import Bounded, Engine
from scheduling.filters.base import Context, HostFilter
from scheduling.model import Aggregate, Hints, Provider, Request, Snapshot, TagRules
from scheduling.registry import DEFAULT_FILTERS, DEFAULT_WEIGHERS, FILTERS, WEIGHERS

MORE_FILTERS = (
    "AggregateInstanceExtraSpecsFilter",
    "AggregateMultiTenancyIsolation",
    "AggregateTypeAffinityFilter",
    "ProjectRestrictionFilter",
    "NumInstancesFilter",
    "IoOpsFilter",
    "IsolatedAggregatesFilter",
    "ImageTypeSupportFilter",
)
STATES = ("enabled", "enabled", "enabled", "disabled")
TRAITS = ("HW_GPU", "SSD", "COMPUTE_IMAGE_TYPE_RAW")
AGGREGATES = {
    "fast": Aggregate("fast", {"cpu_allocation_ratio": "8.0", "availability_zone": "az3"}),
    "tenants": Aggregate("tenants", {"filter_tenant_id": "p1,p2", "instance_type": "small"}),
    "gpu": Aggregate("gpu", {"trait:HW_GPU": "required", "ram_weight_multiplier": "2.0"}),
    "plain": Aggregate("plain", {"allowed_projects": "p1"}),
}
CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink)
"""Without explain, whose tracing makes shrinking a failure here take minutes."""


_SHARES = (0.0, 0.25, 0.5, 1.0)
_INVENTORY = st.tuples(
    st.integers(0, 9),  # 0: the provider lacks the class
    st.sampled_from(_SHARES[1:]),  # total, as a share of the class's largest
    st.sampled_from((*_SHARES, 1.25)),  # used, as a share of the total
    st.sampled_from((1.0, 4.0)),
    st.sampled_from((1, 1, 1, 4)),
    st.sampled_from((2**31 - 1, 16)),
)
_PROVIDER = st.tuples(
    st.sampled_from(STATES),
    st.sampled_from((None, "az1", "az2")),
    st.sets(st.sampled_from(TRAITS), max_size=2),
    st.sampled_from(
        (
            frozenset(),
            frozenset(),
            frozenset({"fast"}),
            frozenset({"fast", "tenants"}),
            *(frozenset({name}) for name in AGGREGATES),
        )
    ),
    st.booleans(),
    st.integers(0, 9),
    st.booleans(),
    st.integers(0, 1),
    st.integers(0, 1),
    st.tuples(_INVENTORY, _INVENTORY, _INVENTORY),
    st.sampled_from(({}, {}, {"allowed_projects": "p1"})),
)
_LARGEST = (64, 16_384, 2_048)


def _built(drawn: list[Any]) -> Snapshot:
    records: list[Provider] = []
    inventories: dict[str, dict[str, dict[str, Any]]] = {}
    for i, (state, zone, traits, aggs, kvm, io, hosts, group, web, inv, meta) in enumerate(drawn):
        pid = f"p{i:02d}"
        records.append(
            Provider(
                pid,
                host=pid,
                state=state,
                availability_zone=zone,
                traits=frozenset(traits),
                aggregates=frozenset(aggs),
                capabilities={"hypervisor_type": "kvm"} if kvm else {},
                num_io_ops=io,
                instances=frozenset({"i1"}) if hosts else frozenset(),
                groups={"g": group},
                tags={"web": web},
                metadata=meta,
            )
        )
        inventories[pid] = {}
        for rc, high, (lack, total, used, ratio, step, most) in zip(
            CLASSES, _LARGEST, inv, strict=True
        ):
            if lack:
                amount = int(total * high)
                inventories[pid][rc] = {
                    "total": amount,
                    "used": int(used * amount),
                    "allocation_ratio": ratio,
                    "step_size": step,
                    "max_unit": most,
                }
    return Snapshot.build(records, inventories, AGGREGATES)


def snapshots() -> st.SearchStrategy[Snapshot]:
    return st.lists(_PROVIDER, min_size=1, max_size=24).map(_built)


_AMOUNT = st.sampled_from((None, 0, 1, 4, 16, 512, 4096))


def _rarely(*values: Any) -> st.SearchStrategy[Any]:
    """The first of ``values`` most of the time: each constraint is rare, so
    that most requests have providers to choose from."""
    return st.sampled_from((values[0],) * (12 * len(values)) + values[1:])


_REQUEST = st.tuples(
    st.tuples(_AMOUNT, _AMOUNT, _AMOUNT),
    _rarely("p1", "p3"),
    st.integers(1, 4),
    _rarely("small", "large"),
    _rarely(False, True),
    _rarely(False, True),
    _rarely(None, "az1", "az3"),
    _rarely(frozenset(), *(frozenset({t}) for t in TRAITS)),
    _rarely(frozenset(), *(frozenset({t}) for t in TRAITS)),
    _rarely(False, True),
    _rarely(None, "anti-affinity", "affinity"),
    _rarely(False, True),
    _rarely(frozenset(), frozenset({"p00"}), frozenset({"p03"})),
)


def _request(drawn: Any) -> Request:
    amounts, project, instances, flavor, kvm, raw, zone, required, forbidden = drawn[:9]
    avoid, policy, not_web, tried = drawn[9:]
    resources = {rc: a for rc, a in zip(CLASSES, amounts, strict=True) if a is not None}
    return Request(
        "r",
        resources or {"VCPU": 1},
        project_id=project,
        num_instances=instances,
        flavor_name=flavor,
        extra_specs={"capabilities:hypervisor_type": "kvm"} if kvm else {},
        image_properties={"disk_format": "raw"} if raw else {},
        availability_zone=zone,
        required_traits=frozenset(required),
        forbidden_traits=frozenset(forbidden),
        hints=Hints(different_host=frozenset({"i1"}) if avoid else frozenset()),
        group_id="g",
        group_policy=policy,
        tags=TagRules(require_without=frozenset({"web"}) if not_web else frozenset()),
        tried_providers=frozenset(tried),
    )


def requests() -> st.SearchStrategy[Request]:
    return _REQUEST.map(_request)


def _filters() -> list[HostFilter]:
    return [FILTERS[name]() for name in (*DEFAULT_FILTERS, *MORE_FILTERS)]


def _engine(mode: str, candidates: int = 64, levels: int = 4, packing: bool = False) -> Engine:
    sign = -1.0 if packing else 1.0
    weighers = [
        WEIGHERS[name](multiplier=m * (sign if name in ("RAMWeigher", "CPUWeigher") else 1.0))
        for name, m in DEFAULT_WEIGHERS.items()
    ]
    bounded = Bounded(mode, candidates=candidates, levels=levels)  # type: ignore[arg-type]
    return Engine(_filters(), weighers, bounded=bounded)


@settings(phases=_PHASES, max_examples=300, deadline=None, derandomize=True)
@given(snapshots(), requests(), requests())
def test_a_static_filter_answers_requests_it_reads_alike_alike(
    snapshot: Snapshot, one: Request, other: Request
) -> None:
    """What a static filter says it reads of a request (``request_key``) is
    all it reads: two requests alike in it get the same answer from every
    provider, so bounded placement may share its verdicts between them."""
    alike = 0
    for f in _filters():
        key = f.request_key(one)
        if not f.static or key is None or key != f.request_key(other):
            continue
        alike += 1
        first, second = Context.start(snapshot, one), Context.start(snapshot, other)
        for row in range(snapshot.size):
            assert (f.reject(first, row) is None) == (f.reject(second, row) is None), f.name
    assert alike  # the compute filter reads nothing of a request


@settings(phases=_PHASES, max_examples=300, deadline=None, derandomize=True)
@given(snapshots(), requests(), st.sampled_from((1, 3, 256)), st.booleans())
def test_the_index_finds_exactly_what_a_full_scan_lets_through(
    snapshot: Snapshot, request: Request, levels: int, packing: bool
) -> None:
    full = _engine("full").feasible(snapshot, request)
    indexed = _engine("bounded", levels=levels, packing=packing).feasible(snapshot, request)
    assert indexed.tolist() == full.tolist()


@settings(phases=_PHASES, max_examples=300, deadline=None, derandomize=True)
@given(snapshots(), requests(), st.booleans())
def test_with_room_for_every_candidate_bounded_decides_as_a_full_scan(
    snapshot: Snapshot, request: Request, packing: bool
) -> None:
    full = _engine("full", packing=packing).place(snapshot, request)
    bounded = _engine("bounded", candidates=1000, packing=packing).place(snapshot, request)
    assert (bounded.providers, bounded.weights) == (full.providers, full.weights)
    assert bounded.placed == full.placed


@settings(phases=_PHASES, max_examples=300, deadline=None, derandomize=True)
@given(snapshots(), requests(), st.integers(1, 3), st.booleans())
def test_bounded_never_says_no_valid_host_when_a_full_scan_places(
    snapshot: Snapshot, request: Request, candidates: int, packing: bool
) -> None:
    full = _engine("full", packing=packing).place(snapshot, request)
    engine = _engine("bounded", candidates=candidates, packing=packing)
    bounded = engine.place(snapshot, request)
    assert bounded.placed == full.placed
    if bounded.bounded:
        assert bounded.scored <= max(candidates, request.num_instances)
    # every pick passes every filter after the earlier picks
    ctx = Context.start(snapshot, request)
    demand = np.array([request.resources.get(rc, 0) for rc in snapshot.classes], dtype=np.int64)
    for pid in bounded.providers:
        row = snapshot.row_of[pid]
        for f in engine.once + engine.each_pick:
            assert f.reject(ctx, row) is None, f"{f.name} rejects {pid}"
        ctx.used[row] += demand
        ctx.picked.append(row)


_STATE = st.sampled_from(STATES)
_TRAITS = st.sets(st.sampled_from(TRAITS), max_size=2)
_OPS = st.lists(
    st.tuples(
        st.sampled_from(("use", "use", "in-place", "record", "inventory", "back", "anew")),
        st.integers(0, 23),
        st.integers(-8, 8),
    ),
    max_size=12,
)


def _apply(history: list[Snapshot], op: tuple[str, int, int], data: st.DataObject) -> Snapshot:
    """One twin of the latest snapshot (or an earlier one again); the
    snapshots of ``history`` may be placed on again."""
    kind, row, amount = op
    latest = history[-1]
    row %= latest.size
    if kind == "use":  # a share of the row's capacity taken or given back
        used = latest.used.copy()
        step = latest.capacity()[row] // 8
        used[row] = np.maximum(used[row] + amount * step, 0)
        return latest.with_used(used, [row])
    if kind == "in-place":  # the scheduler's way: its own copy, changed in place
        history.pop()  # superseded by its twin: never placed on again
        latest.used[row] += abs(amount) * (latest.capacity()[row] // 8)
        return latest.with_used(latest.used, [row])
    if kind == "record":
        before = latest.providers[row]
        record = dataclasses.replace(
            before, state=data.draw(_STATE), traits=frozenset(data.draw(_TRAITS))
        )
        return latest.with_records({row: record})
    if kind == "inventory":
        total = latest.total.copy()
        total[row] = np.maximum(total[row] + amount * (total[row] // 4 + 1), 0)
        return latest.with_arrays([row], total=total)
    if kind == "back":
        return history[amount % len(history)]
    return latest.with_used(latest.used.copy())  # lineage unknown: a rebuild


@settings(phases=_PHASES, max_examples=150, deadline=None, derandomize=True)
@given(snapshots(), _OPS, st.lists(requests(), min_size=1, max_size=3), st.data())
def test_an_index_kept_up_to_date_draws_what_a_fresh_one_draws(
    first: Snapshot, ops: list[tuple[str, int, int]], asked: list[Request], data: st.DataObject
) -> None:
    kept = _engine("bounded", candidates=2, levels=8)
    history = [first]
    for op in ops:
        history.append(_apply(history, op, data))
        snapshot = history[-1]
        fresh = _engine("bounded", candidates=2, levels=8)
        index, capacity = kept.index(snapshot), kept._resources.capacity(snapshot)  # type: ignore[union-attr]
        index.check(snapshot, capacity)
        rows = range(snapshot.size)
        assert [index.where(r) for r in rows] == [fresh.index(snapshot).where(r) for r in rows]
        for request in asked:
            assert kept.feasible(snapshot, request).tolist() == (
                _engine("full").feasible(snapshot, request).tolist()
            )
            decided, again = kept.place(snapshot, request), fresh.place(snapshot, request)
            # the same decision (how many providers were read to reach it may differ:
            # the kept engine shares the walk of requests of the same kind)
            assert (decided.providers, decided.weights) == (again.providers, again.weights)


_SHAPES = st.lists(
    st.tuples(st.tuples(_AMOUNT, _AMOUNT, _AMOUNT), st.booleans()), min_size=1, max_size=6
)


@settings(phases=_PHASES, max_examples=150, deadline=None, derandomize=True)
@given(snapshots(), requests(), _SHAPES, st.sampled_from((1, 2, 64)), st.booleans())
def test_a_shape_drawn_from_another_of_the_same_kind_is_drawn_as_afresh(
    first: Snapshot, asked: Request, shapes: list[Any], candidates: int, packing: bool
) -> None:
    """Requests of two kinds (the second in another zone) and several
    shapes, each pick taken: the kept engine starts a shape from the rows
    kept for a smaller one of the same kind, and decides and finds exactly
    what a fresh engine and a full scan do."""
    zone = "az2" if asked.availability_zone is None else None
    kinds = (asked, dataclasses.replace(asked, availability_zone=zone))
    kept = _engine("bounded", candidates=candidates, levels=8, packing=packing)
    snapshot = first
    for amounts, other in [((1, None, None), False), *shapes]:
        resources = {rc: a for rc, a in zip(CLASSES, amounts, strict=True) if a is not None}
        request = dataclasses.replace(kinds[other], resources=resources or {"VCPU": 1})
        fresh = _engine("bounded", candidates=candidates, levels=8, packing=packing)
        decided, again = kept.place(snapshot, request), fresh.place(snapshot, request)
        assert (decided.providers, decided.weights) == (again.providers, again.weights)
        assert kept.feasible(snapshot, request).tolist() == (
            _engine("full").feasible(snapshot, request).tolist()
        )
        if decided.placed:  # the picks taken, as the scheduler's wave takes them
            used = snapshot.used.copy()
            rows = [snapshot.row_of[pid] for pid in decided.providers]
            for row in rows:
                for j, rc in enumerate(snapshot.classes):
                    used[row, j] += request.resources.get(rc, 0)
            snapshot = snapshot.with_used(used, rows)


def test_a_larger_shape_starts_from_the_rows_kept_for_a_smaller_one() -> None:
    """No walk for the larger shape: its rows are the smaller's that hold it,
    up to where the smaller's walk stopped."""
    records = [Provider(f"p{i:03d}") for i in range(400)]
    inventories = {
        p.provider_id: {"VCPU": {"total": 64, "used": (7 * i) % 60}, "MEMORY_MB": {"total": 4096}}
        for i, p in enumerate(records)
    }
    snapshot = Snapshot.build(records, inventories)
    engine = _engine("bounded", candidates=4, levels=16)
    small, large = Request("s", {"VCPU": 1}), Request("l", {"VCPU": 8, "MEMORY_MB": 512})
    engine.place(snapshot, small)
    index = engine.index(snapshot)
    kept = {shape: drawn.boundary for (_, shape), drawn in index._drawn.items()}
    walked = index._walk
    index._walk = None  # type: ignore[assignment,method-assign]  # a walk would fail
    placed = engine.place(snapshot, large)
    index._walk = walked  # type: ignore[method-assign]
    fresh = _engine("bounded", candidates=4, levels=16).place(snapshot, large)
    assert placed.placed and (placed.providers, placed.weights) == (fresh.providers, fresh.weights)
    boundaries = {shape: drawn.boundary for (_, shape), drawn in index._drawn.items()}
    assert boundaries[((1, 8), (0, 512))] == kept[((1, 1),)] is not None


def test_a_request_naming_a_zone_starts_from_the_rows_kept_for_one_naming_none() -> None:
    """No walk for the zone's request: the compute filter reads nothing of
    a request, so the rows kept for a request that names no zone (the
    compute filter's alone) hold every one in the zone up to where that
    walk stopped; the zone filter's verdicts are asked only of the groups
    among them, and a request that differs in what no filter reads (the
    user) is of the same kind."""
    records = [
        Provider(f"p{i:03d}", availability_zone=("az1", "az2")[i % 2], state=STATES[i % 4])
        for i in range(400)
    ]
    inventories = {
        p.provider_id: {"VCPU": {"total": 64, "used": (7 * i) % 60}} for i, p in enumerate(records)
    }
    snapshot = Snapshot.build(records, inventories)
    engine = _engine("bounded", candidates=4, levels=16)
    anywhere = Request("a", {"VCPU": 2}, project_id="p1")
    zoned = Request("z", {"VCPU": 2}, project_id="p1", availability_zone="az1")
    elsewhere = dataclasses.replace(zoned, request_id="e", user_id="u2")
    engine.place(snapshot, anywhere)
    index = engine.index(snapshot)
    walked = index._walk
    index._walk = None  # type: ignore[assignment,method-assign]  # a walk would fail
    placed = [engine.place(snapshot, r) for r in (zoned, elsewhere)]
    index._walk = walked  # type: ignore[method-assign]
    for request, decided in zip((zoned, elsewhere), placed, strict=True):
        fresh = _engine("bounded", candidates=4, levels=16).place(snapshot, request)
        assert decided.placed and decided.bounded
        assert (decided.providers, decided.weights) == (fresh.providers, fresh.weights)
        assert all(
            snapshot.providers[snapshot.row_of[p]].availability_zone == "az1"
            for p in decided.providers
        )
    assert len(index._passing) == 2  # both users' requests in az1 are one kind


@settings(phases=_PHASES, max_examples=200, deadline=None, derandomize=True)
@given(snapshots(), st.integers(0, 23), st.sampled_from((1, 2, 256)), st.booleans())
def test_a_request_for_exactly_what_a_provider_has_free_finds_it(
    snapshot: Snapshot, row: int, levels: int, packing: bool
) -> None:
    """Exact fits are where a bound off by one would lose a provider."""
    row %= snapshot.size
    free = snapshot.capacity()[row] - snapshot.used[row]
    resources = {rc: max(int(free[j]), 1) for j, rc in enumerate(snapshot.classes)}
    request = Request("exact", resources or {"VCPU": 1})
    full = _engine("full").feasible(snapshot, request)
    indexed = _engine("bounded", levels=levels, packing=packing).feasible(snapshot, request)
    assert indexed.tolist() == full.tolist()


@settings(phases=_PHASES, max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(st.integers(0, 199), max_size=60, unique=True),
    st.lists(st.tuples(st.booleans(), st.integers(0, 199)), max_size=120),
    st.lists(st.integers(1, 40), min_size=1, max_size=5),
)
def test_a_bucket_reads_its_rows_in_order_as_they_come_and_go(
    first: list[int], moves: list[tuple[bool, int]], heads: list[int]
) -> None:
    from scheduling.index import _Bucket

    b = 7
    bucket_of = np.full(200, 3, dtype=np.int64)
    bucket_of[first] = b
    bucket = _Bucket(np.asarray(sorted(first), dtype=np.int64))
    for arrive, row in moves:
        if arrive and bucket_of[row] != b:
            bucket_of[row] = b
            bucket.added.append(row)
        elif not arrive and bucket_of[row] == b:
            bucket_of[row] = 3
            bucket.stale += 1
        for m in heads:
            rows, complete = bucket.head(m, bucket_of, b)
            everyone = np.flatnonzero(bucket_of == b).tolist()
            assert rows.tolist() == everyone[: len(rows)]
            assert len(rows) >= min(m, len(everyone))
            assert not complete or rows.tolist() == everyone


def test_no_valid_host_comes_from_the_index_and_explain_still_says_why() -> None:
    records = [Provider(f"p{i}", state="disabled" if i % 5 == 0 else "enabled") for i in range(40)]
    inventories = {p.provider_id: {"VCPU": {"total": 4, "used": 3}} for p in records}
    snapshot = Snapshot.build(records, inventories)
    engine = _engine("bounded")
    placement = engine.place(snapshot, Request("big", {"VCPU": 2}))
    assert not placement.placed and placement.bounded and placement.trace is None
    assert placement.reason == "no valid host: 0 of 1 instances placed"
    assert placement.examined == 0  # every bucket's bound said no: nobody read one by one
    explained = engine.place(snapshot, Request("big", {"VCPU": 2}), explain=True)
    assert not explained.bounded and explained.trace is not None
    assert explained.trace.counts == {"ComputeFilter": 8, "ResourceFilter": 32}


def test_a_walk_kept_through_thousands_of_picks_draws_what_a_fresh_one_draws() -> None:
    """Picks taken and given back for longer than the index's log of rows
    re-read holds (it forgets its oldest half on the way): the kept
    engine, which brings each kind's walk up to date from that log,
    decides as a fresh engine does and finds what a full scan finds."""
    from bench.scale import cluster, engines
    from bench.scale import requests as mix

    snapshot = cluster(2_000, seed=5)
    full, kept = engines()
    leaving: list[tuple[int, np.ndarray[Any, Any]]] = []
    for k, request in enumerate(mix(5_000, seed=9)):
        decided = kept.place(snapshot, request)
        if k % 7 == 0:
            _, fresh = engines()
            again = fresh.place(snapshot, request)
            assert (decided.providers, decided.weights) == (again.providers, again.weights)
            found = kept.feasible(snapshot, request).tolist()
            assert found == full.feasible(snapshot, request).tolist()
        used = snapshot.used.copy()
        changed = []
        if decided.placed:
            row = snapshot.row_of[decided.providers[0]]
            demand = np.array([request.resources.get(rc, 0) for rc in snapshot.classes])
            used[row] += demand
            leaving.append((row, demand))
            changed.append(row)
        if len(leaving) > 40:  # the oldest given back: the cluster stays as full
            row, demand = leaving.pop(0)
            used[row] -= demand
            changed.append(row)
        snapshot = snapshot.with_used(used, changed)
    assert kept.index(snapshot)._log_base > 0  # the oldest half was forgotten
    assert kept.index_builds == 1


def test_a_walk_kept_from_before_the_log_forgot_is_walked_afresh() -> None:
    """A kind of request asked once, then not again while the index
    re-reads more rows than its log keeps (it forgets its oldest half):
    the providers emptied just after it was asked are noted only in the
    forgotten half, so its kept walk must be taken afresh, not brought up
    to date from what the log still holds, which would miss them (and
    draw the providers it held before, now worse than the emptied ones)."""
    from bench.scale import cluster, engines

    snapshot = cluster(2_000, seed=5)
    full, kept = engines()
    rare = Request("rare", {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1})
    first = kept.place(snapshot, rare)  # its walk is kept
    # fifty of the largest feasible providers not drawn first, emptied: the best now
    capacity = snapshot.capacity_by_class()
    size = (capacity / capacity.max(axis=1, keepdims=True)).sum(axis=0)
    taken = {snapshot.row_of[pid] for pid in first.providers}
    feasible = [int(r) for r in full.feasible(snapshot, rare) if r not in taken]
    emptied = sorted(feasible, key=lambda r: -size[r])[:50]
    used = snapshot.used.copy()
    used[emptied] = 0
    snapshot = snapshot.with_used(used, emptied)
    index = kept.index(snapshot)
    noted = index._epoch()  # the emptied rows are noted before this
    idle = next(r for r in range(snapshot.size) if r not in emptied)
    while index._log_base < noted:  # one row re-read, unchanged, again and again
        snapshot = snapshot.with_used(snapshot.used.copy(), [idle])
        index = kept.index(snapshot)
    decided = kept.place(snapshot, rare)
    _, fresh = engines()
    again = fresh.place(snapshot, rare)
    assert decided.providers[0] in {snapshot.providers[r].provider_id for r in emptied}
    assert (decided.providers, decided.weights) == (again.providers, again.weights)
    assert kept.index_builds == 1
