"""The read model's contract, run against every database by short subclasses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from consumers.partition_writer import PartitionWriter
from consumers.topics import DEFAULT_TOPICS
from ledger.embedded import EmbeddedLog
from ledger.log import Append, Log
from projections.state import HELD, PartitionState
from projections.view.engine import make_engine
from projections.view.migrate import upgrade
from projections.view.tables import (
    dead_letters,
    inventories,
    outcomes,
    partition_offsets,
    providers,
    reservations,
)
from projections.view.writer import Batch, StaleBatch, ViewWriter
from schemas.codec import encode_event
from schemas.events import Event
from schemas.outcomes import Outcome
from tests.builders import claim, consume, provider, release, renew, retire, tick

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
    ]


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
        from projections.projector import apply

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

    def _counts(self, engine: Engine) -> dict[str, Any]:
        with engine.connect() as conn:
            return {
                t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in (providers, inventories, reservations, outcomes, partition_offsets)
            }


def _state_after(events: list[Event]) -> PartitionState:
    from projections.projector import apply

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
        assert (p.tag_counts or {}) == (q.tag_counts or {})
        assert (p.group_counts or {}) == (q.group_counts or {})
    assert set(a.reservations) == set(b.reservations)
    for rid, r in a.reservations.items():
        s = b.reservations[rid]
        assert (r.status, r.expires_at_ms, r.fingerprint, r.group, r.tags) == (
            s.status,
            s.expires_at_ms,
            s.fingerprint,
            s.group,
            s.tags,
        )
    assert a.finished == b.finished
    assert _live_expiries(a) == _live_expiries(b)


def _live_expiries(state: PartitionState) -> list[tuple[int, str]]:
    """Heap entries that will still expire something (stale ones are skipped)."""
    return sorted(
        entry
        for entry in state.expiry
        if (r := state.reservations.get(entry[1])) is not None
        and r.status == HELD
        and r.expires_at_ms == entry[0]
    )
