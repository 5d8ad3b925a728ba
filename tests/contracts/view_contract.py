"""The read model's contract, run against every database by short subclasses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, Table, func, select

from consumers.partition_writer import PartitionWriter
from ledger.embedded import EmbeddedLog
from ledger.log import Append, Log
from ledger.topics import DEFAULT_TOPICS
from projections.batch import Batch
from projections.holds import named
from projections.pools import PoolState
from projections.projector import apply
from projections.state import CONSUMED, HELD, PartitionState, Reservation
from projections.view.engine import make_engine
from projections.view.loader import load_state
from projections.view.migrate import upgrade
from projections.view.tables import (
    dead_letters,
    inventories,
    outcomes,
    partition_offsets,
    pools,
    provider_usage,
    providers,
    reservation_identifiers,
    reservations,
)
from projections.view.writer import StaleBatch, ViewWriter
from schemas.codec import encode_event
from schemas.events import DESCRIBED_FIELDS, Claim, ClaimSpec, Event
from schemas.outcomes import Code, Kind, Outcome
from tests.builders import (
    claim,
    consume,
    next_id,
    provider,
    release,
    renew,
    retire,
    tick,
    topology,
    with_ts,
)
from tests.txn_builders import claim_set, decide, ids, pool, release_consumer, spec, take

TOPIC = DEFAULT_TOPICS.events


def scenario() -> list[Event]:
    """Every kind of change the view records, on two providers."""
    return [
        *provider("n1", ts=1, VCPU=(8, 2.0), MEMORY_MB=4096),
        *provider("n2", ts=1, VCPU=4, MEMORY_MB=2048),
        claim("r1", "n1", ts=10, lease_ms=100, VCPU=4, MEMORY_MB=1024),
        claim("r2", "n1", ts=11, lease_ms=100, VCPU=20, MEMORY_MB=1024),  # rejected
        claim("r3", "n2", ts=12, lease_ms=50, VCPU=2, MEMORY_MB=512, tags=["web"]),
        consume("r1", ts=13),
        claim("r4", "n2", ts=14, lease_ms=1000, VCPU=1, MEMORY_MB=256, group="g"),
        renew("r4", 5000, ts=15),
        claim("r5", "n1", ts=16, lease_ms=10, VCPU=1, MEMORY_MB=64),
        release("r5", ts=17),
        tick(200),  # r3 expires
        *provider("n3", ts=201, VCPU=2),
        retire("n3", ts=202),
        claim("r6", "n1", ts=203, VCPU=1, MEMORY_MB=64),
        topology(
            "n1",
            ts=203,
            numa_cells=[
                {
                    "cell_id": 0,
                    "cpus": [0, 1, 2, 3],
                    "siblings": [[0, 2], [1, 3]],
                    "dedicated": [2, 3],
                    "shared": [0],
                    "memory_mb": 2048,
                    "huge_pages": [{"size_kb": 2048, "total": 256}],
                },
                {"cell_id": 1, "cpus": [4, 5, 6, 7], "memory_mb": 2048},
            ],
            pci_devices=[
                {
                    "address": "0000:81:00.0",
                    "vendor_id": "8086",
                    "product_id": "1572",
                    "device_type": "type-PF",
                    "numa_node": 1,
                },
                {
                    "address": "0000:81:00.1",
                    "vendor_id": "8086",
                    "product_id": "154c",
                    "device_type": "type-VF",
                    "parent_address": "0000:81:00.0",
                    "numa_node": 1,
                    "physical_network": "physnet1",
                    "tags": {"trusted": "true"},
                },
            ],
        ),
    ]


def _claim(s: ClaimSpec, ts: int) -> Claim:
    """A claim of amounts and identifiers together."""
    return Claim(event_id=next_id(), ts_ms=ts, partition_key=s.items[0].provider_id, **dict(s))


def pool_scenario() -> tuple[list[Event], list[Event]]:
    """Pools, identifier claims, claim sets and transactions in every state at
    the end of the log (held, consumed, pending, committed, aborted, wounded,
    expired at the deadline, released); and a continuation that decides what is
    still pending, repeats finished claims and takes the lowest free again."""
    s1 = spec("s1", {"n1": {"VCPU": 2}}, ids("ip"), consumer="vm2")
    s2 = spec("s2", {"n2": {"VCPU": 1}}, ids("v6", "vni", ("big6", "fd00:1::ab:1")), consumer="vm2")
    a1 = take("a1", "ip", ids(("ip", "10.0.0.4"), "vni"), ts=10, consumer="vm1")
    log: list[Event] = [
        *provider("n1", ts=1, VCPU=8, MEMORY_MB=4096),
        *provider("n2", ts=1, VCPU=4),
        pool("ip", "ipv4", cidr="10.0.0.0/29", excluded=["10.0.0.1"], ts=2),  # .2 .. .6
        pool("vni", "vni", first=100, last=103, ts=2),
        pool("v6", "ipv6", cidr="fd00::/120", ts=2),  # identifiers past BIGINT
        pool("big6", "ipv6", cidr="fd00:1::/64", ts=2),  # and counts past BIGINT
        pool("colour", "set", members=["red", "green"], ts=2),
        pool("colour", "set", members=["red", "green", "blue"], excluded=["red"], ts=3),
        a1,  # identifiers only: a named address and the lowest VNI
        _claim(
            spec(
                "a2",
                {"n1": {"VCPU": 1}},
                ids("ip", "v6", ("colour", "green")),
                consumer="vm1",
                lease_ms=500,
            ),
            ts=11,
        ),
        claim("p1", "n1", ts=12, VCPU=1),  # a plain claim
        take("a3", "ip", ids(("ip", "10.0.0.4")), ts=13),  # taken: rejected
        claim_set("k", s1, s2, ts=20),  # held together
        claim_set(
            "k", spec("s3", {"n1": {"VCPU": 1}}, ids("vni")), spec("s4", {"n2": {"VCPU": 9}}), ts=21
        ),
        claim_set(
            "k",
            spec("s5", None, ids("vni")),
            spec("s6", None, ids(("ip", "10.0.0.4"))),
            atomic=False,
            ts=22,
        ),
        consume("s1", ts=23),
        renew("a2", 900, ts=24),
        release("a1", ts=25),  # 10.0.0.4 and VNI 100 back ...
        take("a4", "ip", ids(("ip", "10.0.0.4")), ts=26, consumer="vm3"),  # ... and taken again
        claim_set(
            "k",
            spec("x1", {"n2": {"VCPU": 1}}, ids("vni")),
            spec("x2", None, ids(("ip", "10.0.0.6"))),
            txn="t1",
            priority=5,
            deadline=500,
            ts=30,
        ),
        decide("t1", True, ts=31),
        claim_set(
            "k",
            spec("y1", {"n1": {"VCPU": 1}}, ids("colour")),
            txn="t2",
            priority=7,
            deadline=300,
            ts=32,
        ),
        decide("t2", False, ts=33),
        claim_set("k", spec("z1", None, ids("vni")), txn="t3", priority=9, deadline=120, ts=34),
        claim_set("k", spec("w1", {"n2": {"VCPU": 2}}), txn="t4", priority=9, deadline=1000, ts=40),
        # older: wounds t4 for n2's capacity
        claim_set(
            "k",
            spec("v1", {"n2": {"VCPU": 2}}, ids("ip")),
            txn="t5",
            priority=1,
            deadline=2000,
            ts=41,
        ),
        claim_set("k", spec("u1", {"n1": {"VCPU": 3}}), txn="t6", priority=8, deadline=1000, ts=42),
        # not atomic: m2 fits only once t6 is wounded, so it is held after m3
        claim_set(
            "k",
            spec("m1", {"n1": {"VCPU": 1}}),
            spec("m2", {"n1": {"VCPU": 2}}),
            spec("m3", None, ids("v6")),
            atomic=False,
            txn="t7",
            priority=2,
            deadline=2000,
            ts=43,
        ),
        claim_set(
            "k",
            spec("q1", None, ids("colour"), consumer="vm5"),
            txn="t8",
            priority=3,
            deadline=2000,
            ts=44,
        ),
        release_consumer("vm5", ts=45),  # a pending hold released
        # another set of t7, with another priority: t7 keeps the one it had here
        claim_set("k", spec("m4", None, ids("v6")), txn="t7", priority=9, deadline=2000, ts=46),
        tick(130),  # z1 expires at t3's deadline
        release_consumer("vm2", ts=131),
        take("a5", "ip", ids("ip", "vni"), ts=132, consumer="vm1"),  # the lowest free again
    ]
    more: list[Event] = [
        decide("t7", True, ts=140),  # committed in the order they were held: m1, m3, m2, m4
        decide("t5", False, ts=141),
        decide("t1", True, ts=142),  # decided already
        with_ts(claim_set("k", s1, s2), 143),  # duplicates of finished claims
        with_ts(a1, 144),
        claim_set("k", spec("s1", {"n1": {"VCPU": 2}}, ids("vni"), consumer="vm2"), ts=145),
        take("a6", "ip", ids("ip", "ip", "vni"), ts=146),
        claim_set(
            "k",
            spec("n9", {"n2": {"VCPU": 1}}, ids("v6", "colour")),
            txn="t9",
            priority=4,
            deadline=300,
            ts=147,
        ),
        claim_set(
            "k", spec("n10", {"n1": {"VCPU": 8}}), txn="t10", priority=1, deadline=900, ts=148
        ),
        tick(301),  # n9 expires at its deadline
        release_consumer("vm1", ts=302),
        consume("m1", ts=303),
        tick(5000),
        take("a7", "ip", ids("ip", ("vni", "101"), "v6", "colour"), ts=5001),
    ]
    return log, more


def publish(log: Log, events: list[Event], raw: list[bytes] | None = None) -> None:
    values = [encode_event(e) for e in events] + (raw or [])
    log.append(TOPIC, [Append(0, b"k", v) for v in values])


class ViewContract:
    """Subclasses provide a ``database_url`` fixture; the log is the embedded one."""

    @pytest.fixture()
    def engine(self, database_url: str) -> Engine:
        engine = make_engine(database_url, writer=True)
        upgrade(engine)
        return engine

    @pytest.fixture()
    def log(self, tmp_path: Path) -> Log:
        log = EmbeddedLog(tmp_path / "log")
        for topic in (DEFAULT_TOPICS.events, DEFAULT_TOPICS.outcomes):
            log.create_topic(topic, 1)
        log.create_topic(DEFAULT_TOPICS.dead_letters, 1)
        return log

    def writer(self, log: Log, engine: Engine, batch_size: int = 2000) -> PartitionWriter:
        return PartitionWriter(log, ViewWriter(engine), 0, 1, batch_size=batch_size)

    def test_view_matches_the_projector_state(self, log: Log, engine: Engine) -> None:
        publish(log, scenario())
        writer = self.writer(log, engine)
        assert writer.catch_up() == len(scenario())
        state = writer.state
        with engine.connect() as conn:
            rows = {(r.provider_id, r.resource_class): r for r in conn.execute(select(inventories))}
            statuses = dict(
                conn.execute(select(reservations.c.reservation_id, reservations.c.status)).all()
            )
            offset = conn.execute(select(partition_offsets)).one()
            provider_ids = set(conn.execute(select(providers.c.provider_id)).scalars())
        assert provider_ids == {"n1", "n2"}  # n3 was retired
        for pid, p in state.providers.items():
            for i, rc in enumerate(p.layout.classes):
                row = rows[(pid, rc)]
                assert (row.held, row.consumed) == (p.held[i], p.consumed[i])
                assert row.free == p.layout.limits[i].capacity - p.held[i] - p.consumed[i]
        assert rows[("n1", "VCPU")].capacity == 16
        assert rows[("n1", "VCPU")].consumed == 4
        assert statuses == {
            "r1": "consumed",
            "r3": "expired",
            "r4": "held",
            "r5": "released",
            "r6": "held",
        }
        assert offset.next_offset == len(scenario())
        assert offset.clock_ms == 203

    def test_a_batch_applied_twice_changes_nothing(self, log: Log, engine: Engine) -> None:
        publish(log, scenario())
        writer = self.writer(log, engine)
        batch = writer.step()
        assert batch is not None
        before = self._counts(engine)
        assert writer.view.commit(writer.state, batch) is False
        assert self._counts(engine) == before

    def test_a_gap_is_refused(self, log: Log, engine: Engine) -> None:
        writer = self.writer(log, engine)
        with pytest.raises(StaleBatch):
            writer.view.commit(writer.state, Batch(0, 5, 6))

    def test_restart_resumes_with_identical_state(self, log: Log, engine: Engine) -> None:
        events = scenario()
        publish(log, events)
        uninterrupted = PartitionState(0, 1)
        expected: list[Outcome] = []
        for offset, event in enumerate(events + events[4:9]):
            expected.extend(apply(uninterrupted, offset, event))
        first = self.writer(log, engine, batch_size=7)
        first.step()  # offsets 0..6 only
        resumed = self.writer(log, engine, batch_size=7)
        assert resumed.next_offset == 7
        _assert_same_state(resumed.state, _state_after(events[:7]))
        resumed.catch_up()
        publish(log, events[4:9])  # duplicates and re-used ids, after a restart
        again = self.writer(log, engine)
        _assert_same_state(again.state, resumed.state)
        again.catch_up()
        _assert_same_state(again.state, uninterrupted)
        with engine.connect() as conn:
            recorded = conn.execute(select(func.count()).select_from(outcomes)).scalar_one()
        assert recorded == len(expected)

    def test_bad_records_go_to_the_dead_letter_topic(self, log: Log, engine: Engine) -> None:
        good = provider("n1", ts=1, VCPU=4)
        publish(log, good, raw=[b"{not json", b'{"type": "claim"}'])
        publish(log, [claim("r1", "n1", ts=2, VCPU=1)])
        writer = self.writer(log, engine)
        writer.catch_up()
        with engine.connect() as conn:
            dead = conn.execute(select(dead_letters).order_by(dead_letters.c.offset)).all()
        assert [d.offset for d in dead] == [2, 3]
        assert "Invalid JSON" in dead[0].reason
        assert "event_id" in dead[1].reason
        assert "r1" in writer.state.reservations  # the writer went on
        letters = log.read(DEFAULT_TOPICS.dead_letters, 0, 0, 10)
        assert len(letters) == 2

    @pytest.mark.parametrize("batch_size", [3, 2000])
    def test_pools_and_transactions_are_checkpointed_exactly(
        self, log: Log, engine: Engine, batch_size: int
    ) -> None:
        events, more = pool_scenario()
        fresh = PartitionState(0, 1)
        expected = [apply(fresh, offset, e) for offset, e in enumerate(events + more)]
        _assert_scenario_covered(expected[: len(events)], expected[len(events) :])
        publish(log, events)
        writer = self.writer(log, engine, batch_size=batch_size)
        while (batch := writer.step()) is not None:
            with engine.connect() as conn:
                loaded, next_offset = load_state(conn, 0, 1)
            assert next_offset == batch.end
            _assert_same_state(loaded, writer.state)
            _assert_identifiers_match(engine, writer.state)
            # continuing from the checkpoint decides as the uninterrupted run did
            continued = [
                apply(loaded, offset, e)
                for offset, e in enumerate((events + more)[batch.end :], batch.end)
            ]
            assert continued == expected[batch.end :]
            before = _dump(engine)
            assert writer.view.commit(writer.state, batch) is False  # a redelivery
            assert _dump(engine) == before
            assert not writer.state.pools_touched
        assert writer.next_offset == len(events)
        # a restarted writer goes on with the continuation, through the view
        publish(log, more)
        resumed = self.writer(log, engine, batch_size=batch_size)
        resumed.catch_up()
        uninterrupted = PartitionState(0, 1)
        for offset, e in enumerate(events + more):
            apply(uninterrupted, offset, e)
        _assert_same_state(resumed.state, uninterrupted)
        _assert_identifiers_match(engine, resumed.state)
        with engine.connect() as conn:
            recorded = conn.execute(
                select(outcomes.c.subject, outcomes.c.kind, outcomes.c.identifiers).order_by(
                    outcomes.c.offset, outcomes.c.seq
                )
            ).all()
            rows = {r.reservation_id: r for r in conn.execute(select(reservations))}
        flat = [o for record in expected for o in record]
        assert [(r.subject, r.kind) for r in recorded] == [(o.subject, o.kind) for o in flat]
        assert [[tuple(p) for p in r.identifiers or ()] for r in recorded] == [
            list(o.identifiers) for o in flat
        ]
        assert (rows["m1"].status, rows["m1"].transaction_id) == ("consumed", None)
        assert (rows["m2"].status, rows["m2"].transaction_id) == ("expired", None)
        assert (rows["v1"].status, rows["v1"].transaction_id) == ("aborted", "t5")
        assert rows["w1"].status == "aborted"
        assert rows["z1"].status == "expired"
        assert rows["q1"].status == "released"
        assert rows["n9"].status == "expired"
        assert rows["a7"].identifiers == [
            {"pool_id": "ip"},
            {"pool_id": "vni", "value": "101"},
            {"pool_id": "v6"},
            {"pool_id": "colour"},
        ]

    def test_pending_holds_are_in_the_view(self, log: Log, engine: Engine) -> None:
        events, _ = pool_scenario()
        publish(log, events)
        writer = self.writer(log, engine, batch_size=4)
        writer.catch_up()
        with engine.connect() as conn:
            rows = {r.reservation_id: r for r in conn.execute(select(reservations))}
            pool_rows = {r.pool_id: r for r in conn.execute(select(pools))}
        pending = {
            rid: (r.transaction_id, r.transaction_priority)
            for rid, r in rows.items()
            if r.status == "pending"
        }
        assert pending == {
            "v1": ("t5", 1),
            "m1": ("t7", 2),
            "m2": ("t7", 2),
            "m3": ("t7", 2),
            "m4": ("t7", 2),
        }
        assert rows["v1"].expires_at_ms == 2000  # the deadline
        # a transaction's priority and order are kept while its holds are pending
        assert rows["m1"].transaction_position < rows["m3"].transaction_position
        assert rows["m3"].transaction_position < rows["m2"].transaction_position
        assert (rows["w1"].transaction_id, rows["w1"].transaction_priority) == ("t4", None)
        assert rows["x1"].status == "held" and rows["x1"].transaction_id is None
        assert rows["x1"].expires_at_ms == 31 + rows["x1"].lease_ms
        assert (rows["y1"].status, rows["u1"].status, rows["w1"].status) == ("aborted",) * 3
        assert "s3" not in rows  # an atomic set that did not fit
        state = writer.state
        assert set(pool_rows) == set(state.pools) == {"ip", "vni", "v6", "big6", "colour"}
        for pid, p in state.pools.items():
            row = pool_rows[pid]
            assert (row.taken, float(row.free)) == (p.taken, float(p.free.count))
            assert float(row.size) == float(p.space.size)
        assert pool_rows["v6"].size == 255
        if engine.dialect.name == "postgresql":  # SQLite's integers stop at 2**63 - 1
            assert pool_rows["big6"].size == 2**64 - 1
        assert pool_rows["colour"].definition["members"] == ["red", "green", "blue"]
        assert pool_rows["colour"].definition["excluded"] == ["red"]

    def test_a_large_batch_is_written_row_for_row(self, log: Log, engine: Engine) -> None:
        """Hundreds of rows per table in one commit (inserted many rows per
        statement) read back exactly as the projector decided them."""
        events: list[Event] = [
            *provider("n1", ts=1, VCPU=64, MEMORY_MB=65536),
            *provider("n2", ts=1, VCPU=(16, 2.0), MEMORY_MB=8192),
        ]
        for k in range(450):
            pid = ("n1", "n2")[k % 2]
            events.append(claim(f"r{k}", pid, ts=10 + k, lease_ms=100, VCPU=1, MEMORY_MB=64))
            if k % 3 == 0:
                events.append((consume if k % 2 else release)(f"r{k}", ts=10 + k))
        publish(log, events)
        expected_state = PartitionState(0, 1)
        expected = [o for off, e in enumerate(events) for o in apply(expected_state, off, e)]
        assert {o.kind for o in expected} >= {
            Kind.ACCEPTED,
            Kind.REJECTED,
            Kind.CONSUMED,
            Kind.RELEASED,
            Kind.EXPIRED,
        }
        writer = self.writer(log, engine)
        assert writer.catch_up() == len(events)
        with engine.connect() as conn:
            rows = conn.execute(select(outcomes)).all()
        recorded = {
            (r.offset, r.seq): (r.kind, r.subject, r.clock_ms, r.expires_at_ms, bool(r.reasons))
            for r in rows
        }
        assert len(rows) == len(expected)
        assert recorded == {
            (o.offset, o.seq): (o.kind, o.subject, o.clock_ms, o.expires_at_ms, bool(o.reasons))
            for o in expected
        }
        with engine.connect() as conn:
            statuses = dict(
                conn.execute(select(reservations.c.reservation_id, reservations.c.status)).all()
            )
        assert len(statuses) == sum(1 for o in expected if o.kind == Kind.ACCEPTED)
        assert {rid: statuses[rid] for rid in expected_state.reservations} == {
            rid: "consumed" if r.status == CONSUMED else "held"
            for rid, r in expected_state.reservations.items()
        }
        _assert_same_state(load_state_of(engine), expected_state)

    def _counts(self, engine: Engine) -> dict[str, Any]:
        with engine.connect() as conn:
            return {
                t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in (providers, inventories, reservations, outcomes, partition_offsets)
            }


def load_state_of(engine: Engine) -> PartitionState:
    with engine.connect() as conn:
        return load_state(conn, 0, 1)[0]


def _state_after(events: list[Event]) -> PartitionState:
    state = PartitionState(0, 1)
    for offset, event in enumerate(events):
        apply(state, offset, event)
    return state


def _assert_same_state(a: PartitionState, b: PartitionState) -> None:
    assert a.clock_ms == b.clock_ms
    assert set(a.providers) == set(b.providers)
    for pid, p in a.providers.items():
        q = b.providers[pid]
        assert (p.name, p.state, p.traits, p.aggregates, p.active) == (
            q.name,
            q.state,
            q.traits,
            q.aggregates,
            q.active,
        )
        assert dict(zip(p.layout.classes, p.held, strict=True)) == dict(
            zip(q.layout.classes, q.held, strict=True)
        )
        assert dict(zip(p.layout.classes, p.consumed, strict=True)) == dict(
            zip(q.layout.classes, q.consumed, strict=True)
        )
        assert p.layout.limits == q.layout.limits
        assert p.own.limits == q.own.limits
        assert (p.tag_counts or {}) == (q.tag_counts or {})
        assert (p.group_counts or {}) == (q.group_counts or {})
        mine, yours = p.description, q.description
        for name in DESCRIBED_FIELDS:
            assert getattr(mine, name) == getattr(yours, name), (pid, name)
        metrics, theirs = p.metrics, q.metrics
        assert (metrics.values, metrics.at_ms, metrics.num_io_ops, metrics.build_failures) == (
            theirs.values,
            theirs.at_ms,
            theirs.num_io_ops,
            theirs.build_failures,
        )
    assert set(a.reservations) == set(b.reservations)
    for rid, r in a.reservations.items():
        s = b.reservations[rid]
        assert _reservation(r) == _reservation(s), rid
        assert [(p.provider_id, amounts) for p, amounts in r.items] == [
            (p.provider_id, amounts) for p, amounts in s.items
        ]
    assert a.finished == b.finished
    assert a.aggregates == b.aggregates
    assert _live_expiries(a) == _live_expiries(b)
    assert set(a.pools) == set(b.pools)
    for pid, pool_state in a.pools.items():
        other = b.pools[pid]
        assert pool_state.space == other.space
        assert _intervals(pool_state) == _intervals(other)
    assert {tid: (t.priority, t.reservation_ids) for tid, t in a.transactions.items()} == {
        tid: (t.priority, t.reservation_ids) for tid, t in b.transactions.items()
    }
    assert {
        g: (x.policy, x.max_server_per_host, x.project_id, x.user_id, x.hosts)
        for g, x in a.groups.items()
    } == {
        g: (x.policy, x.max_server_per_host, x.project_id, x.user_id, x.hosts)
        for g, x in b.groups.items()
    }


def _reservation(r: Reservation) -> tuple[Any, ...]:
    return (
        r.status,
        r.expires_at_ms,
        r.fingerprint,
        r.group,
        r.tags,
        r.consumer_id,
        named(r),
        r.transaction,
        r.lease_ms,
        r.membership,
    )


def _intervals(pool_state: PoolState) -> tuple[Any, ...]:
    """The pool's free identifiers as intervals (its whole state)."""
    free = pool_state.free
    return (free.first, free.last, free.count, free.spans())


def _assert_identifiers_match(engine: Engine, state: PartitionState) -> None:
    """The view's identifier rows are exactly those live reservations hold."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                reservation_identifiers.c.pool_id,
                reservation_identifiers.c.value,
                reservation_identifiers.c.reservation_id,
                reservation_identifiers.c.position,
            )
        ).all()
        counts = {r.pool_id: (r.taken, float(r.free)) for r in conn.execute(select(pools))}
    assert sorted(tuple(r) for r in rows) == sorted(
        (pool_id, value, rid, position)
        for rid, r in state.reservations.items()
        for position, (pool_id, value) in enumerate(named(r))
    )
    assert counts == {pid: (p.taken, float(p.free.count)) for pid, p in state.pools.items()}


BATCH_DEPENDENT = {
    "providers": {"shape_offset"},
    "provider_usage": {"updated_offset"},
    "pools": {"updated_offset"},
}
"""Columns that say in which batch a row last changed (the end offset of the
batch): for ``_dump`` to leave out when views written in batches of other
sizes are compared."""


def _dump(
    engine: Engine, leave_out: dict[str, set[str]] | None = None
) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in a stable order (less the columns ``leave_out``
    names, by table)."""
    tables: list[Table] = [
        providers,
        provider_usage,
        inventories,
        reservations,
        reservation_identifiers,
        pools,
        outcomes,
        dead_letters,
        partition_offsets,
    ]
    dump: dict[str, list[tuple[Any, ...]]] = {}
    with engine.connect() as conn:
        for t in tables:
            left = (leave_out or {}).get(t.name, set())
            query = select(*(c for c in t.columns if c.name not in left))
            dump[t.name] = sorted(tuple(repr(v) for v in row) for row in conn.execute(query))
    return dump


def _assert_scenario_covered(log: list[list[Outcome]], more: list[list[Outcome]]) -> None:
    """Guard against a scenario that silently stops reaching the cases it is for."""
    flat = [o for record in log for o in record]
    kinds = {(o.subject, o.kind) for o in flat}
    assert {
        ("a1", Kind.ACCEPTED),
        ("a1", Kind.RELEASED),
        ("a3", Kind.REJECTED),
        ("s3", Kind.REJECTED),
        ("s5", Kind.ACCEPTED),
        ("s6", Kind.REJECTED),
        ("x1", Kind.COMMITTED),
        ("y1", Kind.ABORTED),
        ("z1", Kind.EXPIRED),
        ("w1", Kind.ABORTED),
        ("u1", Kind.ABORTED),
        ("q1", Kind.RELEASED),
        ("s1", Kind.RELEASED),
    } <= kinds
    wounded = [o for o in flat if o.kind == Kind.ABORTED and o.reasons]
    assert {o.subject for o in wounded} == {"w1", "u1"}
    assert all(o.reasons[0].code == Code.WOUNDED for o in wounded)
    taken = {o.subject: o.identifiers for o in flat if o.kind == Kind.ACCEPTED}
    assert taken["a1"] == (("ip", "10.0.0.4"), ("vni", "100"))
    assert taken["a4"] == (("ip", "10.0.0.4"),)  # given back and taken again
    assert taken["a5"] == (("ip", "10.0.0.3"), ("vni", "101"))
    # named identifiers first, then the lowest free, pool by pool
    assert taken["a2"] == (("colour", "green"), ("ip", "10.0.0.2"), ("v6", "fd00::1"))
    assert taken["s2"] == (("big6", "fd00:1::ab:1"), ("v6", "fd00::2"), ("vni", "101"))
    after = [o for record in more for o in record]
    committed = [o.subject for o in after if o.kind == Kind.COMMITTED]
    assert committed == ["m1", "m3", "m2", "m4"]  # not the order they were prepared in
    duplicates = [o.subject for o in after if o.reasons and o.reasons[0].code == Code.DUPLICATE]
    assert duplicates == ["s1", "s2", "a1"]
    assert ("n9", Kind.EXPIRED) in {(o.subject, o.kind) for o in after}


def _live_expiries(state: PartitionState) -> list[tuple[int, str]]:
    """Heap entries that will still expire something (stale ones are skipped,
    and so is a repeated entry once the first has expired the reservation)."""
    return sorted(
        {
            entry
            for entry in state.expiry
            if (r := state.reservations.get(entry[1])) is not None
            and r.status == HELD
            and r.expires_at_ms == entry[0]
        }
    )
