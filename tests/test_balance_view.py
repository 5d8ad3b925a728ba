"""Balancing on a real view: what may move (SQLite and PostgreSQL), and
``berth balance`` proposing and claiming moves that the writers then decide."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select

from berth.app import App, Settings
from berth.cli import main
from berth.client import Publisher
from consumers.balance_worker import BalanceWorker
from consumers.partition_writer import PartitionWriter, catch_up_all
from consumers.snapshot_source import balance_inputs
from ledger.embedded import EmbeddedLog
from ledger.log import Append
from ledger.topics import DEFAULT_TOPICS
from projections.view.engine import make_engine
from projections.view.migrate import upgrade
from projections.view.tables import reservations
from projections.view.writer import ViewWriter
from scheduling.config import SchedulerConfig
from schemas.codec import encode_event
from schemas.events import Event
from schemas.moves import MoveProposed
from tests.builders import claim, claim_items, consume, provider, release, set_state


def _on(pid: str, event: Event) -> Event:
    """``event`` routed to ``pid``'s partition (consume and release are keyed
    by reservation by default)."""
    return event.model_copy(update={"partition_key": pid})


def _decided(tmp_path: Path, url: str, events: list[Event]) -> Engine:
    log = EmbeddedLog(tmp_path / "log")
    for topic in (DEFAULT_TOPICS.events, DEFAULT_TOPICS.outcomes, DEFAULT_TOPICS.dead_letters):
        log.create_topic(topic, 1)
    log.append(DEFAULT_TOPICS.events, [Append(0, b"k", encode_event(e)) for e in events])
    writer = make_engine(url, writer=True)
    upgrade(writer)
    PartitionWriter(log, ViewWriter(writer), 0, 1).catch_up()
    log.close()
    writer.dispose()
    return make_engine(url)


def test_only_consumed_single_provider_reservations_may_move(tmp_path: Path, view_url: str) -> None:
    events = [
        *provider("a", ts=1, VCPU=8, MEMORY_MB=8192),
        *provider("b", ts=1, VCPU=8, MEMORY_MB=8192),
        claim(
            "run", "a", ts=2, VCPU=2, MEMORY_MB=512, group="g", tags=["web"], without_tags=["db"]
        ),
        consume("run", ts=2),
        claim("held", "a", ts=3, VCPU=1),
        claim("gone", "b", ts=3, VCPU=1),
        consume("gone", ts=3),
        release("gone", ts=4),
        claim_items("both", {"a": {"VCPU": 1}, "b": {"VCPU": 1}}, ts=5),
        consume("both", ts=5),
        # a move in flight: consumed on a, and the same consumer holds b
        claim("mv", "a", ts=6, VCPU=2, consumer="vm-mv"),
        consume("mv", ts=6),
        claim("mv.move", "b", ts=7, VCPU=2, consumer="vm-mv"),
    ]
    engine = _decided(tmp_path, view_url, events)
    try:
        snapshot, instances, leaving = balance_inputs(engine)
    finally:
        engine.dispose()
    assert [i.reservation_id for i in instances] == ["run"]
    (run,) = instances
    assert run.provider_id == "a" and run.consumer_id == "c-run" and run.project_id == "proj"
    assert dict(run.resources) == {"VCPU": 2, "MEMORY_MB": 512}
    assert run.anti_affinity_group == "g" and run.tags == frozenset({"web"})
    assert run.require_without_tags == frozenset({"db"})
    a = snapshot.providers[snapshot.row_of["a"]]
    assert a.instances == frozenset({"c-run", "c-held", "c-both", "vm-mv"})  # all occupy it
    assert a.groups == {"g": 1}
    assert [(i.reservation_id, i.provider_id, i.consumer_id) for i in leaving] == [
        ("mv", "a", "vm-mv")
    ]
    vcpu = snapshot.column("VCPU")
    # the view as it is: mv still on a, its move's hold on b
    assert snapshot.used[:, vcpu].tolist() == [6, 3]


def _cluster(data: Path) -> None:
    """a: 7 of 8 VCPU consumed (two instances of 3, one of 1); b and c empty."""
    with App(Settings(data_dir=data, partitions=2)) as app:
        edge = Publisher(app.log, clock_ms=lambda: 10**12)
        edge.publish([e for pid in "abc" for e in provider(pid, ts=1, VCPU=8, MEMORY_MB=8192)])
        sizes = {"r1": 3, "r2": 3, "r3": 1}
        edge.publish(
            [claim(rid, "a", ts=2, VCPU=n, MEMORY_MB=n * 1024) for rid, n in sizes.items()]
        )
        edge.publish([_on("a", consume(rid, ts=3)) for rid in sizes])
        catch_up_all(app.writers())


def _balancing(tmp_path: Path) -> tuple[Path, list[str]]:
    """:func:`_cluster`'s data directory, and ``berth balance`` on it with
    evenly_distributed at 50%."""
    data = tmp_path / "d"
    _cluster(data)
    config = tmp_path / "scheduler.toml"
    config.write_text('[balance]\npolicy = "evenly_distributed"\nhigh_utilization = 50\n')
    return data, ["balance", "--data-dir", str(data), "--config", str(config)]


def test_berth_balance_proposes_and_claims_moves_the_writers_accept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, balance = _balancing(tmp_path)

    assert main(balance) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "move r1 (c-r1, MEMORY_MB=3072,VCPU=3): a -> b; a: VCPU at 87.5%, above 50%",
        "1 move; evenly_distributed: no provider above 50% VCPU",
    ]

    assert main([*balance, "--claim", "--json", "--lease-ms", "60000"]) == 0
    plan = json.loads(capsys.readouterr().out)
    (move,) = plan["moves"]
    new_id = move["claim"]["reservation_id"]
    assert new_id.startswith("r1.move-") and move["destination"] == "b"
    # the service that moves instances is told on berth.moves
    log = EmbeddedLog(data, read_only=True)
    try:
        proposed = [
            MoveProposed.model_validate_json(r.value)
            for p in range(2)
            for r in log.read(DEFAULT_TOPICS.moves, p, 0, 10)
        ]
    finally:
        log.close()
    assert [(m.reservation_id, m.claim_id, m.source, m.destination) for m in proposed] == [
        ("r1", new_id, "a", "b")
    ]
    assert proposed[0].consumer_id == "c-r1" and proposed[0].resources == {
        "VCPU": 3,
        "MEMORY_MB": 3072,
    }
    assert (proposed[0].claim_partition, proposed[0].claim_offset) == (
        move["claim"]["partition"],
        move["claim"]["offset"],
    )
    # no writer has applied the claim yet: a plan now says so
    assert main(balance) == 0
    captured = capsys.readouterr()
    assert "the view is 1 record behind the log" in captured.err
    assert captured.out.splitlines()[0].startswith("move r1 ")

    with App(Settings(data_dir=data)) as app:
        catch_up_all(app.writers())
        with app.engine.connect() as conn:
            row = conn.execute(
                select(reservations).where(reservations.c.reservation_id == new_id)
            ).one()
        assert row.status == "held" and row.consumer_id == "c-r1"
        assert row.items == [{"provider_id": "b", "resources": {"MEMORY_MB": 3072, "VCPU": 3}}]
        assert row.lease_ms == 60_000
        # while r1 is on its way, a counts as without it (4 of 8): nothing more to move
        assert main(balance) == 0
        assert capsys.readouterr().out.splitlines() == [
            "0 moves; evenly_distributed: no provider above 50% VCPU"
        ]
        # the move is done: the old reservation released, the new one consumed
        edge = Publisher(app.log)
        edge.publish([_on("a", release("r1", ts=10**12)), _on("b", consume(new_id, ts=10**12))])
        catch_up_all(app.writers())

    assert main(balance) == 0
    assert capsys.readouterr().out.splitlines() == [
        "0 moves; evenly_distributed: no provider above 50% VCPU"
    ]


def test_berth_balance_refuses_bad_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "d"
    _cluster(data)
    config = tmp_path / "scheduler.toml"
    config.write_text('[balance]\npolicy = "evenly"\n')
    assert main(["balance", "--data-dir", str(data), "--config", str(config)]) == 2
    assert "unknown policy 'evenly'" in capsys.readouterr().err
    assert main(["balance", "--data-dir", str(data), "--max-moves", "-1"]) == 2
    assert "--max-moves must be 0 or more" in capsys.readouterr().err
    assert main(["balance", "--data-dir", str(data), "--lease-ms", "0"]) == 2
    assert "--lease-ms must be from 1" in capsys.readouterr().err
    # no policy configured: only evacuations, and there are none
    assert main(["balance", "--data-dir", str(data)]) == 0
    assert capsys.readouterr().out.splitlines() == ["0 moves; no provider is evacuating"]


def test_a_balancer_round_waits_until_the_view_holds_the_last_round_s_claims(
    tmp_path: Path,
) -> None:
    data = tmp_path / "d"
    _cluster(data)
    config = SchedulerConfig.from_mapping(
        {"balance": {"policy": "evenly_distributed", "high_utilization": 50, "max_moves": 1}}
    )
    with App(Settings(data_dir=data)) as app:
        worker = BalanceWorker(app.engine, Publisher(app.log), config, claim=True, lease_ms=60_000)
        first = worker.step()
        assert first is not None
        plan, claims = first
        assert [m.instance.reservation_id for m in plan.moves] == ["r1"]
        assert [c.move for c in claims] == list(plan.moves)
        # the writers have not applied the claim: planning now would move
        # another instance off a for the same excess
        assert worker.step() is None and worker.rounds == 1
        catch_up_all(app.writers())
        again = worker.step()
        assert again is not None
        assert again[0].moves == () and worker.rounds == 2


def test_berth_balance_every_s_plans_round_after_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, balance = _balancing(tmp_path)
    every = [*balance, "--json"]
    assert main([*every, "--every-s", "0.01", "--rounds", "3"]) == 0
    plans = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(plans) == 3
    assert all([m["reservation_id"] for m in p["moves"]] == ["r1"] for p in plans)
    assert main([*every, "--every-s", "0"]) == 2
    assert "--every-s must be positive" in capsys.readouterr().err
    assert main([*every, "--rounds", "2"]) == 2
    assert "--rounds counts the rounds of --every-s" in capsys.readouterr().err


POLICIES: list[dict[str, object]] = [
    {"policy": "none"},
    {"policy": "evenly_distributed", "high_utilization": 60},
    {"policy": "power_saving", "high_utilization": 70, "low_utilization": 30},
    {"policy": "vm_evenly_distributed", "high_instance_count": 2, "migration_threshold": 2},
]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Event], int]:
    """Events that build a small cluster of consumed instances (some in one
    anti-affinity group, some providers evacuating or disabled), and a policy."""
    events: list[Event] = []
    for n in range(draw(st.integers(2, 5))):
        pid = f"n{n}"
        capacity = draw(st.integers(2, 12))
        events += provider(pid, ts=1, VCPU=capacity, MEMORY_MB=capacity * 1024)
        used = 0
        for k, size in enumerate(draw(st.lists(st.integers(1, 4), max_size=5))):
            if used + size > capacity:
                continue
            used += size
            rid = f"{pid}-{k}"
            group = "g" if draw(st.booleans()) and draw(st.booleans()) else None
            events += [
                claim(rid, pid, ts=2, VCPU=size, MEMORY_MB=size * 1024, group=group),
                _on(pid, consume(rid, ts=2)),
            ]
        state = draw(st.sampled_from(["enabled", "enabled", "enabled", "evacuating", "disabled"]))
        if state != "enabled":
            events.append(set_state(pid, state, ts=3))  # type: ignore[arg-type]
    return events, draw(st.integers(0, len(POLICIES) - 1))


@settings(max_examples=25, deadline=None)
@given(clusters())
def test_the_writers_accept_every_move_a_plan_on_a_current_view_claims(
    case: tuple[list[Event], int],
) -> None:
    """The balancer proposes and the writer disposes, and on a view with no
    one else claiming they agree: every claim of a plan (several moves, some
    onto the sources of earlier ones) is accepted."""
    events, policy = case
    config = SchedulerConfig.from_mapping({"balance": {**POLICIES[policy], "max_moves": 6}})
    with tempfile.TemporaryDirectory() as tmp, App(Settings(data_dir=Path(tmp))) as app:
        edge = Publisher(app.log, clock_ms=lambda: 10**12)
        edge.publish(events)
        writers = app.writers()
        catch_up_all(writers)
        worker = BalanceWorker(app.engine, edge, config, claim=True, lease_ms=60_000)
        result = worker.step()
        assert result is not None
        plan, claims = result
        catch_up_all(writers)
        with app.engine.connect() as conn:
            statuses = dict(
                conn.execute(
                    select(reservations.c.reservation_id, reservations.c.status).where(
                        reservations.c.reservation_id.in_([c.reservation_id for c in claims])
                    )
                ).all()
            )
    assert statuses == {c.reservation_id: "held" for c in claims}, plan.stopped


def test_berth_balance_plans_by_the_default_policy_set_at_run_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a configuration the balance unit is none: no moves. Once an
    oVirt cluster policy is set as the default policy in the log, the next
    plan (no restart, no file) moves by it."""
    data = tmp_path / "d"
    _cluster(data)
    balance = ["balance", "--data-dir", str(data)]
    assert main(balance) == 0
    assert capsys.readouterr().out.startswith("0 moves")
    policy = tmp_path / "even.toml"
    policy.write_text('[balance]\npolicy = "evenly_distributed"\nhigh_utilization = 50\n')
    assert main(["policy", "set", "default", "--file", str(policy), "--data-dir", str(data)]) == 0
    capsys.readouterr()
    assert main(balance) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "move r1 (c-r1, MEMORY_MB=3072,VCPU=3): a -> b; a: VCPU at 87.5%, above 50%"
