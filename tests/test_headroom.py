"""Headroom: how many more instances of a shape fit. It must agree with the
engine itself: a request for exactly that many instances is placed, one
more is not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from scheduling.config import SchedulerConfig
from scheduling.headroom import headroom
from scheduling.model import Aggregate, Provider, Request, Snapshot
from tests.builders import claim, consume, provider
from tests.conftest import Cli


def cluster(aggregates: dict[str, Aggregate] | None = None) -> Snapshot:
    """n0: 8 VCPU, 16 GiB (2 GiB used); n1: 16 VCPU (2 reserved), 32 GiB;
    n2: 32 VCPU at ratio 2, 64 GiB, in aggregate "slow"; n3 disabled."""
    providers = [
        Provider("n0"),
        Provider("n1"),
        Provider("n2", aggregates=frozenset({"slow"})),
        Provider("n3", state="disabled"),
    ]
    inventories: dict[str, dict[str, dict[str, float]]] = {
        "n0": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 16_384, "used": 2_048}},
        "n1": {"VCPU": {"total": 16, "reserved": 2}, "MEMORY_MB": {"total": 32_768}},
        "n2": {"VCPU": {"total": 32, "allocation_ratio": 2.0}, "MEMORY_MB": {"total": 65_536}},
        "n3": {"VCPU": {"total": 64}, "MEMORY_MB": {"total": 131_072}},
    }
    return Snapshot.build(providers, inventories, aggregates)


def engine_default() -> Any:
    return SchedulerConfig.default().engine()


def test_each_provider_takes_what_its_free_capacity_holds_of_every_class() -> None:
    room = headroom(engine_default(), cluster(), Request("r", {"VCPU": 4, "MEMORY_MB": 4_096}))
    # n0: min(8/4, 14336/4096); n1: min(14/4, 8); n2: min(64/4, 16); n3 disabled
    assert room.providers == {"n0": 2, "n1": 3, "n2": 16}
    assert room.instances == 21


def test_an_aggregates_allocation_ratio_counts_as_the_resource_filter_counts_it() -> None:
    slow = {"slow": Aggregate("slow", {"cpu_allocation_ratio": "1.0"})}
    room = headroom(engine_default(), cluster(slow), Request("r", {"VCPU": 4}))
    assert room.providers["n2"] == 8  # 32 x 1.0, not 32 x 2.0


def test_the_filters_decide_which_providers_count() -> None:
    engine = engine_default()
    # a unit the inventory does not allow, on every provider
    assert headroom(engine, cluster(), Request("r", {"VCPU": 4, "DISK_GB": 1})).instances == 0
    zoned = Snapshot.build(
        [Provider("a", availability_zone="az1"), Provider("b", availability_zone="az2")],
        {"a": {"VCPU": {"total": 8}}, "b": {"VCPU": {"total": 8}}},
    )
    room = headroom(engine, zoned, Request("r", {"VCPU": 2}, availability_zone="az2"))
    assert room.providers == {"b": 4}


def test_an_anti_affine_group_takes_at_most_max_server_per_host_a_provider() -> None:
    request = Request(
        "r", {"VCPU": 1}, group_id="g", group_policy="anti-affinity", max_server_per_host=2
    )
    assert headroom(engine_default(), cluster(), request).providers == {"n0": 2, "n1": 2, "n2": 2}


_inventory = st.fixed_dictionaries(
    {
        "VCPU": st.fixed_dictionaries(
            {
                "total": st.integers(0, 24),
                "used": st.integers(0, 30),
                "allocation_ratio": st.sampled_from([1.0, 1.5, 2.0]),
            }
        ),
        "MEMORY_MB": st.fixed_dictionaries(
            {
                "total": st.integers(0, 8).map(lambda n: n * 1024),
                "step_size": st.sampled_from([1, 512]),
            }
        ),
    }
)


@settings(max_examples=60, deadline=None)
@given(
    inventories=st.lists(_inventory, min_size=1, max_size=6),
    vcpu=st.integers(1, 6),
    memory=st.sampled_from([0, 256, 512, 1024, 3072]),
)
def test_headroom_is_exactly_what_the_engine_places(
    inventories: list[dict[str, dict[str, float]]], vcpu: int, memory: int
) -> None:
    snap = Snapshot.build(
        [Provider(f"n{i}") for i in range(len(inventories))],
        {f"n{i}": inv for i, inv in enumerate(inventories)},
    )
    engine = engine_default()
    shape = {"VCPU": vcpu, "MEMORY_MB": memory}
    room = headroom(engine, snap, Request("r", shape))
    if room.instances:
        placed = engine.place(snap, Request("r", shape, num_instances=room.instances))
        assert placed.placed
        # and where the engine put them, each provider took no more than its count
        for pid in set(placed.providers):
            assert placed.providers.count(pid) <= room.providers[pid]
    one_more = engine.place(snap, Request("r", shape, num_instances=room.instances + 1))
    assert not one_more.placed


def test_berth_headroom_reads_the_view(tmp_path: Path, view_url: str, cli: Cli) -> None:
    data = tmp_path / "data"
    with App(Settings(data_dir=data, db_url=view_url, partitions=2)) as app:
        Publisher(app.log, app.settings.topics).publish(
            [
                *provider("n1", VCPU=8, MEMORY_MB=8_192),
                *provider("n2", VCPU=4, MEMORY_MB=8_192),
                claim("r1", "n1", ts=1_000, VCPU=2, MEMORY_MB=2_048, lease_ms=600_000),
                claim("r2", "n2", ts=1_000, VCPU=4),
                consume("r2", ts=2_000).model_copy(update={"partition_key": "n2"}),
            ]
        )
        catch_up_all(app.writers())
    backend = ["--data-dir", str(data), "--db", view_url]
    code, out, _ = cli("headroom", *backend, "--resources", "VCPU=2,MEMORY_MB=1024", "--json")
    assert code == 0
    # n1: min(6/2, 6144/1024); n2 is full
    assert json.loads(out) == {"instances": 3, "providers": {"n1": 3}}
    code, out, _ = cli("headroom", *backend, "--resources", "VCPU=2")
    assert (code, out) == (0, "3 more instances of VCPU=2 fit, on 1 provider\n  n1: 3\n")
    code, _, err = cli("headroom", *backend, "--resources", "VCPU")
    assert code == 2 and err.startswith("berth: ")
