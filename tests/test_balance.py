"""Load balancing (scheduling/balance.py and scheduling/balancers/): which
instances move where, by each policy, with the engine's filters having
their say, and what no plan may ever do."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.balance import Balancer, Move, Plan
from scheduling.balancers.base import BalanceUnit, Instance
from scheduling.balancers.even_distribution import EvenDistribution
from scheduling.balancers.even_guest_distribution import EvenGuestDistribution
from scheduling.balancers.power_saving import PowerSaving
from scheduling.config import ConfigError, SchedulerConfig
from scheduling.model import Provider, Snapshot

ENGINE = SchedulerConfig.default().engine


@dataclass(frozen=True)
class Host:
    """A provider of ``vcpu`` VCPU and ``vcpu`` x 1024 MEMORY_MB with
    instances of the given VCPU sizes (each of 1024 MB a VCPU)."""

    name: str
    vcpu: int
    sizes: Sequence[int] = ()
    state: str = "enabled"
    groups: Mapping[str, str] = field(default_factory=dict)
    """Reservation id -> anti-affinity group."""
    tags: Mapping[str, frozenset[str]] = field(default_factory=dict)


def cluster(*hosts: Host) -> tuple[Snapshot, list[Instance]]:
    instances = [
        Instance(
            reservation_id=f"{h.name}-{k}",
            consumer_id=f"vm-{h.name}-{k}",
            project_id="p",
            provider_id=h.name,
            resources={"VCPU": size, "MEMORY_MB": size * 1024},
            anti_affinity_group=h.groups.get(f"{h.name}-{k}"),
            tags=h.tags.get(f"{h.name}-{k}", frozenset()),
        )
        for h in hosts
        for k, size in enumerate(h.sizes)
    ]
    providers = []
    for h in hosts:
        mine = [i for i in instances if i.provider_id == h.name]
        groups: dict[str, int] = {}
        tags: dict[str, int] = {}
        for i in mine:
            if i.anti_affinity_group:
                groups[i.anti_affinity_group] = groups.get(i.anti_affinity_group, 0) + 1
            for t in i.tags:
                tags[t] = tags.get(t, 0) + 1
        providers.append(
            Provider(
                h.name,
                state=h.state,
                instances=frozenset(i.consumer_id for i in mine),
                groups=groups,
                tags=tags,
            )
        )
    inventories = {
        h.name: {
            "VCPU": {"total": h.vcpu, "used": sum(h.sizes)},
            "MEMORY_MB": {"total": h.vcpu * 1024, "used": sum(h.sizes) * 1024},
        }
        for h in hosts
    }
    return Snapshot.build(providers, inventories), instances


def plan(unit: BalanceUnit | None, *hosts: Host, max_moves: int = 10) -> Plan:
    snapshot, instances = cluster(*hosts)
    return Balancer(unit, ENGINE(), max_moves).plan(snapshot, instances)


def moves(p: Plan) -> list[str]:
    return [f"{m.instance.reservation_id}: {m.source} -> {m.destination}" for m in p.moves]


# --- even distribution -------------------------------------------------------


def test_even_distribution_moves_the_smallest_instance_that_is_enough() -> None:
    # a: 9 of 10 (90%); moving 1 leaves 80% (at the threshold: enough); b is empty
    p = plan(EvenDistribution(high_utilization=80), Host("a", 10, [3, 1, 2, 3]), Host("b", 10))
    assert moves(p) == ["a-1: a -> b"]
    assert p.moves[0].why == "a: VCPU at 90.0%, above 80%"
    assert p.stopped == "evenly_distributed: no provider above 80% VCPU"


def test_even_distribution_takes_the_largest_when_none_is_enough() -> None:
    # a at 100% must lose 6 to get to 40%: the largest first; then a at 50%
    # needs only 1, and the smallest that is enough goes
    p = plan(
        EvenDistribution(high_utilization=40),
        Host("a", 10, [2, 5, 3]),
        Host("b", 20),
        Host("c", 20),
    )
    assert moves(p) == ["a-1: a -> b", "a-0: a -> c"]
    assert p.stopped == "evenly_distributed: no provider above 40% VCPU"


def test_even_distribution_never_pushes_a_destination_over_the_threshold() -> None:
    # b could hold a's instance but would go to 90%: nothing can move
    p = plan(EvenDistribution(high_utilization=80), Host("a", 10, [9]), Host("b", 10, [0]))
    assert p.moves == ()
    assert p.stopped == "nothing left can move: a: VCPU at 90.0%, above 80%"


def test_the_most_used_provider_is_relieved_first_and_others_in_turn() -> None:
    p = plan(
        EvenDistribution(high_utilization=50),
        Host("a", 10, [3, 3]),  # 60%
        Host("b", 10, [4, 4]),  # 80%
        Host("c", 20),
    )
    assert moves(p) == ["b-0: b -> c", "a-0: a -> c"]


def test_even_distribution_of_another_class() -> None:
    snapshot, instances = cluster(Host("a", 10, [5, 4]), Host("b", 10, [1]))
    unit = EvenDistribution(resource_class="MEMORY_MB", high_utilization=60)
    p = Balancer(unit, ENGINE()).plan(snapshot, instances)
    assert moves(p) == ["a-1: a -> b"]
    assert p.moves[0].why == "a: MEMORY_MB at 90.0%, above 60%"


# --- power saving --------------------------------------------------------------


def test_power_saving_empties_the_least_used_provider_onto_the_busier_ones() -> None:
    p = plan(
        PowerSaving(high_utilization=80, low_utilization=30),
        Host("a", 10, [1, 2]),  # 30%: not under
        Host("b", 10, [1]),  # 10%: emptied first
        Host("c", 10, [2]),  # 20%: then this one
        Host("d", 10),  # empty: never woken
    )
    assert all(m.destination != "d" for m in p.moves)
    assert {m.instance.reservation_id for m in p.moves} == {"b-0", "c-0"}
    assert [m.source for m in p.moves] == ["b", "c"]
    assert p.moves[0].why == "b: VCPU at 10.0%, under 30%: emptying it"


def test_power_saving_stacks_onto_the_fullest_provider_that_fits() -> None:
    config = SchedulerConfig.from_mapping({"balance": {"policy": "power_saving"}})
    snapshot, instances = cluster(Host("a", 10, [1]), Host("b", 10, [3, 3]), Host("c", 10, [2, 2]))
    p = config.balancer().plan(snapshot, instances)
    assert moves(p)[0] == "a-0: a -> b"  # the stacking weighers prefer the fullest


def test_power_saving_relieves_over_used_providers_first_and_wakes_idle_only_if_it_must() -> None:
    unit = PowerSaving(high_utilization=80, low_utilization=20)
    p = plan(unit, Host("a", 10, [5, 4]), Host("b", 10, [3]), Host("idle", 10), max_moves=1)
    assert moves(p) == ["a-1: a -> b"]  # b is busy (30%) and stays under 80% with 4 more
    p = plan(unit, Host("a", 10, [5, 4]), Host("b", 10, [6]), Host("idle", 10), max_moves=1)
    assert moves(p) == ["a-1: a -> idle"]  # b would go to 100%: only the idle one has room


def test_power_saving_never_moves_load_onto_a_less_used_provider() -> None:
    # every provider is under the low mark: load only gathers upward, even
    # with weighers that spread
    hosts = (Host("a", 10, [1]), Host("b", 10, [2]), Host("c", 10, [3]))
    p = plan(PowerSaving(high_utilization=90, low_utilization=50), *hosts)
    assert moves(p) == ["a-0: a -> b"]  # then b and c are at 30%: neither is more used
    assert p.stopped.startswith("nothing left can move: b: VCPU at 30.0%")
    # with its own (stacking) ranking, everything gathers on c
    config = SchedulerConfig.from_mapping(
        {"balance": {"policy": "power_saving", "high_utilization": 90, "low_utilization": 50}}
    )
    p = config.balancer().plan(*cluster(*hosts))
    assert moves(p) == ["a-0: a -> c", "b-0: b -> c"]
    assert p.stopped == (
        "power_saving: no provider above 90% VCPU, and none under 50% that another can empty"
    )


def test_power_saving_validates_its_marks() -> None:
    with pytest.raises(ValueError, match="must be below high_utilization"):
        PowerSaving(high_utilization=50, low_utilization=50)
    with pytest.raises(ValueError, match="percentage from 0 to 100"):
        PowerSaving(high_utilization=150)
    with pytest.raises(ValueError, match="must be a number, not 'high'"):
        EvenDistribution(high_utilization="high")  # type: ignore[arg-type]


# --- even guest distribution ------------------------------------------------------


def test_even_guest_distribution_evens_out_instance_counts() -> None:
    p = plan(
        EvenGuestDistribution(high_instance_count=3, migration_threshold=2),
        Host("a", 100, [4, 1, 2, 3, 5]),
        Host("b", 100, [1, 1, 1]),
        Host("c", 100, [1]),
    )
    # the smallest in memory first, to the only provider under 3 (b has 3);
    # a goes 5 -> 3 and c 1 -> 3
    assert moves(p) == ["a-1: a -> c", "a-2: a -> c"]
    assert p.moves[0].why == "a: 5 instances, above 3 and 4 more than the least crowded"
    assert p.stopped == (
        "vm_evenly_distributed: no provider above 3 instances and 2 more than the least crowded"
    )


def test_even_guest_distribution_options_are_checked() -> None:
    with pytest.raises(ValueError, match="migration_threshold must be a whole number of 2"):
        EvenGuestDistribution(migration_threshold=1)
    with pytest.raises(ValueError, match="high_instance_count must be a whole number of 0"):
        EvenGuestDistribution(high_instance_count=-1)


# --- evacuation, the engine's say, limits -------------------------------------------------


def test_an_evacuating_provider_is_emptied_whatever_the_policy() -> None:
    p = plan(
        None,
        Host("a", 10, [2, 3], state="evacuating"),
        Host("b", 10, [8]),
        Host("off", 10, state="disabled"),
        Host("c", 10),
    )
    assert sorted(m.instance.reservation_id for m in p.moves) == ["a-0", "a-1"]
    assert all(m.destination == "c" for m in p.moves)  # b is too full for 3, off is disabled
    assert p.moves[0].why == "a: evacuating"
    assert p.stopped == "no provider is evacuating"


def test_an_instance_s_anti_affinity_group_and_tag_rules_go_with_it() -> None:
    hosts = (
        Host("a", 10, [5, 4], groups={"a-1": "web"}),
        Host("b", 10, [1], groups={"b-0": "web"}),
        Host("c", 10, [3]),
    )
    p = plan(EvenDistribution(high_utilization=80), *hosts, max_moves=1)
    # a-1 (4 VCPU) would do, and b is the emptier; but b has a member of its group
    assert moves(p) == ["a-1: a -> c"]


def test_a_disabled_provider_is_neither_relieved_nor_a_destination() -> None:
    p = plan(
        EvenDistribution(high_utilization=50),
        Host("a", 10, [9], state="disabled"),
        Host("b", 10, [6]),
        Host("c", 10, [0], state="offline"),
    )
    assert p.moves == ()
    assert p.stopped == "nothing left can move: b: VCPU at 60.0%, above 50%"


def test_max_moves_bounds_a_plan() -> None:
    hosts = (Host("a", 10, [1] * 10), Host("b", 100))
    assert moves(plan(EvenDistribution(high_utilization=50), *hosts, max_moves=2)) == [
        "a-0: a -> b",
        "a-1: a -> b",
    ]
    p = plan(EvenDistribution(high_utilization=50), *hosts, max_moves=0)
    assert p.moves == () and p.stopped == "stopped at max_moves (0)"
    with pytest.raises(ValueError, match="max_moves"):
        Balancer(None, ENGINE(), -1)


# --- configuration ------------------------------------------------------------------------


def test_the_balance_section_builds_the_unit_and_its_ranking() -> None:
    config = SchedulerConfig.from_mapping(
        {"balance": {"policy": "power_saving", "low_utilization": 30, "max_moves": 3}}
    )
    assert isinstance(config.balance, PowerSaving) and config.balance.low == 30.0
    assert config.max_moves == 3
    multipliers = {w.name: w.multiplier for w in config.weighers}
    assert multipliers["RAMWeigher"] == multipliers["CPUWeigher"] == -1.0
    assert multipliers["IoOpsWeigher"] == -1.0  # the rest as Nova's defaults
    own = SchedulerConfig.from_mapping(
        {"balance": {"policy": "power_saving"}, "weighers": {"RAMWeigher": 2.0}}
    )
    assert [(w.name, w.multiplier) for w in own.weighers] == [("RAMWeigher", 2.0)]
    assert SchedulerConfig.default().balance is None


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"policy": "x"}, "unknown policy 'x'; known: none, evenly_distributed, power_saving"),
        ({"policy": "power_saving", "bogus": 1}, "unexpected keyword argument 'bogus'"),
        ({"policy": "none", "high_utilization": 1}, "policy none takes no options"),
        ({"max_moves": -1}, "max_moves: Input should be greater than or equal to 0"),
        ({"policy": "vm_evenly_distributed", "migration_threshold": 1}, "migration_threshold"),
        ("power_saving", "[balance] must be a table"),
    ],
)
def test_a_bad_balance_section_is_refused_clearly(section: object, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        SchedulerConfig.from_mapping({"balance": section})
    assert message in str(error.value)


# --- what no plan may do --------------------------------------------------------------------

UNITS: list[BalanceUnit | None] = [
    None,
    EvenDistribution(high_utilization=60),
    PowerSaving(high_utilization=70, low_utilization=30),
    EvenGuestDistribution(high_instance_count=2, migration_threshold=2),
]


@st.composite
def clusters(draw: st.DrawFn) -> list[Host]:
    count = draw(st.integers(1, 6))
    hosts = []
    for n in range(count):
        vcpu = draw(st.integers(1, 16))
        sizes: list[int] = []
        for size in draw(st.lists(st.integers(1, 6), max_size=6)):
            if sum(sizes) + size <= vcpu:
                sizes.append(size)
        state = draw(st.sampled_from(["enabled", "enabled", "enabled", "disabled", "evacuating"]))
        groups = {f"h{n}-{k}": "g" for k in range(len(sizes)) if draw(st.booleans())}
        hosts.append(Host(f"h{n}", vcpu, sizes, state, groups))
    return hosts


def _replay(snapshot: Snapshot, moves_: Sequence[Move]) -> list[dict[str, int]]:
    """Per move, the destination's VCPU after it as the writer sees it
    (``occupied``: every instance still where it was, every planned move's
    claim held) and as the units do (``relieved``: moved instances gone from
    their sources); asserts each move's instance was on its source."""
    vcpu = snapshot.column("VCPU")
    assert vcpu is not None
    occupied = snapshot.used[:, vcpu].copy()
    relieved = occupied.copy()
    where: dict[str, str] = {}
    after = []
    for m in moves_:
        assert where.get(m.instance.reservation_id, m.instance.provider_id) == m.source
        s, d = snapshot.row_of[m.source], snapshot.row_of[m.destination]
        amount = m.instance.resources["VCPU"]
        occupied[d] += amount
        relieved[s] -= amount
        relieved[d] += amount
        where[m.instance.reservation_id] = m.destination
        after.append({"occupied": int(occupied[d]), "relieved": int(relieved[d])})
    return after


@settings(max_examples=400, deadline=None)
@given(clusters(), st.integers(0, 3))
def test_a_plan_never_overcommits_never_moves_twice_and_is_repeatable(
    hosts: list[Host], which: int
) -> None:
    snapshot, instances = cluster(*hosts)
    unit = UNITS[which]
    p = Balancer(unit, ENGINE(), max_moves=20).plan(snapshot, instances)
    again = Balancer(unit, ENGINE(), max_moves=20).plan(snapshot, instances)
    assert p == again
    ids = [m.instance.reservation_id for m in p.moves]
    assert len(ids) == len(set(ids))
    capacity = snapshot.capacity()[:, snapshot.column("VCPU")]
    states = {h.name: h.state for h in hosts}
    groups = {h.name: Counter(h.groups.values()) for h in hosts}
    for m, after in zip(p.moves, _replay(snapshot, p.moves), strict=True):
        assert states[m.destination] == "enabled" and m.destination != m.source
        assert after["occupied"] <= capacity[snapshot.row_of[m.destination]]
        group = m.instance.anti_affinity_group
        if group:
            assert groups[m.destination][group] == 0
            groups[m.source][group] -= 1
            groups[m.destination][group] += 1
        if isinstance(unit, EvenDistribution) and states[m.source] != "evacuating":
            assert after["relieved"] * 100 <= 60 * capacity[snapshot.row_of[m.destination]]


@settings(max_examples=100, deadline=None)
@given(clusters())
def test_even_distribution_never_leaves_more_providers_over_the_mark(hosts: list[Host]) -> None:
    snapshot, instances = cluster(*[Host(h.name, h.vcpu, h.sizes) for h in hosts])
    capacity = snapshot.capacity()[:, snapshot.column("VCPU")]
    vcpu = snapshot.column("VCPU")
    before = int(np.count_nonzero(snapshot.used[:, vcpu] * 100 > 60 * capacity))
    p = Balancer(EvenDistribution(high_utilization=60), ENGINE(), 50).plan(snapshot, instances)
    used = snapshot.used[:, vcpu].copy()
    for m in p.moves:
        used[snapshot.row_of[m.source]] -= m.instance.resources["VCPU"]
        used[snapshot.row_of[m.destination]] += m.instance.resources["VCPU"]
        assert int(np.count_nonzero(used * 100 > 60 * capacity)) <= before


def test_a_snapshot_twin_with_other_placements_keeps_its_derived_columns() -> None:
    snapshot, _ = cluster(Host("a", 10, [2]), Host("b", 10))
    moved = dataclasses.replace(snapshot.providers[1], instances=frozenset({"vm-x"}))
    twin = snapshot.with_placements({1: moved}, snapshot.used + 1)
    assert twin.providers[1].instances == frozenset({"vm-x"})
    assert twin.enabled is snapshot.enabled and twin.row_of is snapshot.row_of
    assert snapshot.providers[1].instances == frozenset()  # the original is untouched
    with pytest.raises(ValueError, match="changed more than placements"):
        snapshot.with_placements({1: dataclasses.replace(moved, state="disabled")}, snapshot.used)


def test_the_placement_scriptlet_sees_why_an_instance_moves_and_may_refuse(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = (
        "def instance_placement(request, candidates):\n"
        "    log_info(request.reason)\n"
        '    if request.reason == "relocation" and request.request_id == "move-a-1":\n'
        '        return "a-1 stays"\n'
    )
    config = SchedulerConfig.from_mapping(
        {
            "scriptlet": {"source": source},
            "balance": {"policy": "evenly_distributed", "high_utilization": 80},
        }
    )
    hosts = (
        Host("a", 10, [5, 4]),
        Host("ev", 10, [1], state="evacuating"),
        Host("b", 10),
        Host("c", 10),
    )
    caplog.set_level(logging.INFO, logger="berth.scriptlet")
    p = config.balancer().plan(*cluster(*hosts))
    seen = [r.getMessage() for r in caplog.records if r.name == "berth.scriptlet"]
    # a-1 alone would be enough, but the program keeps it: a-0 goes instead
    assert moves(p) == ["ev-0: ev -> b", "a-0: a -> c"]
    assert [line.rsplit(": ", 1)[-1] for line in seen] == [
        "evacuation",
        "relocation",
        "relocation",
    ]
