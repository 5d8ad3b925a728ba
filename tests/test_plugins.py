"""An operator's own filters, weighers and balance policies, named by import
path in the scheduler configuration."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.config import ConfigError, SchedulerConfig
from scheduling.model import Provider, Request, Snapshot
from tests.plugins import Drain, RackFilter
from tests.test_balance import Host, cluster


def _racks() -> Snapshot:
    providers = [Provider(f"n{i}", metadata={"rack": "r1" if i < 2 else "r2"}) for i in range(4)]
    return Snapshot.build(providers, {p.provider_id: {"VCPU": {"total": 8}} for p in providers})


def test_a_plug_in_filter_and_weigher_take_part_in_every_decision() -> None:
    config = SchedulerConfig.from_mapping(
        {
            "filters": {
                "enabled": ["ResourceFilter", "tests.plugins:RackFilter"],
                "tests.plugins:RackFilter": {"rack": "r2"},
            },
            "weighers": {"tests.plugins:LastFirstWeigher": 1.0},
        }
    )
    assert isinstance(config.filters[1], RackFilter) and config.filters[1].rack == "r2"
    placement = config.engine().place(_racks(), Request("q", {"VCPU": 1}), explain=True)
    assert placement.providers == ("n3",)  # rack r2 (n2, n3), the last first
    assert placement.trace is not None
    assert [str(e) for e in placement.trace.eliminations] == [
        "n0: in rack r1, not r2 (RackFilter)",
        "n1: in rack r1, not r2 (RackFilter)",
    ]


def test_a_plug_in_balance_policy_plans_moves() -> None:
    config = SchedulerConfig.from_mapping(
        {"balance": {"policy": "tests.plugins:Drain", "provider_id": "a"}}
    )
    assert isinstance(config.balance, Drain)
    plan = config.balancer().plan(*cluster(Host("a", 10, [1, 2]), Host("b", 10), Host("c", 10)))
    assert sorted(m.instance.reservation_id for m in plan.moves) == ["a-0", "a-1"]
    assert {m.destination for m in plan.moves} <= {"b", "c"}
    assert plan.stopped == "drain: nothing to move"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"filters": {"enabled": ["NoSuchFilter"]}},
            "unknown filter 'NoSuchFilter'; known: AggregateImagePropertiesIsolation, "
            "AggregateInstanceExtraSpecsFilter",
        ),
        (
            {"filters": {"enabled": ["tests.nowhere:X"]}},
            "filter 'tests.nowhere:X': cannot import tests.nowhere: No module named",
        ),
        (
            {"filters": {"enabled": ["tests.plugins:Missing"]}},
            "filter 'tests.plugins:Missing': tests.plugins.Missing is nothing, not a HostFilter",
        ),
        (
            {"weighers": {"tests.plugins:RackFilter": 1.0}},
            "weigher 'tests.plugins:RackFilter': tests.plugins.RackFilter is "
            "<class 'tests.plugins.RackFilter'>, not a Weigher",
        ),
        (
            {"balance": {"policy": "tests.plugins:NOT_A_FILTER"}},
            "[balance] policy 'tests.plugins:NOT_A_FILTER': tests.plugins.NOT_A_FILTER is "
            "'a string', not a BalanceUnit",
        ),
        (
            {"filters": {"enabled": ["tests.plugins:RackFilter"]}},
            "[filters.tests.plugins:RackFilter]: RackFilter.__init__() missing 1 required",
        ),
    ],
)
def test_a_plug_in_that_cannot_be_used_is_refused_clearly(
    section: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        SchedulerConfig.from_mapping(section)
    assert message in str(error.value)
