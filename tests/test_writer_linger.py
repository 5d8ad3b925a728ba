"""A writer's lingering batch of metrics reports (``linger_s``): reports
that arrive alone are decided, but published and committed with the next
records of their partition or once due, never before; what is decided is
the same as without lingering, and nothing is published twice."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import PartitionWriter, catch_up_all, lingering_until, step_all
from ledger.log import Append
from projections.view.loader import committed_offsets
from projections.view.tables import inventories, providers
from schemas.events import Event
from schemas.outcomes import Kind, Outcome
from tests.builders import claim, report
from tests.test_writer_rounds import NOW_MS, PARTITIONS, one_provider_a_partition


def _publish(app: App, events: Sequence[Event]) -> None:
    Publisher(app.log, clock_ms=lambda: NOW_MS).publish(list(events))


def _counting_appends(monkeypatch: pytest.MonkeyPatch, app: App) -> Counter[str]:
    """Count the writers' appends by topic (not the events the test publishes)."""
    appends: Counter[str] = Counter()
    real = app.log.append

    def append(topic: str, records: Sequence[Append]) -> list[int]:
        if topic != app.settings.topics.events:
            appends[topic] += 1
        return real(topic, records)

    monkeypatch.setattr(app.log, "append", append)
    return appends


def _published(app: App, partition: int) -> list[tuple[str, str]]:
    records = app.log.read(app.settings.topics.outcomes, partition, 0, 1000)
    return [(o.subject, o.kind) for r in records if (o := Outcome.from_json(r.value))]


def _view_at(app: App) -> dict[int, int]:
    with app.engine.connect() as conn:
        return committed_offsets(conn)


def _log_ends(app: App) -> dict[int, int]:
    topic = app.settings.topics.events
    return {p: app.log.end_offset(topic, p) for p in range(PARTITIONS)}


def test_reports_alone_wait_for_their_partitions_next_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        pids = one_provider_a_partition(app)
        writers = app.writers(linger_s=3600)
        before = _view_at(app)
        published = [len(_published(app, p)) for p in range(PARTITIONS)]
        appends = _counting_appends(monkeypatch, app)
        _publish(app, [report(pid, {"cpu.percent": 1.0}, ts=2) for pid in pids])
        assert step_all(writers)  # decided, not published nor committed
        assert not step_all(writers)
        assert appends == Counter()
        assert _view_at(app) == before
        assert all(w.lingering is not None and w.held for w in writers)
        # their loop waits for records past the lingering ones, not for those again
        events = app.settings.topics.events
        assert [w.watches() for w in writers] == [
            {events: {p: end}} for p, end in _log_ends(app).items()
        ]

        # a claim in partition 0 takes its report out with it; partition 1's
        # second report joins the first, still lingering
        _publish(
            app, [claim("r0", pids[0], ts=3, VCPU=3), report(pids[1], {"cpu.percent": 2.0}, ts=3)]
        )
        assert step_all(writers)
        assert appends == Counter({app.settings.topics.outcomes: 1})
        assert _published(app, 0)[published[0] :] == [(pids[0], Kind.APPLIED), ("r0", "accepted")]
        assert _view_at(app) == {**before, 0: _log_ends(app)[0]}
        assert writers[0].lingering is None and writers[1].lingering is not None
        pending = writers[1].pending
        assert pending is not None and pending.end - pending.start == 2

        # a catch-up leaves nothing lingering, even reports it decides: every report out once
        _publish(app, [report(pids[2], {"cpu.percent": 3.0}, ts=4)])
        assert catch_up_all(writers) == 1
        assert _view_at(app) == _log_ends(app)
        assert all(w.pending is None and w.lingering is None for w in writers)
        assert _published(app, 1)[published[1] :] == [(pids[1], Kind.APPLIED)] * 2
        assert _published(app, 2)[published[2] :] == [(pids[2], Kind.APPLIED)] * 2
        assert _published(app, 3)[published[3] :] == [(pids[3], Kind.APPLIED)]
        with app.engine.connect() as conn:
            assert conn.execute(select(inventories.c.held)).scalars().all().count(3) == 1


def test_a_lingering_batch_goes_out_once_due_with_no_more_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    linger_s = 0.2
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        pids = one_provider_a_partition(app)
        writers = app.writers(linger_s=linger_s)
        appends = _counting_appends(monkeypatch, app)
        _publish(app, [report(pid, {"cpu.percent": 1.0}, ts=2) for pid in pids])
        started = time.monotonic()
        assert step_all(writers)
        due = lingering_until(writers)
        assert due is not None and started < due <= time.monotonic() + linger_s
        deadline = started + 10
        while _view_at(app) != _log_ends(app):
            assert time.monotonic() < deadline, "the lingering batches never went out"
            before_round = time.monotonic()
            assert not step_all(writers)  # no records: only what is due goes out
            if before_round < due - 0.05:  # a round well before the time changes nothing
                assert appends == Counter()
            time.sleep(0.01)
        assert time.monotonic() >= due
        # every partition's lingered the same time: one append for them all
        assert appends == Counter({app.settings.topics.outcomes: 1})
        assert lingering_until(writers) is None


def _run(directory: Path, linger_s: float) -> tuple[list[list[Outcome]], list[tuple[object, ...]]]:
    """Reports and claims arriving in turns, a round after each, with the
    writers lingering or not: every partition's outcomes, and the view's
    providers and inventories."""
    with App(Settings(data_dir=directory, partitions=PARTITIONS)) as app:
        pids = one_provider_a_partition(app)
        writers: list[PartitionWriter] = app.writers(linger_s=linger_s)
        for turn in range(6):
            events: list[Event] = [report(pid, {"cpu.percent": turn}, ts=10 + turn) for pid in pids]
            if turn % 3 == 2:
                events.append(claim(f"r{turn}", pids[turn % PARTITIONS], ts=10 + turn, VCPU=1))
            _publish(app, events)
            step_all(writers)
        catch_up_all(writers)
        outcomes = [  # (the builders number events across runs: not their ids)
            [
                Outcome.from_json(r.value)._replace(event_id="")
                for r in app.log.read(app.settings.topics.outcomes, p, 0, 1000)
            ]
            for p in range(PARTITIONS)
        ]
        with app.engine.connect() as conn:
            rows = [
                *conn.execute(select(providers).order_by(providers.c.provider_id)).all(),
                *conn.execute(select(inventories).order_by(inventories.c.provider_id)).all(),
            ]
    # without the offsets of the batches that wrote a row: a batch's end
    # differs with how the records were batched (as in a replay)
    return outcomes, [
        tuple((k, v) for k, v in row._mapping.items() if not k.endswith("offset")) for row in rows
    ]


def test_lingering_decides_and_publishes_what_rounds_without_it_do(tmp_path: Path) -> None:
    lingering = _run(tmp_path / "lingering", 3600)
    plain = _run(tmp_path / "plain", 0)
    assert lingering == plain
    assert sum(len(p) for p in plain[0]) > 6 * PARTITIONS
