"""PCIWeigher and CrossCellWeigher against Nova's documented semantics:
fewest PCI devices weighs most (so plain requests keep off PCI providers
and PCI requests stack), positive multipliers only; on a move, the source
provider's cell +1, every other -1, nothing without a move or a cell."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from scheduling.balance import Balancer
from scheduling.balancers.base import Instance
from scheduling.config import ConfigError, SchedulerConfig
from scheduling.engine import Engine
from scheduling.filters.base import Context
from scheduling.filters.pci_passthrough import PciPassthroughFilter
from scheduling.filters.resources import ResourceFilter
from scheduling.model import Aggregate, Provider, Request, Snapshot
from scheduling.topology import HostDevice
from scheduling.weighers.combine import weigh_all
from scheduling.weighers.cross_cell import CrossCellWeigher
from scheduling.weighers.pci import PCIWeigher

VF = {"vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}
PF = "0000:81:00.0"
ALIAS = [{"name": "vf", "vendor_id": "8086", "product_id": "154c"}]


def devices(n: int) -> tuple[HostDevice, ...]:
    return tuple(
        HostDevice(f"0000:81:00.{i + 1}", "8086", "154c", "type-VF", parent_address=PF)
        for i in range(n)
    )


def cluster(
    *counts: int, aggregates: dict[str, dict[str, str]] | None = None, **members: str
) -> Snapshot:
    providers = [
        Provider(
            f"p{i}",
            pci_devices=devices(n),
            aggregates=frozenset([members[f"p{i}"]]) if f"p{i}" in members else frozenset(),
        )
        for i, n in enumerate(counts)
    ]
    inventories = {p.provider_id: {"VCPU": {"total": 64}} for p in providers}
    named = {k: Aggregate(k, v) for k, v in (aggregates or {}).items()}
    return Snapshot.build(providers, inventories, named or None)


def raw(weigher: PCIWeigher | CrossCellWeigher, ctx: Context) -> list[float]:
    return [float(x) for x in weigher.weigh(ctx, np.arange(ctx.snapshot.size))]


def asking(devices_per_instance: int = 0, /, **fields: Any) -> Request:
    specs = {"pci_passthrough:alias": f"vf:{devices_per_instance}"} if devices_per_instance else {}
    return Request("r", {"VCPU": 1}, extra_specs=specs, **fields)


def test_fewest_devices_weighs_most_capped_at_99() -> None:
    ctx = Context.start(cluster(0, 1, 8, 99, 500), asking())
    assert raw(PCIWeigher(), ctx) == [100.0, 99.0, 92.0, 1.0, 1.0]


def test_plain_request_keeps_off_pci_providers() -> None:
    # Nova's example: no device asked, the host with none is preferred
    engine = Engine([ResourceFilter()], [PCIWeigher()])
    placed = engine.place(cluster(8, 0, 1), asking())
    assert placed.providers == ("p1",)


def test_pci_request_takes_the_provider_with_fewest_that_suffice() -> None:
    # one asked: the single-device host; two asked: it is filtered, the rich one wins
    engine = Engine([ResourceFilter(), PciPassthroughFilter(ALIAS)], [PCIWeigher()])
    assert engine.place(cluster(0, 8, 1), asking(1)).providers == ("p2",)
    assert engine.place(cluster(0, 8, 1), asking(2)).providers == ("p1",)


def test_earlier_picks_take_their_devices() -> None:
    ctx = Context.start(cluster(4, 6), asking(3))
    ctx.picked.append(1)
    ctx.picked.append(1)  # 6 - 2 x 3 = 0 left on p1
    assert raw(PCIWeigher(), ctx) == [96.0, 100.0]


def test_idle_when_no_provider_has_devices() -> None:
    assert PCIWeigher().idle(Context.start(cluster(0, 0), asking()))
    assert not PCIWeigher().idle(Context.start(cluster(0, 2), asking()))


@pytest.mark.parametrize("multiplier", [-1.0, -0.001, float("nan")])
def test_a_negative_multiplier_is_refused(multiplier: float) -> None:
    with pytest.raises(ValueError, match="only 0 or more"):
        PCIWeigher(multiplier)
    with pytest.raises(ConfigError, match="PCIWeigher"):
        SchedulerConfig.from_mapping({"weighers": {"PCIWeigher": multiplier}})


def test_zero_multiplier_is_allowed_and_adds_nothing() -> None:
    ctx = Context.start(cluster(0, 8), asking())
    assert weigh_all([PCIWeigher(0.0)], ctx, np.arange(2)).tolist() == [0.0, 0.0]


def test_aggregate_override_smallest_wins_and_negative_is_passed_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    aggs = {"a": {"pci_weight_multiplier": "3"}, "neg": {"pci_weight_multiplier": "-5"}}
    snap = cluster(0, 8, 8, aggregates=aggs, p1="a", p2="neg")
    ctx = Context.start(snap, asking())
    with caplog.at_level(logging.WARNING):
        got = PCIWeigher(2.0).multipliers(ctx, np.arange(3)).tolist()
    assert got == [2.0, 3.0, 2.0]
    assert "negative" in caplog.text


# --- CrossCellWeigher ---------------------------------------------------------


def cells(*names: str | None) -> Snapshot:
    providers = [
        Provider(f"p{i}", metadata={"cell": name} if name else {}) for i, name in enumerate(names)
    ]
    return Snapshot.build(providers, {p.provider_id: {"VCPU": {"total": 8}} for p in providers})


def test_the_source_cell_weighs_one_others_minus_one() -> None:
    ctx = Context.start(
        cells("c1", "c2", "c1", None), asking(reason="relocation", source_provider="p0")
    )
    assert raw(CrossCellWeigher(), ctx) == [1.0, -1.0, 1.0, -1.0]
    assert not CrossCellWeigher().idle(ctx)


@pytest.mark.parametrize(
    "fields",
    [
        {},  # not a move
        {"reason": "relocation", "source_provider": "p3"},  # the source has no cell
        {"reason": "evacuation", "source_provider": "gone"},  # not in the snapshot
    ],
)
def test_without_a_move_from_a_known_cell_it_stands_aside(fields: dict[str, str]) -> None:
    ctx = Context.start(cells("c1", "c2", "c1", None), asking(**fields))
    assert CrossCellWeigher().idle(ctx)
    assert raw(CrossCellWeigher(), ctx) == [0.0] * 4


def test_a_move_stays_in_its_cell_over_the_other_weighers() -> None:
    # p1 (other cell) has far more free RAM; Nova's 1e6 multiplier keeps the move home
    snap = Snapshot.build(
        [
            Provider("src", metadata={"cell": "c1"}),
            Provider("p1", metadata={"cell": "c2"}),
            Provider("p2", metadata={"cell": "c1"}),
        ],
        {
            "src": {"MEMORY_MB": {"total": 1024}},
            "p1": {"MEMORY_MB": {"total": 65536}},
            "p2": {"MEMORY_MB": {"total": 2048}},
        },
    )
    config = SchedulerConfig.from_mapping(
        {
            "filters": {"enabled": ["ResourceFilter"]},
            "weighers": {"RAMWeigher": 1.0, "CrossCellWeigher": 1000000.0},
        }
    )
    request = Request("m", {"MEMORY_MB": 512}, reason="relocation", source_provider="src")
    placed = config.engine().place(snap, request, among=np.array([1, 2]))
    assert placed.providers == ("p2",)
    plain = Request("n", {"MEMORY_MB": 512})
    assert config.engine().place(snap, plain, among=np.array([1, 2])).providers == ("p1",)


def test_cross_cell_aggregate_override() -> None:
    ctx = Context.start(cells("c1", "c2"), asking(reason="relocation", source_provider="p0"))
    assert CrossCellWeigher().multiplier == 1000000.0
    assert CrossCellWeigher.multiplier_key == "cross_cell_move_weight_multiplier"
    assert weigh_all([CrossCellWeigher(2.0)], ctx, np.arange(2)).tolist() == [2.0, 0.0]


def test_an_evacuation_stays_in_the_source_cell() -> None:
    # the balancer names the provider it relieves: the move goes to c (same cell)
    # though b, in another cell, has more free memory
    providers = [
        Provider("a", state="evacuating", metadata={"cell": "c1"}, instances=frozenset({"vm"})),
        Provider("b", metadata={"cell": "c2"}),
        Provider("c", metadata={"cell": "c1"}),
    ]
    inventories = {
        "a": {"MEMORY_MB": {"total": 4096, "used": 1024}},
        "b": {"MEMORY_MB": {"total": 65536}},
        "c": {"MEMORY_MB": {"total": 4096}},
    }
    vm = Instance("a-0", "vm", "p", "a", {"MEMORY_MB": 1024})
    ranking = {"RAMWeigher": 1.0}
    snap = Snapshot.build(providers, inventories)
    for weighers, where in ((ranking, "b"), (ranking | {"CrossCellWeigher": 1000000.0}, "c")):
        config = SchedulerConfig.from_mapping(
            {"filters": {"enabled": ["ComputeFilter", "ResourceFilter"]}, "weighers": weighers}
        )
        plan = Balancer(None, config.engine(), 1).plan(snap, [vm])
        assert [(m.source, m.destination) for m in plan.moves] == [("a", where)]
