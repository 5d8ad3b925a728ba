"""A provider's NUMA cells and PCI devices (issue 31 part 1): described by
events, refused at the edge when inconsistent, decided by the partition's
writer against what it holds, kept in the view, loaded into the snapshot and
the restarted writer, replayed exactly."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from berth.api import Api
from berth.app import App, Settings
from berth.client import Publisher, PublishError
from berth.history import read_history, render
from berth.replay import replay
from consumers.partition_writer import PartitionWriter, catch_up_all
from consumers.snapshot_source import LiveSnapshot, snapshot_from_view
from ledger.log import Append
from projections.state import PartitionState, TopologyUse
from projections.view.loader import load_state
from projections.view.tables import (
    dead_letters,
    outcomes,
    provider_row,
    provider_rows,
    providers,
)
from scheduling.topology import HostCell, HostDevice
from schemas.codec import EventDecodeError, decode_event, encode_event, validate_event
from schemas.events import Event, ProviderDescribed
from schemas.topology import view_json
from tests.builders import briefs, fresh_state, provider, run
from tests.builders import topology as described
from tests.conftest import Cli
from tests.http_calls import call, deciding, serving

PF = "0000:81:00.0"
VF1 = "0000:81:00.1"
VF2 = "0000:81:00.2"
GPU = "0000:3b:00.0"

_WHOLE = select(*provider_row()).select_from(provider_rows)
"""Each provider's row, from both of its tables."""


def cell(cell_id: int, first: int, count: int = 4, **fields: Any) -> dict[str, Any]:
    """A cell of ``count`` CPUs from ``first``: thread pairs, the first pair
    shared and the rest dedicated, 4 GiB with 1 GiB of 2 MiB pages."""
    cpus = list(range(first, first + count))
    return {
        "cell_id": cell_id,
        "cpus": cpus,
        "siblings": [cpus[i : i + 2] for i in range(0, count, 2)],
        "shared": cpus[:2],
        "dedicated": cpus[2:],
        "memory_mb": 4096,
        "huge_pages": [{"size_kb": 2048, "total": 512}],
        **fields,
    }


def nic(numa_node: int | None = 0) -> list[dict[str, Any]]:
    """An SR-IOV NIC: a PF and two of its VFs on physnet1, and a GPU."""
    vf = {
        "vendor_id": "8086",
        "product_id": "154c",
        "device_type": "type-VF",
        "parent_address": PF,
        "numa_node": numa_node,
        "physical_network": "physnet1",
    }
    return [
        {"address": PF, "vendor_id": "8086", "product_id": "1572", "device_type": "type-PF",
         "numa_node": numa_node, "physical_network": "physnet1"},
        {"address": VF2, **vf, "tags": {"trusted": "true"}},
        {"address": VF1, **vf},
        {"address": GPU, "vendor_id": "10de", "product_id": "1db4", "numa_node": numa_node},
    ]  # fmt: skip


_ids = iter(range(10**9))


def fields_of(pid: str, ts: int = 1, **fields: Any) -> dict[str, Any]:
    return {
        "type": "provider_described",
        "event_id": f"t{next(_ids)}",
        "ts_ms": ts,
        "partition_key": pid,
        "provider_id": pid,
        **fields,
    }


def topology(pid: str, ts: int = 1, **fields: Any) -> ProviderDescribed:
    """A description as a client gives it (lists, in any order)."""
    return described(pid, ts=ts, **fields)


def state_with(*events: Event) -> PartitionState:
    state = fresh_state()
    outcomes_ = run([*provider("n1", VCPU=8), *events], state)
    assert all(o.kind == "applied" for decided in outcomes_ for o in decided), outcomes_
    return state


# --- the event and the edge ------------------------------------------------


def test_the_event_holds_sets_sorted_whatever_order_they_came_in() -> None:
    given = cell(0, 0)
    event = topology(
        "n1",
        numa_cells=[cell(1, 4), {**given, "cpus": [3, 1, 0, 2], "siblings": [[3, 2], [1, 0]]}],
        pci_devices=nic(),
    )
    assert event.numa_cells is not None and event.pci_devices is not None
    first = event.numa_cells[0]
    assert (first.cell_id, first.cpus, first.siblings) == (0, (0, 1, 2, 3), ((0, 1), (2, 3)))
    assert [d.address for d in event.pci_devices] == [GPU, PF, VF1, VF2]
    # what the log holds decodes to the same event, and encodes the same again
    raw = encode_event(event)
    assert decode_event(raw) == event and encode_event(decode_event(raw)) == raw


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"numa_cells": [cell(0, 0), cell(1, 3)]}, "CPU 3 is in cell 0 and in cell 1"),
        ({"numa_cells": [cell(0, 0), cell(0, 4)]}, "cell 0 is described twice"),
        ({"numa_cells": [cell(0, 0, shared=[0, 1, 2])]}, "cell 0: CPU 2 both dedicated and shared"),
        ({"numa_cells": [cell(0, 0, dedicated=[7])]}, "cell 0: dedicated CPU 7 not among its cpus"),
        ({"numa_cells": [cell(0, 0, cpus=[0, 1, 1])]}, "cell 0 cpus: CPU 1 listed twice"),
        ({"numa_cells": [cell(0, 0, siblings=[[0, 1], [1, 2]])]}, "CPU 1 in two sibling groups"),
        ({"numa_cells": [cell(0, 0, siblings=[[0]])]}, "a sibling group has at least 2 threads"),
        (
            {"numa_cells": [cell(0, 0, huge_pages=[{"size_kb": 1048576, "total": 5}])]},
            "huge pages take 5120 MiB, more than its 4096 MiB",
        ),
        (
            {"numa_cells": [cell(0, 0, huge_pages=[{"size_kb": 3000, "total": 1}])]},
            "a page size is a power of two KiB",
        ),
        (
            {"pci_devices": [{**nic()[0], "device_type": "type-VDPA"}]},
            "Input should be 'type-PCI', 'type-PF' or 'type-VF'",
        ),
        (
            {"pci_devices": [nic()[3], {**nic()[1], "parent_address": GPU}]},
            f"VF {VF2}: its parent {GPU} is a type-PCI, not a PF of this provider",
        ),
        (
            {"pci_devices": nic()[1:2]},
            f"VF {VF2}: its parent {PF} is not described, not a PF of this provider",
        ),
        ({"pci_devices": [{**nic()[1], "parent_address": None}]}, "a VF names its parent"),
        ({"pci_devices": [{**nic()[3], "parent_address": PF}]}, "only a VF has a parent"),
        (
            {"pci_devices": [nic()[3], {**nic()[3], "address": GPU.upper()}]},
            f"device {GPU} is described twice",
        ),
        ({"pci_devices": [{**nic()[3], "address": "0000:3b:20.0"}]}, r"pci_devices\.0\.address"),
        (
            {"numa_cells": [cell(0, 0)], "pci_devices": nic(numa_node=1)},
            f"device {GPU} is on NUMA cell 1, which is not described",
        ),
        ({"numa_cells": [cell(0, 0)], "unset": ["numa_cells"]}, "numa_cells: both given and unset"),
    ],
)
def test_a_topology_that_does_not_hold_together_is_refused(
    fields: dict[str, Any], why: str
) -> None:
    with pytest.raises(EventDecodeError, match=why):
        decode_event(json.dumps(fields_of("n1", **fields)))
    with pytest.raises(EventDecodeError, match=why):
        validate_event(fields_of("n1", **fields))


def test_the_edge_appends_nothing_it_refuses(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path / "data", partitions=1)) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        bad = fields_of("n1", numa_cells=[cell(0, 0), cell(1, 2)])
        with pytest.raises(EventDecodeError, match="CPU 2 is in cell 0 and in cell 1"):
            publisher.publish([bad])
        with pytest.raises(PublishError):
            publisher.publish([topology("n1", ts=10**13, numa_cells=[cell(0, 0)])])
        assert app.log.end_offset(app.settings.topics.events, 0) == 0


# --- the writer ---------------------------------------------------------------


def test_cells_and_devices_are_set_and_changed_apart() -> None:
    state = state_with(topology("n1", numa_cells=[cell(0, 0), cell(1, 4)]))
    run([topology("n1", pci_devices=nic(numa_node=1))], state)
    held = state.providers["n1"].description
    assert [c.cell_id for c in held.numa_cells] == [0, 1]
    assert [d.address for d in held.pci_devices] == [GPU, PF, VF1, VF2]
    run([topology("n1", numa_cells=[cell(0, 0), cell(1, 4, memory_mb=8192)])], state)
    held = state.providers["n1"].description
    assert held.numa_cells[1].memory_mb == 8192 and len(held.pci_devices) == 4
    run([topology("n1", unset=["pci_devices"], availability_zone="az1")], state)
    held = state.providers["n1"].description
    assert (held.pci_devices, held.availability_zone) == ((), "az1")


def test_a_device_on_a_cell_the_provider_does_not_have_is_a_recorded_rejection() -> None:
    state = state_with(topology("n1", numa_cells=[cell(0, 0)]))
    decided = run(
        [
            topology("n1", pci_devices=nic(numa_node=1), host="h1"),
            topology("n1", pci_devices=nic(numa_node=0)),
            topology("n1", numa_cells=[cell(1, 0)]),  # its devices are on cell 0
        ],
        state,
    )
    assert [briefs(o) for o in decided] == [
        "rejected n1 " + " ".join(["NUMA_CELL_NOT_DESCRIBED"] * 4),
        "applied n1",
        "rejected n1 " + " ".join(["NUMA_CELL_NOT_DESCRIBED"] * 4),
    ]
    why = decided[0][0].reasons[0].detail
    assert why == f"device {GPU} is on NUMA cell 1, which is not described"
    held = state.providers["n1"].description
    assert held.host is None and [c.cell_id for c in held.numa_cells] == [0]
    # with no cells described, a device's cell says where it is, nothing more
    assert briefs(run([topology("n2", pci_devices=nic(numa_node=5))], state_with())[0]) == (
        "noop n2 PROVIDER_NOT_FOUND"
    )
    loose = state_with(topology("n1", pci_devices=nic(numa_node=5)))
    assert loose.providers["n1"].description.pci_devices[0].numa_node == 5


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"pci_devices": nic()[:2]}, f"device {VF1} is held by r1: it cannot be removed"),
        ({"unset": ["pci_devices"]}, f"device {VF1} is held by r1: it cannot be removed"),
        (
            {"pci_devices": [*nic()[:2], {**nic()[2], "numa_node": 1}, nic()[3]]},
            f"device {VF1} is held by r1: its type, parent and cell cannot change",
        ),
        (
            {"numa_cells": [cell(0, 0, shared=[0, 1, 2], dedicated=[3]), cell(1, 4)]},
            "CPU 2 is pinned by r2: it must stay dedicated in cell 0",
        ),
        (
            {"numa_cells": [cell(0, 0, huge_pages=[{"size_kb": 2048, "total": 99}]), cell(1, 4)]},
            "cell 0 has 100 pages of 2048 KiB held: it cannot have 99",
        ),
    ],
)
def test_what_reservations_hold_a_description_cannot_take_away(
    change: dict[str, Any], detail: str
) -> None:
    # claims that carry their fit fill topology_use (issue 31 part 4); here
    # it is filled by hand, as they will
    state = state_with(topology("n1", numa_cells=[cell(0, 0), cell(1, 4)], pci_devices=nic()))
    use = TopologyUse()
    use.devices[VF1] = "r1"
    use.cpus[2] = "r2"
    use.pages[(0, 2048)] = 100
    state.providers["n1"].topology_use = use
    before = state.providers["n1"].description
    (decided,) = run([topology("n1", **change)], state)
    assert briefs(decided) == "rejected n1 TOPOLOGY_IN_USE"
    assert decided[0].reasons[0].detail == detail
    assert state.providers["n1"].description is before
    # what is held may stay, its tags may change, the rest may go
    kept = [{**nic()[0]}, {**nic()[2], "tags": {"trusted": "false"}}]
    (decided,) = run([topology("n1", pci_devices=kept)], state)
    assert briefs(decided) == "applied n1"


# --- through the real ledger: view, snapshot, restart, replay --------------


def _publish_topology(app: App) -> None:
    publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
    publisher.publish([*provider("n1", ts=1, VCPU=8), *provider("n2", ts=1, VCPU=8)])
    publisher.publish(
        [
            topology("n1", ts=2, numa_cells=[cell(0, 0), cell(1, 4)]),
            topology("n1", ts=3, pci_devices=nic(numa_node=1)),
            topology("n2", ts=3, pci_devices=nic(numa_node=None)),
        ]
    )


def test_the_view_keeps_them_and_the_snapshot_and_a_restarted_writer_read_them(
    tmp_path: Path, view_url: str
) -> None:
    db_url = "" if view_url.startswith("sqlite") else view_url
    settings = Settings(data_dir=tmp_path / "data", partitions=1, db_url=db_url)
    with App(settings) as app:
        _publish_topology(app)
        catch_up_all(app.writers())
        with app.engine.connect() as conn:
            row = conn.execute(select(providers).where(providers.c.provider_id == "n1")).one()
            state, _ = load_state(conn, 0, 1)
        snapshot = LiveSnapshot(app.engine)()
    assert [c["cell_id"] for c in row.numa_cells] == [0, 1]
    assert row.numa_cells[0]["huge_pages"] == [{"size_kb": 2048, "total": 512}]
    assert [(d["address"], d["numa_node"]) for d in row.pci_devices][:2] == [(GPU, 1), (PF, 1)]
    n1, n2 = snapshot.providers
    assert n1.numa_cells[0] == HostCell(
        cell_id=0,
        cpus=frozenset({0, 1, 2, 3}),
        dedicated=frozenset({2, 3}),
        shared=frozenset({0, 1}),
        siblings=(frozenset({0, 1}), frozenset({2, 3})),
        memory_mb=4096,
        huge_pages={2048: 512},
    )
    assert n1.pci_devices[3] == HostDevice(
        address=VF2,
        vendor_id="8086",
        product_id="154c",
        device_type="type-VF",
        parent_address=PF,
        numa_node=1,
        physical_network="physnet1",
        tags={"trusted": "true"},
    )
    assert (n2.numa_cells, [d.numa_node for d in n2.pci_devices]) == ((), [None] * 4)
    held = state.providers["n1"].description
    assert [c.cell_id for c in held.numa_cells] == [0, 1] and len(held.pci_devices) == 4
    # a restarted writer goes on from what the view holds: cell 1 is known
    # to it, so devices there are taken and devices on cell 2 are not
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        publisher.publish(
            [
                topology("n1", ts=4, pci_devices=nic(numa_node=2)),
                topology("n1", ts=5, pci_devices=nic(numa_node=0)),
            ]
        )
        writer = PartitionWriter(app.log, app.view, 0, 1)
        step = writer.step().applied  # type: ignore[union-attr]
        with app.engine.connect() as conn:
            nodes = conn.execute(
                select(providers.c.pci_devices).where(providers.c.provider_id == "n1")
            ).scalar_one()
            snapshot = snapshot_from_view(app.engine)
    assert [briefs(a.outcomes) for a in step] == [
        "rejected n1 " + " ".join(["NUMA_CELL_NOT_DESCRIBED"] * 4),
        "applied n1",
    ]
    assert {d["numa_node"] for d in nodes} == {0}
    assert {d.numa_node for d in snapshot.providers[0].pci_devices} == {0}


def test_a_live_snapshot_follows_a_change_of_topology(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=2)
    with App(settings) as app:
        live = LiveSnapshot(app.engine)
        _publish_topology(app)
        writers = app.writers()
        catch_up_all(writers)
        assert len(live().providers[0].pci_devices) == 4
        Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12).publish(
            [topology("n1", ts=9, pci_devices=nic(numa_node=0)[:1], unset=["numa_cells"])]
        )
        catch_up_all(writers)
        followed = live()
        full = snapshot_from_view(app.engine)
    assert [d.address for d in followed.providers[0].pci_devices] == [PF]
    assert followed.providers[0].numa_cells == ()
    assert followed.providers == full.providers


def test_a_replay_decides_them_again_exactly(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=2)
    with App(settings) as app:
        _publish_topology(app)
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        for t in range(6):
            cells = [cell(0, 0, memory_mb=4096 + t), cell(1, 4)]
            publisher.publish(
                [
                    topology("n1", ts=10 + t, numa_cells=cells),
                    topology("n2", ts=10 + t, pci_devices=nic(numa_node=t % 2)),
                    topology("n2", ts=10 + t, numa_cells=[cell(0, 0)]),  # rejected when t is odd
                ]
            )
        catch_up_all(app.writers())
        with app.engine.connect() as conn:
            before = sorted(tuple(r) for r in conn.execute(_WHOLE))
            kinds = [r.kind for r in conn.execute(select(outcomes))]
    assert "rejected" in kinds
    result = replay(settings, verify=True)
    assert result.divergence is None and result.verified == result.outcomes > 0
    with App(settings) as app, app.engine.connect() as conn:
        after = sorted(tuple(r) for r in conn.execute(_WHOLE))
    assert after == before


def test_a_bad_record_in_the_log_is_a_dead_letter_and_the_writer_goes_on(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        bad = fields_of("n1", ts=2, numa_cells=[cell(0, 0, shared=[0, 1, 2])])
        good = topology("n1", ts=3, numa_cells=[cell(0, 0)])
        app.log.append(
            app.settings.topics.events,
            [
                *(Append(0, b"n1", encode_event(e)) for e in provider("n1", ts=1, VCPU=8)),
                Append(0, b"n1", json.dumps(bad).encode()),
                Append(0, b"n1", encode_event(good)),
            ],
        )
        catch_up_all(app.writers())
        with app.engine.connect() as conn:
            dead = conn.execute(select(dead_letters.c.reason)).scalar_one()
            cells = conn.execute(select(providers.c.numa_cells)).scalar_one()
    assert "CPU 2 both dedicated and shared" in dead
    assert [c["cell_id"] for c in cells] == [0]


def test_history_shows_them(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        _publish_topology(app)
        catch_up_all(app.writers())
        text = render(read_history(app.engine, "n1"))
    assert "    NUMA cell 0: cpus 0-3, dedicated 2-3, shared 0-1, siblings 0-1 2-3, " in text
    assert "4096 MiB, 512 pages of 2048 KiB" in text
    assert f"    PCI {VF2} type-VF: 8086:154c, of {PF}, cell 1, network physnet1, " in text
    assert 'tags {"trusted": "true"}' in text
    assert f"    PCI {GPU} type-PCI: 10de:1db4, cell 1" in text


def test_the_api_takes_a_topology_and_shows_it(tmp_path: Path, cli: Cli) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=2)
    with App(settings) as app, serving(Api(app)) as url, deciding(app):
        now = int(time.time() * 1000)
        events = [*provider("n1", ts=now, VCPU=8), topology("n1", ts=now, numa_cells=[cell(0, 0)])]
        status, reply = call(url, "/v1/events?wait=30", _json(*events))
        assert status == 200
        assert {o["kind"] for d in reply["decisions"].values() for o in d} == {"applied"}
        # refused at the edge, with the reason, and nothing appended: a rule
        # beyond the document's types is the API's 409
        ends = [app.log.end_offset(settings.topics.events, p) for p in range(2)]
        bad = fields_of("n1", ts=now, numa_cells=[cell(0, 0), cell(1, 3)])
        status, reply = call(url, "/v1/events", [bad])
        assert status == 409, reply
        assert [e["detail"] for e in reply["errors"]] == [
            "/0/numa_cells: Value error, CPU 3 is in cell 0 and in cell 1"
        ]
        # and an unknown device type, the document's own: 422
        gpu = {**nic()[3], "device_type": "type-GPU"}
        status, reply = call(url, "/v1/events", [fields_of("n1", ts=now, pci_devices=[gpu])])
        assert status == 422 and "type-PCI" in reply["errors"][0]["detail"]
        assert [app.log.end_offset(settings.topics.events, p) for p in range(2)] == ends
        # through the CLI's --api: the writer refuses devices on a cell n1 lacks
        devices = tmp_path / "devices.json"
        devices.write_text(json.dumps({"pci_devices": nic(numa_node=1)}))
        code, out, _ = cli(
            "provider", "describe", "n1", "--topology", str(devices), "--api", url, "--wait"
        )
        decided = json.loads(out.splitlines()[1])
        assert code == 1 and decided["reasons"][0]["code"] == "NUMA_CELL_NOT_DESCRIBED"
        devices.write_text(json.dumps({"pci_devices": nic(numa_node=0)}))
        code, out, _ = cli(
            "provider", "describe", "n1", "--topology", str(devices), "--api", url, "--wait"
        )
        assert code == 0
        status, reply = call(url, "/v1/history/n1?records=0")
    assert status == 200
    shown = reply["provider"]
    given = topology("n1", numa_cells=[cell(0, 0)])
    # as the view holds them: a cell's socket only when known
    assert shown["numa_cells"] == json.loads(view_json(given.numa_cells or ()))
    assert "socket" not in shown["numa_cells"][0]
    assert [d["address"] for d in shown["pci_devices"]] == [GPU, PF, VF1, VF2]
    assert shown["pci_devices"][3]["tags"] == {"trusted": "true"}


def _json(*events: Event) -> list[Any]:
    return [json.loads(encode_event(e)) for e in events]


# --- the edge's checks against a naive reference ---------------------------

CPUS = st.sets(st.integers(0, 15), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(CPUS, st.sets(st.integers(0, 15), max_size=4)), min_size=1, max_size=3))
def test_the_edge_refuses_exactly_cells_that_share_a_cpu(
    spec: list[tuple[set[int], set[int]]],
) -> None:
    cells = [
        {
            "cell_id": n,
            "cpus": sorted(cpus, reverse=True),
            "dedicated": sorted(pinned & cpus),
            "shared": sorted(cpus - pinned),
            "memory_mb": 1024,
        }
        for n, (cpus, pinned) in enumerate(spec)
    ]
    shared = any(a[0] & b[0] for a, b in itertools.combinations(spec, 2))
    try:
        event = topology("n1", numa_cells=cells)
    except EventDecodeError as error:
        assert shared and "is in cell" in error.reason
        return
    assert not shared
    assert event.numa_cells is not None
    assert [set(c.cpus) for c in event.numa_cells] == [cpus for cpus, _ in spec]
    assert decode_event(encode_event(event)) == event


DEVICE = st.tuples(
    st.integers(0, 5),  # its address's function
    st.sampled_from(["type-PCI", "type-PF", "type-VF"]),
    st.integers(0, 5),  # a VF's parent's function
)


@settings(max_examples=150, deadline=None)
@given(st.lists(DEVICE, min_size=1, max_size=6))
def test_the_edge_refuses_exactly_twice_described_devices_and_orphan_vfs(
    spec: list[tuple[int, str, int]],
) -> None:
    def address(function: int) -> str:
        return f"0000:81:00.{function}"

    devices = [
        {
            "address": address(function),
            "vendor_id": "8086",
            "product_id": "154c",
            "device_type": kind,
            **({"parent_address": address(parent)} if kind == "type-VF" else {}),
        }
        for function, kind, parent in spec
    ]
    functions = [function for function, _, _ in spec]
    twice = len(set(functions)) < len(functions)
    pfs = {function for function, kind, _ in spec if kind == "type-PF"}
    orphan = any(kind == "type-VF" and parent not in pfs for _, kind, parent in spec)
    try:
        event = topology("n1", pci_devices=devices)
    except EventDecodeError as error:
        assert twice or orphan
        # an address twice is found first, then a VF whose parent is no PF
        assert ("described twice" if twice else "not a PF of this provider") in error.reason
        return
    assert not (twice or orphan)
    assert event.pci_devices is not None
    assert [d.address for d in event.pci_devices] == sorted(address(f) for f in functions)
