"""Damage in a data directory as its users meet it: the writer of a damaged
or shortened partition stops and says why while the others go on, status
and metrics name it, the edge refuses appends to it, replay stops at it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from berth.app import App, Settings
from berth.client import Publisher
from berth.metrics import LedgerCollector, registry_for
from berth.status import read_status
from consumers.partition_writer import PartitionHalted, catch_up_all, step_all
from ledger.log import CorruptLog
from ledger.topics import Topics
from schemas.outcomes import Kind
from tests.builders import claim, provider, set_state
from tests.conftest import Cli
from tests.damage import PARTITIONS, flip, ledger, node, served, view_ahead_of_its_log
from tests.polling import wait_for
from tests.processes import serving
from tests.prometheus import by_label, parse


def test_a_damaged_partition_halts_its_writer_and_the_others_go_on(tmp_path: Path) -> None:
    settings = ledger(tmp_path / "data")
    flip(settings.data_dir, settings.topics.events, 0)
    with App(settings) as app:
        writers = app.writers()
        assert writers[0].halted is not None and "p0.log: record" in writers[0].halted
        assert "past the damage" in writers[0].halted
        assert writers[1].halted is None
        edge = Publisher(app.log, settings.topics, clock_ms=lambda: 10**6)
        with pytest.raises(CorruptLog, match=r"berth\.events/p0\.log: record \d+ at byte \d+"):
            edge.publish([set_state(node(0), "disabled", ts=5000)])
        edge.publish([set_state(node(1), "disabled", ts=5000)])
        assert step_all(writers)  # no exception: partition 0 is skipped
        with pytest.raises(PartitionHalted):
            writers[0].step()
        status = read_status(app.log, app.engine, settings.topics, PARTITIONS)
        assert status.partitions[1].behind == 0
        assert status.ahead == [0]
        assert [(d.topic, d.partition) for d in status.damaged] == [(settings.topics.events, 0)]
        metrics = parse(
            generate_latest(
                registry_for(LedgerCollector(app.log, app.engine, settings.topics, PARTITIONS))
            ).decode()
        )
        damaged = by_label(metrics, "berth_log_partition_damaged", "partition")
        assert damaged == {"0": 1.0}


def test_a_view_ahead_of_its_log_is_refused_not_skipped(tmp_path: Path, cli: Cli) -> None:
    """An older copy of the log put back under a newer view: the records the
    view applied since are gone, and new ones would take their offsets."""
    settings = view_ahead_of_its_log(tmp_path)
    data = settings.data_dir
    with App(settings) as app:
        writers = app.writers()
        for writer in writers:
            assert writer.halted is not None
            assert "log lost records" in writer.halted
            assert f"the view has applied {writer.next_offset} records" in writer.halted
        edge = Publisher(app.log, settings.topics, clock_ms=lambda: 10**6)
        edge.publish([set_state(node(0), "disabled", ts=5000)])
        assert not step_all(writers)
    code, out, _ = cli("status", "--data-dir", str(data), "--lag")
    assert code == 1
    assert "VIEW AHEAD OF LOG partition 0" in out


def test_a_view_ahead_of_a_recreated_kafka_topic_is_refused(
    kafka_bootstrap: str, postgres_url: str
) -> None:
    """A view on PostgreSQL that remembers higher offsets than the Kafka
    topic it is pointed at (the topic was deleted and made again)."""
    first = _kafka_settings(kafka_bootstrap, postgres_url)
    with App(first) as app:
        edge = Publisher(app.log, first.topics, clock_ms=lambda: 10**6)
        edge.publish([e for p in range(PARTITIONS) for e in provider(node(p), VCPU=8)])
        edge.publish([claim("r1", node(0), ts=10, VCPU=1)])
        catch_up_all(app.writers())
    recreated = _kafka_settings(kafka_bootstrap, postgres_url)
    with App(recreated) as app:
        writers = app.writers()
        assert all(w.halted is not None and "log lost records" in w.halted for w in writers)
        Publisher(app.log, recreated.topics, clock_ms=lambda: 10**6).publish(
            provider(node(0), VCPU=8)
        )
        assert not step_all(writers)
        assert read_status(app.log, app.engine, recreated.topics, PARTITIONS).ahead == [0, 1]


def _kafka_settings(kafka_bootstrap: str, postgres_url: str) -> Settings:
    suffix = uuid.uuid4().hex[:8]
    names = ("ev", "out", "dead", "req", "place", "txn", "moves")
    return Settings(
        log_url=f"kafka://{kafka_bootstrap}",
        db_url=postgres_url,
        partitions=PARTITIONS,
        topics=Topics(*(f"{name}-{suffix}" for name in names)),
    )


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_replay_stops_at_the_damage_and_names_it(tmp_path: Path, cli: Cli, jobs: str) -> None:
    settings = ledger(tmp_path / "data")
    view = (settings.data_dir / "view.db").read_bytes()
    flip(settings.data_dir, settings.topics.events, 1)
    code, _, err = cli("replay", "--data-dir", str(settings.data_dir), "--verify", "--jobs", jobs)
    assert code == 1
    assert "replay stopped" in err
    assert "berth.events/p1.log: record" in err and "checksum mismatch" in err
    assert (settings.data_dir / "view.db").read_bytes() == view


def test_a_running_serve_refuses_appends_to_a_partition_damaged_under_it(
    tmp_path: Path, cli: Cli
) -> None:
    """The issue's reproduction: damage under a running server. The event
    for the damaged partition is refused at the edge (never acknowledged,
    never silently ignored); after a restart that partition's writer stays
    stopped and the other decides as before."""
    settings = ledger(tmp_path / "data")
    data = settings.data_dir
    with serving(data, PARTITIONS), App(settings, migrate=False) as app:
        served(app, settings, "probe-1")
        flip(data, settings.topics.events, 0)
        events = tmp_path / "events.jsonl"
        events.write_text(
            "\n".join(
                e.model_dump_json()
                for e in (
                    set_state(node(0), "disabled", ts=5000),
                    set_state(node(1), "disabled", ts=5000),
                )
            )
        )
        code, out, err = cli("publish", str(events), "--data-dir", str(data))
        assert code == 1
        assert "line 1: " in err and "p0.log: record" in err
        assert json.loads(out)["partition"] == 1
    with serving(data, PARTITIONS), App(settings, migrate=False) as app:
        late = served(app, settings, "late")
        assert [o.kind for o in late] == [Kind.REJECTED]  # node 1 is disabled
        # the outcome goes out before the view commits: wait for the commit
        wait_for(
            lambda: (
                read_status(app.log, app.engine, settings.topics, PARTITIONS, totals=False)
                .partitions[1]
                .behind
                == 0
            ),
            "partition 1's view to catch up",
        )
        status = read_status(app.log, app.engine, settings.topics, PARTITIONS)
        assert status.damaged and status.damaged[0].partition == 0
