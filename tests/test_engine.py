"""The engine's flow: cheapest filters first, per-pick virtual consumption,
deterministic ties, traces, rotating samples, multipliers."""

from __future__ import annotations

import copy
from typing import ClassVar

import numpy as np
import pytest

from scheduling.config import SchedulerConfig
from scheduling.engine import Engine, Sampling
from scheduling.filters.base import Context, HostFilter
from scheduling.model import FloatArray, IntArray, Provider, Request, Snapshot
from scheduling.weighers.base import Weigher

CALLS: list[str] = []


class FreeVcpu(HostFilter):
    """A small stand-in for the resource filter, reading ctx.used."""

    name = "FreeVcpu"
    cost = 2
    per_pick = True

    def reject(self, ctx: Context, row: int) -> str | None:
        CALLS.append(self.name)
        free = int(ctx.snapshot.total[row, 0] - ctx.used[row, 0])
        wanted = ctx.request.resources["VCPU"]
        return None if wanted <= free else f"VCPU wanted {wanted}, free {free}"


class Enabled(HostFilter):
    name = "Enabled"
    cost = 1

    def reject(self, ctx: Context, row: int) -> str | None:
        CALLS.append(self.name)
        state = ctx.snapshot.providers[row].state
        return None if state == "enabled" else state


class MostFree(Weigher):
    name = "MostFree"
    multiplier_key: ClassVar[str] = "most_free_weight_multiplier"

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        free: FloatArray = (ctx.snapshot.total[rows, 0] - ctx.used[rows, 0]).astype(np.float64)
        return free


def cluster(vcpus: list[int], states: list[str] | None = None) -> Snapshot:
    providers = [
        Provider(f"p{i}", state=(states or ["enabled"] * len(vcpus))[i]) for i in range(len(vcpus))
    ]
    inventories = {f"p{i}": {"VCPU": {"total": v}} for i, v in enumerate(vcpus)}
    return Snapshot.build(providers, inventories)


def test_cheapest_filter_runs_first_and_the_trace_names_the_first_rejection() -> None:
    CALLS.clear()
    engine = Engine([FreeVcpu(), Enabled()], [MostFree()])
    placement = engine.place(
        cluster([1, 8, 8], ["enabled", "disabled", "enabled"]),
        Request("q", {"VCPU": 4}),
        explain=True,
    )
    assert CALLS[0] == "Enabled"
    assert placement.providers == ("p2",)
    assert placement.trace is not None
    assert [str(e) for e in placement.trace.eliminations] == [
        "p0: VCPU wanted 4, free 1 (FreeVcpu)",
        "p1: disabled (Enabled)",
    ]
    assert placement.trace.counts == {"Enabled": 1, "FreeVcpu": 1}


def test_each_pick_sees_what_earlier_picks_consumed() -> None:
    engine = Engine([FreeVcpu()], [MostFree()])
    placement = engine.place(cluster([8, 6]), Request("q", {"VCPU": 3}, num_instances=4))
    # spread: 8 -> p0 (5 left), then p1 (6 > 5), then p0 (5 > 3), then p1; none fits a fifth
    assert placement.providers == ("p0", "p1", "p0", "p1")
    assert placement.placed
    fifth = engine.place(cluster([8, 6]), Request("q", {"VCPU": 3}, num_instances=5))
    assert not fifth.placed
    assert fifth.providers == ("p0", "p1", "p0", "p1")
    assert fifth.reason == "no valid host: 4 of 5 instances placed; FreeVcpu removed 2"


def test_a_negative_multiplier_packs_and_ties_go_to_snapshot_order() -> None:
    pack = Engine([FreeVcpu()], [MostFree(multiplier=-1.0)])
    assert pack.place(cluster([8, 4, 4]), Request("q", {"VCPU": 1})).providers == ("p1",)
    spread = Engine([FreeVcpu()], [MostFree()])
    assert spread.place(cluster([4, 4, 4]), Request("q", {"VCPU": 1})).providers == ("p0",)


def test_a_failure_carries_the_full_story_without_being_asked() -> None:
    placement = Engine([FreeVcpu(), Enabled()]).place(
        cluster([1, 2], ["enabled", "offline"]), Request("q", {"VCPU": 4})
    )
    assert not placement.placed
    assert placement.trace is not None
    assert [e.provider_id for e in placement.trace.eliminations] == ["p0", "p1"]
    assert placement.trace.lines()[0] == "2 providers considered; Enabled: -1, FreeVcpu: -1"


def test_success_without_explain_builds_no_trace() -> None:
    placement = Engine([FreeVcpu()]).place(cluster([4]), Request("q", {"VCPU": 1}))
    assert placement.placed and placement.trace is None


def test_samples_rotate_over_the_feasible_providers() -> None:
    engine = Engine([FreeVcpu()], [MostFree(multiplier=-1.0)], Sampling(percentage=20, minimum=2))
    snapshot = cluster([4] * 10)
    picks = [engine.place(snapshot, Request(f"q{k}", {"VCPU": 1})).providers[0] for k in range(5)]
    assert picks == ["p0", "p2", "p4", "p6", "p8"]


def test_a_sample_that_runs_past_the_last_provider_wraps_to_the_first() -> None:
    engine = Engine([FreeVcpu()], [MostFree(multiplier=-1.0)], Sampling(percentage=30, minimum=2))
    snapshot = cluster([4] * 10)
    picks = [engine.place(snapshot, Request(f"q{k}", {"VCPU": 1})).providers[0] for k in range(5)]
    # windows [0..2], [3..5], [6..8], [9, 0, 1], [2..4]; ties go to the window's first row
    assert picks == ["p0", "p3", "p6", "p9", "p2"]


def test_later_instances_see_earlier_picks_and_the_snapshot_is_left_alone() -> None:
    snapshot = cluster([4, 4, 2])
    placement = Engine([FreeVcpu()], [MostFree()]).place(
        snapshot, Request("q", {"VCPU": 3}, num_instances=2)
    )
    assert placement.providers == ("p0", "p1")
    assert snapshot.used.tolist() == [[0], [0], [0]]
    again = Engine([FreeVcpu()], [MostFree()]).place(
        snapshot, Request("q", {"VCPU": 3}, num_instances=3)
    )
    assert not again.placed and again.providers == ("p0", "p1")


def test_a_sample_that_cannot_place_falls_back_to_every_provider() -> None:
    engine = Engine([FreeVcpu()], [MostFree()], Sampling(percentage=20, minimum=2))
    snapshot = cluster([1, 1, 1, 1, 1, 1, 1, 1, 1, 8])
    placement = engine.place(snapshot, Request("q", {"VCPU": 4}))
    assert placement.providers == ("p9",)


def test_with_used_changes_only_the_usage() -> None:
    snapshot = cluster([4, 8], ["enabled", "disabled"])
    twin = snapshot.with_used(np.array([[3], [1]], dtype=np.int64))
    assert twin.used.tolist() == [[3], [1]] and snapshot.used.tolist() == [[0], [0]]
    assert twin.enabled.tolist() == [True, False] and twin.row_of == {"p0": 0, "p1": 1}
    placement = Engine([FreeVcpu(), Enabled()]).place(twin, Request("q", {"VCPU": 2}))
    assert not placement.placed  # p0 has 1 left, p1 is disabled


@pytest.mark.parametrize(
    ("array", "value"),
    [
        ("reserved", 4),
        ("allocation_ratio", 0.5),
        ("min_unit", 16),
        ("max_unit", 4),
        ("step_size", 3),
    ],
)
def test_an_engine_reused_across_snapshots_sees_every_inventory_change(
    array: str, value: float
) -> None:
    # a refreshed snapshot shares the arrays that did not change (see
    # consumers.snapshot_source): the engine's caches must notice the one that did
    inventories = {f"p{i}": {"VCPU": {"total": 8}} for i in range(3)}
    snapshot = Snapshot.build([Provider(f"p{i}") for i in range(3)], inventories)
    engine = SchedulerConfig.default().engine()
    request = Request("r", {"VCPU": 8})
    assert engine.place(snapshot, request).placed
    twin = copy.copy(snapshot)
    changed = getattr(snapshot, array).copy()
    changed[:, 0] = value
    object.__setattr__(twin, array, changed)
    assert not SchedulerConfig.default().engine().place(twin, request).placed
    assert not engine.place(twin, request).placed
