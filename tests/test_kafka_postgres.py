"""The scale configuration end to end: Kafka-protocol log, PostgreSQL view."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from berth.history import read_history
from berth.metrics import LedgerCollector, registry_for
from berth.replay import replay
from berth.status import read_status
from consumers.partition_writer import catch_up_all
from ledger.log import OwnedElsewhere
from ledger.topics import Topics
from projections.view.tables import inventories, reservations
from schemas.outcomes import Kind, Outcome
from tests.builders import claim, consume, provider, release
from tests.placements import placement_answers
from tests.postgres import scratch_database
from tests.prometheus import by_label, parse
from tests.txn_builders import pool


def _settings(kafka_bootstrap: str, postgres_url: str, partitions: int) -> Settings:
    """Kafka and PostgreSQL, with topics of this test's own: the broker is
    shared by the whole session."""
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(
        *(f"{name}-{suffix}" for name in ("ev", "out", "dead", "req", "place", "txn", "moves"))
    )
    return Settings(
        log_url=f"kafka://{kafka_bootstrap}",
        db_url=postgres_url,
        partitions=partitions,
        topics=topics,
    )


def test_claims_through_kafka_and_postgres(kafka_bootstrap: str, postgres_url: str) -> None:
    settings = _settings(kafka_bootstrap, postgres_url, partitions=3)
    topics = settings.topics
    with App(settings) as app:
        edge = Publisher(app.log, topics, clock_ms=lambda: 10**6)
        edge.publish([*provider("n1", ts=1, VCPU=4), *provider("n2", ts=1, VCPU=2)])
        edge.publish(
            [
                claim("r1", "n1", ts=10, VCPU=3),
                claim("r2", "n1", ts=11, VCPU=3),  # does not fit any more
                claim("r3", "n2", ts=12, VCPU=2),
            ]
        )
        edge.publish([release("r1", ts=13).model_copy(update={"partition_key": "n1"})])
        edge.publish([claim("r4", "n1", ts=14, VCPU=3)])  # fits again
        ends = [app.log.end_offset(topics.events, p) for p in range(3)]
        lagging = read_status(app.log, app.engine, topics, 3, totals=False)
        assert [(p.log_end, p.behind) for p in lagging.partitions] == [(e, e) for e in ends]
        catch_up_all(app.writers())
        status = read_status(app.log, app.engine, topics, 3)
        assert [(p.applied, p.behind) for p in status.partitions] == [(e, 0) for e in ends]
        assert status.totals is not None
        assert status.totals.reservations == {"held": 2, "released": 1}
        decided = {
            o.subject: o.kind
            for p in range(3)
            for o in (Outcome.from_json(r.value) for r in app.log.read(topics.outcomes, p, 0, 100))
            if o.subject.startswith("r")
        }
        audit = read_history(app.engine, "r1", app.log, topics.events)
        exported = generate_latest(registry_for(LedgerCollector(app.log, app.engine, topics, 3)))
        with app.engine.connect() as conn:
            statuses = dict(
                conn.execute(select(reservations.c.reservation_id, reservations.c.status)).all()
            )
            held = dict(
                conn.execute(
                    select(inventories.c.provider_id, inventories.c.held).where(
                        inventories.c.resource_class == "VCPU"
                    )
                ).all()
            )
    assert decided == {
        "r1": Kind.RELEASED,
        "r2": Kind.REJECTED,
        "r3": Kind.ACCEPTED,
        "r4": Kind.ACCEPTED,
    }
    assert statuses == {"r1": "released", "r3": "held", "r4": "held"}
    samples = parse(exported.decode())
    assert by_label(samples, "berth_log_end_offset", "partition") == {
        str(p): end for p, end in enumerate(ends)
    }
    assert by_label(samples, "berth_resource_held", "resource_class") == {"VCPU": 5}
    # the audit trail reads each decision's record back from Kafka
    assert [(s.outcome.kind, s.record and s.record["type"]) for s in audit.steps] == [
        (Kind.ACCEPTED, "claim"),
        (Kind.RELEASED, "release"),
    ]
    assert held == {"n1": 3, "n2": 2}
    with scratch_database() as fresh:
        result = replay(
            Settings(log_url=settings.log_url, db_url=fresh, topics=topics), verify=True
        )
    assert result.divergence is None
    assert result.verified == result.outcomes > 0


def test_the_scheduler_worker_on_kafka_and_postgres(
    kafka_bootstrap: str, postgres_url: str
) -> None:

    from consumers.scheduler import OutcomeFollower, Scheduler
    from consumers.scheduler_worker import SchedulerWorker
    from consumers.snapshot_source import snapshot_from_view
    from scheduling.config import SchedulerConfig
    from schemas.requests import PlacementRequest

    settings = _settings(kafka_bootstrap, postgres_url, partitions=2)
    topics = settings.topics
    with App(settings) as app:
        edge = Publisher(app.log, topics, clock_ms=lambda: 10**6)
        edge.publish([e for n in range(2) for e in provider(f"n{n}", ts=1, VCPU=4)])
        writers = app.writers()

        def pump() -> None:  # stands in for the projector process
            catch_up_all(writers)

        scheduler = Scheduler(
            edge,
            SchedulerConfig.default().engine(),
            lambda: snapshot_from_view(app.engine),
            OutcomeFollower(app.log, topics.outcomes),
            pump=pump,
        )
        worker = SchedulerWorker(app.log, topics, scheduler)
        edge.submit(
            [
                PlacementRequest(
                    request_id=f"q{k}", ts_ms=10, project_id="p", resources={"VCPU": 3}
                )
                for k in range(3)
            ]
        )
        assert worker.step() == 3
        answers = placement_answers(app)
    assert sorted(a["placed"] for a in answers) == [False, True, True]


def test_batches_commit_whole_or_hold_nothing_on_kafka_and_postgres(
    kafka_bootstrap: str, postgres_url: str
) -> None:
    """The coordinator, its transactions topic and the queue projection on the
    real engines: a batch spanning both partitions commits whole, one that
    cannot fit holds nothing, a queued one is counted by shape, and a new
    coordinator finds nothing left unfinished."""

    from sqlalchemy import select

    from consumers.batches import BatchScheduler
    from consumers.coordinator import Coordinator
    from consumers.queue_projector import QueueProjector, read_depth
    from consumers.scheduler import OutcomeFollower, Scheduler
    from consumers.scheduler_worker import SchedulerWorker
    from consumers.snapshot_source import snapshot_from_view
    from projections.view.tables import reservations
    from scheduling.config import SchedulerConfig
    from scheduling.model import Snapshot
    from schemas.events import IdentifierItem
    from schemas.requests import BatchMode, BatchRequest, PlacementRequest

    settings = _settings(kafka_bootstrap, postgres_url, partitions=2)
    topics = settings.topics
    with App(settings) as app:
        edge = Publisher(app.log, topics, clock_ms=lambda: 10**6)
        edge.publish([e for n in range(4) for e in provider(f"n{n}", ts=1, VCPU=4)])
        edge.publish([pool("vni", "vni", ts=1)])
        writers = app.writers()

        def pump() -> None:
            catch_up_all(writers)

        def snapshot() -> Snapshot:
            return snapshot_from_view(app.engine)

        engine = SchedulerConfig.default().engine()
        follower = OutcomeFollower(app.log, topics.outcomes)
        coordinator = Coordinator(edge, app.log, topics, follower, pump=pump)
        batches = BatchScheduler(coordinator, engine, snapshot, 2, pump=pump)
        scheduler = Scheduler(edge, engine, snapshot, follower, pump=pump)
        pump()
        worker = SchedulerWorker(app.log, topics, scheduler, batches=batches)

        def job(batch_id: str, count: int, mode: BatchMode = "all_or_nothing") -> BatchRequest:
            member = PlacementRequest(
                request_id=f"{batch_id}-m",
                ts_ms=10**6,
                project_id="p",
                resources={"VCPU": 4},
                num_instances=count,
                identifiers=(IdentifierItem(pool_id="vni"),),
            )
            return BatchRequest(batch_id=batch_id, ts_ms=10**6, members=(member,), mode=mode)

        for request in (job("whole", 3), job("too-big", 2), job("later", 2, "queue")):
            edge.submit([request])  # one at a time: the worker reads partitions in turn
            assert worker.step() == 1
        pump()
        answers = {a["request_id"]: a for a in placement_answers(app)}
        assert answers["whole"]["status"] == "committed", answers["whole"]["reason"]
        vnis = sorted(int(v) for i in answers["whole"]["instances"] for _, v in i["identifiers"])
        assert vnis == [1, 2, 3]
        assert answers["too-big"]["status"] == "failed"
        assert answers["later"]["status"] == "queued"
        with app.engine.connect() as conn:
            statuses = [row.status for row in conn.execute(select(reservations.c.status))]
        held = [rid for i in answers["whole"]["instances"] for rid in i["reservation_ids"]]
        assert len(held) >= 3  # a VNI shares its instance's reservation when in its partition
        assert sorted(statuses) == ["held"] * len(held)  # nothing of the refused batch
        QueueProjector(app.log, topics, app.engine).catch_up()
        assert read_depth(app.engine) == {"VCPU=4": {"instances": 2, "batches": 1}}
        assert Coordinator(edge, app.log, topics, follower, pump=pump).recover() == []


@pytest.mark.parametrize("view", ["postgresql", "sqlite"])
def test_a_second_writer_of_a_kafka_partition_is_refused(
    kafka_bootstrap: str, view: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Kafka cannot tell two owners of a partition apart: the view they share
    refuses the second, on its server or beside its file."""
    db_url = (
        request.getfixturevalue("postgres_url")
        if view == "postgresql"
        else f"sqlite:///{tmp_path / 'view.db'}"
    )
    settings = _settings(kafka_bootstrap, db_url, partitions=2)
    with App(settings) as first, App(settings) as second:
        first.writers([0])
        with pytest.raises(OwnedElsewhere, match="partition 0 of 'ev-"):
            second.writers()
        assert [w.partition for w in second.writers([1])] == [1]


def test_a_balance_round_on_kafka_and_postgres(kafka_bootstrap: str, postgres_url: str) -> None:
    from consumers.balance_worker import BalanceWorker
    from scheduling.config import SchedulerConfig
    from schemas.moves import MoveProposed

    settings = _settings(kafka_bootstrap, postgres_url, partitions=2)
    topics = settings.topics
    config = SchedulerConfig.from_mapping(
        {"balance": {"policy": "evenly_distributed", "high_utilization": 50}}
    )
    with App(settings) as app:
        edge = Publisher(app.log, topics, clock_ms=lambda: 10**12)
        edge.publish([e for pid in ("n1", "n2") for e in provider(pid, ts=1, VCPU=8)])
        edge.publish([claim(rid, "n1", ts=2, VCPU=3) for rid in ("r1", "r2")])
        edge.publish(
            [consume(rid, ts=3).model_copy(update={"partition_key": "n1"}) for rid in ("r1", "r2")]
        )
        writers = app.writers()
        catch_up_all(writers)
        worker = BalanceWorker(app.engine, edge, config, claim=True, lease_ms=60_000)
        first = worker.step()
        assert first is not None
        (claimed,) = first[1]
        assert (claimed.move.instance.reservation_id, claimed.move.destination) == ("r1", "n2")
        catch_up_all(writers)
        with app.engine.connect() as conn:
            status = conn.execute(
                select(reservations.c.status).where(
                    reservations.c.reservation_id == claimed.reservation_id
                )
            ).scalar_one()
        assert status == "held"
        proposals = [
            MoveProposed.model_validate_json(r.value)
            for p in range(2)
            for r in app.log.read(topics.moves, p, 0, 10)
        ]
        assert [(m.reservation_id, m.claim_id) for m in proposals] == [
            ("r1", claimed.reservation_id)
        ]
        again = worker.step()
        assert again is not None and again[0].moves == ()  # n1 counts as 3 of 8 now


def test_the_http_api_on_kafka_and_postgres(kafka_bootstrap: str, postgres_url: str) -> None:
    """The API's waits read Kafka, while writers and a scheduler worker run in
    a thread as berth serve runs them."""
    import threading
    import time

    from berth.api import Api
    from consumers.partition_writer import step_all
    from scheduling.config import SchedulerConfig
    from tests.http_calls import call, serving

    settings = _settings(kafka_bootstrap, postgres_url, partitions=2)
    with App(settings) as app:
        writers = app.writers()
        worker = app.scheduler_worker(SchedulerConfig.default(), lambda: catch_up_all(writers))
        stop = threading.Event()

        def serve_loop() -> None:
            while not stop.is_set():
                busy = step_all(writers)
                if not (worker.step() or busy):
                    stop.wait(0.005)

        loop = threading.Thread(target=serve_loop)
        loop.start()
        try:
            with serving(Api(app)) as url:
                events = [
                    json.loads(e.model_dump_json())
                    for n in range(2)
                    for e in provider(f"n{n}", ts=1, VCPU=4)
                ]
                status, reply = call(url, "/v1/events?wait=60", events)
                assert status == 200
                assert [o["kind"] for d in reply["decisions"].values() for o in d] == [
                    "applied"
                ] * 4
                now = int(time.time() * 1000)
                requests = [
                    {
                        "request_id": f"q{k}",
                        "ts_ms": now,
                        "project_id": "p",
                        "resources": {"VCPU": 3},
                    }
                    for k in range(3)
                ]
                status, reply = call(url, "/v1/requests?wait=60", requests)
                assert status == 200
                answers = reply["answers"]
                assert sorted(answers[f"q{k}"]["placed"] for k in range(3)) == [False, True, True]
                placed = next(a for a in answers.values() if a["placed"])
                rid = placed["reservations"][0][0]
                status, reply = call(url, f"/v1/history/{rid}")
                assert status == 200 and reply["history"][0]["record"]["type"] == "claim"
        finally:
            stop.set()
            loop.join(timeout=30)
