"""Property: the engine never returns a provider that an enabled filter
rejects, and every pick fits after the request's earlier picks."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import Engine
from scheduling.filters.base import Context
from scheduling.model import Provider, Request, Snapshot, TagRules
from scheduling.registry import DEFAULT_FILTERS, FILTERS

REQUIRED_OPTIONS: dict[str, dict[str, Any]] = {
    "IsolatedHostsFilter": {"isolated_hosts": frozenset({"p0"}), "isolated_images": frozenset()},
}
STATES = ("enabled", "enabled", "enabled", "disabled", "offline")
TRAITS = ("HW_GPU", "SSD", "AVX512")
TAGS = ("web", "db")


@st.composite
def cases(draw: Any) -> tuple[Snapshot, Request]:
    n = draw(st.integers(1, 12))
    providers = []
    inventories: dict[str, dict[str, dict[str, Any]]] = {}
    for i in range(n):
        pid = f"p{i}"
        providers.append(
            Provider(
                pid,
                host=pid,
                state=draw(st.sampled_from(STATES)),
                availability_zone=draw(st.sampled_from((None, "az1", "az2"))),
                traits=frozenset(draw(st.sets(st.sampled_from(TRAITS)))),
                tags={t: draw(st.integers(0, 2)) for t in TAGS},
                groups={"g": draw(st.integers(0, 1))},
            )
        )
        inventories[pid] = {
            "VCPU": {
                "total": draw(st.integers(0, 16)),
                "used": draw(st.integers(0, 8)),
                "allocation_ratio": draw(st.sampled_from((1.0, 2.0, 4.0))),
            },
            "MEMORY_MB": {
                "total": draw(st.integers(0, 8192)),
                "used": draw(st.integers(0, 4096)),
                "step_size": draw(st.sampled_from((1, 256))),
            },
        }
    request = Request(
        "r",
        {"VCPU": draw(st.integers(1, 8)), "MEMORY_MB": draw(st.sampled_from((256, 512, 1000)))},
        num_instances=draw(st.integers(1, 4)),
        availability_zone=draw(st.sampled_from((None, "az1"))),
        required_traits=frozenset(draw(st.sets(st.sampled_from(TRAITS), max_size=1))),
        forbidden_traits=frozenset(draw(st.sets(st.sampled_from(TRAITS), max_size=1))),
        group_id="g",
        group_policy=draw(st.sampled_from((None, "anti-affinity", "affinity"))),
        tags=TagRules(
            require_with=frozenset(draw(st.sets(st.sampled_from(TAGS), max_size=1))),
            require_without=frozenset(draw(st.sets(st.sampled_from(TAGS), max_size=1))),
        ),
    )
    return Snapshot.build(providers, inventories), request


@settings(max_examples=300, deadline=None, derandomize=True)
@given(cases())
def test_no_pick_is_rejected_by_any_filter(case: tuple[Snapshot, Request]) -> None:
    snapshot, request = case
    filters = [FILTERS[name]() for name in DEFAULT_FILTERS]
    placement = Engine(filters).place(snapshot, request)
    rows = {p.provider_id: i for i, p in enumerate(snapshot.providers)}
    # replay the picks one by one, checking each against every filter
    ctx = Context.start(snapshot, request)
    demand = np.array([request.resources.get(rc, 0) for rc in snapshot.classes])
    for pid in placement.providers:
        row = rows[pid]
        for f in filters:
            assert f.reject(ctx, row) is None, f"{f.name} rejects {pid}"
        ctx.used[row] += demand
        ctx.picked.append(row)
    if not placement.placed:
        assert placement.trace is not None and placement.reason


@settings(max_examples=200, deadline=None, derandomize=True)
@given(cases())
def test_a_filter_that_does_not_apply_rejects_nothing(case: tuple[Snapshot, Request]) -> None:
    """The engine skips filters whose ``applies`` is False: that must never
    change an answer."""
    snapshot, request = case
    ctx = Context.start(snapshot, request)
    for name, cls in FILTERS.items():
        f = cls(**REQUIRED_OPTIONS.get(name, {}))
        if not f.applies(request):
            assert all(f.reject(ctx, row) is None for row in range(snapshot.size)), f.name
        rows = np.arange(snapshot.size, dtype=np.int64)
        assert f.mask(ctx, rows).tolist() == [
            f.reject(ctx, row) is None for row in range(snapshot.size)
        ], f.name
        dropped = rows[~f.mask(ctx, rows)]
        assert f.reasons(ctx, dropped) == [f.reject(ctx, int(r)) for r in dropped], f.name


@settings(max_examples=200, deadline=None, derandomize=True)
@given(cases())
def test_an_idle_weigher_would_have_added_nothing(case: tuple[Snapshot, Request]) -> None:
    """The handler skips weighers that say they are idle: their contribution
    must be exactly zero for every candidate."""
    from scheduling.registry import WEIGHERS
    from scheduling.weighers.base import normalize

    snapshot, request = case
    ctx = Context.start(snapshot, request)
    rows = np.arange(snapshot.size, dtype=np.int64)
    for name, cls in WEIGHERS.items():
        w = cls(weight_setting="cpu=1.0") if name == "MetricsWeigher" else cls()  # type: ignore[call-arg]
        if w.idle(ctx):
            raw = np.asarray(w.weigh(ctx, rows), dtype=np.float64)
            contribution = w.multipliers(ctx, rows) * normalize(raw, w.minval, w.maxval)
            assert not contribution.any(), name
