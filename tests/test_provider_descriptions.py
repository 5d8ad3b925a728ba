"""Provider descriptions and metrics reports: decided by the partition's
writer, kept in the view, loaded into the snapshot, replayed exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select

from berth.app import App, Settings
from berth.client import Publisher, PublishError
from berth.replay import replay
from consumers.partition_writer import PartitionWriter, catch_up_all
from consumers.snapshot_source import LiveSnapshot, snapshot_from_view
from ledger.log import Append
from projections.state import PartitionState
from projections.view.loader import load_state
from projections.view.tables import (
    dead_letters,
    outcomes,
    provider_row,
    provider_rows,
    providers,
)
from scheduling.filters.availability_zone import AvailabilityZoneFilter
from scheduling.filters.base import Context
from scheduling.model import Request, Snapshot
from scheduling.weighers.metrics import MetricsWeigher
from schemas.codec import EventDecodeError, decode_event, encode_event
from schemas.events import Event
from tests.builders import briefs, claim, describe, fresh_state, provider, report, run, tick

QEMU = {
    "hypervisor_type": "QEMU",
    "hypervisor_version": 8002000,
    "supported_instances": [["x86_64", "qemu", "hvm"]],
    "cpu_info": {"arch": "x86_64", "features": ["avx2"]},
}

_WHOLE = select(*provider_row()).select_from(provider_rows)
"""Each provider's row, from both of its tables."""


def test_a_description_changes_only_the_fields_it_gives() -> None:
    state = run_all(
        provider("n1", VCPU=4),
        describe("n1", availability_zone="az1", host="h1", host_ip="10.0.0.7"),
        describe("n1", capabilities=QEMU, metadata={"rack": "r2"}),
    )
    held = state.providers["n1"].description
    assert (held.availability_zone, held.host, held.host_ip) == ("az1", "h1", "10.0.0.7")
    assert held.capabilities == QEMU and held.metadata == {"rack": "r2"}
    run([describe("n1", unset=["host", "metadata"], availability_zone="az2")], state)
    held = state.providers["n1"].description
    assert (held.availability_zone, held.host, held.metadata) == ("az2", None, {})
    assert held.capabilities == QEMU


def test_an_unknown_providers_description_or_report_is_a_recorded_noop() -> None:
    decided = run([describe("ghost", availability_zone="az1"), report("ghost", {"a": 1.0})])
    assert [briefs(o) for o in decided] == [
        "noop ghost PROVIDER_NOT_FOUND",
        "noop ghost PROVIDER_NOT_FOUND",
    ]


def test_a_report_replaces_the_metrics_and_an_older_one_changes_nothing() -> None:
    state = run_all(provider("n1", VCPU=4))
    decided = run(
        [
            report("n1", {"cpu.percent": 10.0, "mem": 2.0}, ts=100, io_ops=3),
            report("n1", {"cpu.percent": 20.0}, ts=200, build_failures=1),
            report("n1", {"cpu.percent": 99.0}, ts=150),
            report("n1", ts=300, io_ops=0),
        ],
        state,
    )
    assert [briefs(o) for o in decided] == [
        "applied n1",
        "applied n1",
        "noop n1 OLDER_REPORT",
        "applied n1",
    ]
    metrics = state.providers["n1"].metrics
    assert (metrics.values, metrics.at_ms) == ({"cpu.percent": 20.0}, 300)
    assert (metrics.num_io_ops, metrics.build_failures) == (0, 1)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"capabilities": {"hypervisor_version": "8.2"}}, "hypervisor_version must be int"),
        ({"capabilities": {"supported_instances": [["x86_64", "qemu"]]}}, "each entry is"),
        ({"host_ip": "10.0.0.300"}, "does not appear to be an IPv4 or IPv6 address"),
        ({"metadata": {"rack": 2}}, "metadata.rack"),
        ({}, "sets or unsets at least one field"),
        ({"host": "h", "unset": ["host"]}, "host: both given and unset"),
    ],
)
def test_a_description_the_filters_cannot_read_is_refused(
    fields: dict[str, object], why: str
) -> None:
    event = {
        "type": "provider_described",
        "event_id": "d1",
        "ts_ms": 1,
        "partition_key": "n1",
        "provider_id": "n1",
        **fields,
    }
    with pytest.raises(EventDecodeError, match=why):
        decode_event(json.dumps(event))


def test_a_report_with_a_wrong_type_is_refused() -> None:
    base = {"type": "metrics_reported", "event_id": "m", "ts_ms": 1, "partition_key": "n1"}
    cases: list[tuple[dict[str, object], str]] = [
        ({"metrics": {"cpu": "12"}}, r"metrics\.cpu"),
        ({"metrics": {"cpu": 1.0}, "num_io_ops": -1}, "num_io_ops"),
        ({}, "gives metrics, num_io_ops or build_failures"),
    ]
    for bad, why in cases:
        with pytest.raises(EventDecodeError, match=why):
            decode_event(json.dumps({**base, "provider_id": "n1", **bad}))


def test_the_view_keeps_them_and_a_restarted_writer_goes_on_from_it(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        publisher.publish(
            [
                *provider("n1", ts=1, VCPU=4),
                claim("r1", "n1", ts=2, lease_ms=100, VCPU=1),
                describe("n1", ts=3, availability_zone="az1", host_ip="10.0.0.7"),
                describe("n1", ts=3, capabilities=QEMU, metadata={"rack": "r2"}),
                # its clock expires r1 before the report is decided
                report("n1", {"cpu.percent": 12.5}, ts=500, io_ops=2, build_failures=1),
            ]
        )
        catch_up_all(app.writers())
        with app.engine.connect() as conn:
            row = conn.execute(select(providers)).one()
            kinds = [r.kind for r in conn.execute(select(outcomes).order_by(outcomes.c.offset))]
            state, _ = load_state(conn, 0, 1)
    assert (row.availability_zone, row.host_ip, row.capabilities) == ("az1", "10.0.0.7", QEMU)
    assert (row.metadata, row.metrics, row.metrics_at_ms) == (
        {"rack": "r2"},
        {"cpu.percent": 12.5},
        500,
    )
    assert (row.num_io_ops, row.build_failures) == (2, 1)
    # the report's own decision has no row; the expiry its clock caused has
    assert kinds == ["applied", "applied", "accepted", "applied", "applied", "expired"]
    loaded = state.providers["n1"]
    assert loaded.description.capabilities == QEMU and loaded.metrics.values == {
        "cpu.percent": 12.5
    }
    with App(settings) as app:
        Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12).publish(
            [report("n1", {"cpu.percent": 1.0}, ts=400)]  # older than the one loaded
        )
        writer = PartitionWriter(app.log, app.view, 0, 1)
        (applied,) = writer.step().applied  # type: ignore[union-attr]
    assert briefs(applied.outcomes) == "noop n1 OLDER_REPORT"


def test_the_snapshot_carries_them_and_the_filters_read_them(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=2)
    with App(settings) as app:
        live = LiveSnapshot(app.engine)
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        publisher.publish([*provider("n1", ts=1, VCPU=4), *provider("n2", ts=1, VCPU=4)])
        publisher.publish([describe("n1", ts=2, availability_zone="az1", host="h1")])
        writers = app.writers()
        catch_up_all(writers)
        assert _zones(live()) == {"n1": "az1", "n2": None}
        # a report reaches a live snapshot that already had the provider
        publisher.publish([report("n2", {"cpu": 3.0}, ts=50, io_ops=4)])
        catch_up_all(writers)
        snapshot = live()
        full = snapshot_from_view(app.engine)
    n1, n2 = snapshot.providers
    assert (n1.host, n2.host) == ("h1", "n2")
    assert (n2.metrics, n2.metrics_at_ms, n2.num_io_ops) == ({"cpu": 3.0}, 50, 4)
    assert full.providers == snapshot.providers
    request = Request("r", {"VCPU": 1}, availability_zone="az1")
    zone = AvailabilityZoneFilter()
    ctx = Context(snapshot, request, snapshot.used)
    assert [zone.reject(ctx, row) for row in (0, 1)] == [
        None,
        "zone 'az1' wanted, provider is in nova",
    ]


def test_metrics_older_than_max_age_count_as_unavailable(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        publisher.publish([*provider("n1", ts=1, VCPU=4), *provider("n2", ts=1, VCPU=4)])
        publisher.publish(
            [report("n1", {"cpu": 1.0}, ts=1000), report("n2", {"cpu": 5.0}, ts=9000)]
        )
        catch_up_all(app.writers())
        snapshot = snapshot_from_view(app.engine)
    weigher = MetricsWeigher(weight_setting="cpu=1.0", required=False, max_age_ms=5000)
    rows = snapshot.row_of
    both = [rows["n1"], rows["n2"]]

    def weights(ts_ms: int | None) -> list[float]:
        ctx = Context(snapshot, Request("r", {"VCPU": 1}, ts_ms=ts_ms), snapshot.used)
        weights: list[float] = weigher.weigh(ctx, np.asarray(both, dtype=np.int64)).tolist()
        return weights

    assert weights(None) == [1.0, 5.0]
    assert weights(6000) == [1.0, 5.0]
    assert weights(6001) == [-10000.0, 5.0]
    assert weights(20000) == [-10000.0, -10000.0]


def test_a_replay_decides_them_again_exactly(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=2)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        publisher.publish([e for i in range(4) for e in provider(f"n{i}", ts=1, VCPU=4)])
        for t in range(10):
            publisher.publish(
                [report(f"n{i}", {"cpu": float(t * i)}, ts=100 * t + i) for i in range(5)]
            )
            publisher.publish([describe(f"n{t % 4}", ts=100 * t, availability_zone=f"az{t}")])
        publisher.publish([report("n0", {"cpu": 0.0}, ts=1)])  # older: a no-op
        catch_up_all(app.writers())
        with app.engine.connect() as conn:
            before = sorted(tuple(r) for r in conn.execute(_WHOLE))
    result = replay(settings, verify=True)
    assert result.divergence is None and result.verified == result.outcomes > 0
    with App(settings) as app, app.engine.connect() as conn:
        after = sorted(tuple(r) for r in conn.execute(_WHOLE))
    assert after == before


def test_bad_records_in_the_log_are_dead_letters_and_the_writer_goes_on(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings) as app:
        good = provider("n1", ts=1, VCPU=4)
        bad = {
            "type": "metrics_reported",
            "event_id": "m1",
            "ts_ms": 2,
            "partition_key": "n1",
            "provider_id": "n1",
            "metrics": {"cpu": "high"},
        }
        with pytest.raises(EventDecodeError, match=r"metrics\.cpu"):
            Publisher(app.log, app.settings.topics).publish([bad])
        app.log.append(
            app.settings.topics.events,
            [
                *(Append(0, b"n1", encode_event(e)) for e in good),
                Append(0, b"n1", json.dumps(bad).encode()),
                Append(0, b"n1", encode_event(report("n1", {"cpu": 1.0}, ts=3))),
            ],
        )
        catch_up_all(app.writers())
        with app.engine.connect() as conn:
            dead = conn.execute(select(dead_letters.c.reason)).scalar_one()
            metrics = conn.execute(select(providers.c.metrics)).scalar_one()
    assert "metrics.cpu" in dead and metrics == {"cpu": 1.0}


@contextmanager
def _one_provider(tmp_path: Path) -> Iterator[tuple[App, Publisher, list[PartitionWriter]]]:
    """An app of one partition whose writers have decided provider ``n1``."""
    with App(Settings(data_dir=tmp_path / "data", partitions=1)) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        publisher.publish(provider("n1", ts=1, VCPU=4))
        writers = app.writers()
        catch_up_all(writers)
        yield app, publisher, writers


def test_metrics_reports_do_not_grow_the_outcomes_table(tmp_path: Path) -> None:
    with _one_provider(tmp_path) as (app, publisher, writers):
        with app.engine.connect() as conn:
            rows = conn.execute(select(func.count()).select_from(outcomes)).scalar_one()
        publisher.publish([report("n1", {"cpu": float(t)}, ts=10 + t) for t in range(500)])
        publisher.publish([tick(1000)])
        catch_up_all(writers)
        with app.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(outcomes)).scalar_one() == rows
            assert conn.execute(select(providers.c.metrics)).scalar_one() == {"cpu": 499.0}


def test_a_report_the_edge_refuses_appends_nothing(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path / "data", partitions=1)) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 0)
        with pytest.raises(PublishError, match="ahead of this edge's clock"):
            publisher.publish([report("n1", {"cpu": 1.0}, ts=60_000)])
        assert app.log.end_offset(app.settings.topics.events, 0) == 0


def run_all(*groups: Event | list[Event]) -> PartitionState:
    """The state after applying every event of ``groups`` (events or lists)."""
    state = fresh_state()
    events: list[Event] = []
    for group in groups:
        events.extend(group if isinstance(group, list) else [group])
    run(events, state)
    return state


def _zones(snapshot: Snapshot) -> dict[str, str | None]:
    return {p.provider_id: p.availability_zone for p in snapshot.providers}


@pytest.mark.parametrize(
    "metrics",
    [
        {},
        {"cpu.percent": 12.5, "cpu.frequency": 2400.0, "mem.free": 1e-7},
        {"tiny": 5e-324, "huge": 1.7976931348623157e308, "negative": -0.0, "x": 3.0},
        {'quote"and\\slash': 1.0, "caf\u00e9": 2.0, "tab\t": -3.25},
    ],
)
def test_a_reports_metrics_column_is_the_text_json_dumps_writes(
    tmp_path: Path, metrics: dict[str, float]
) -> None:
    # the writer formats a report's metrics itself (the most frequent row it
    # rewrites): byte for byte what SQLAlchemy's JSON column writes
    with _one_provider(tmp_path) as (app, publisher, writers):
        publisher.publish([report("n1", metrics, ts=10)])
        catch_up_all(writers)
        with app.engine.connect() as conn:
            text = conn.exec_driver_sql("SELECT metrics FROM providers").scalar_one()
    assert text == json.dumps(metrics)
