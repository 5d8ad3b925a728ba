"""The reaper against the embedded log and the real partition writers.

Time is a controllable clock where the test asserts a bound, so every round is
a step the test takes; the threaded tests poll with a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import PartitionWriter
from consumers.reaper import Reaper
from ledger.partitioner import partition_for
from schemas.events import Event
from schemas.outcomes import Kind, Outcome, Reason
from tests.builders import claim, consume, provider
from tests.polling import wait_for

PARTITIONS = 4
T0 = 1_700_000_000_123
"""The scenarios' start; deliberately not on a round number, so no deadline
falls on a tick."""
INTERVAL_MS = 1_000


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def lagging(self, lag_ms: int) -> Callable[[], int]:
        """This clock as seen by a host whose clock is ``lag_ms`` behind."""
        return lambda: self.now_ms - lag_ms


Decision = tuple[str, str, tuple[Reason, ...], int | None]


@pytest.fixture()
def app(tmp_path: Path) -> Iterator[App]:
    with App(Settings(data_dir=tmp_path, partitions=PARTITIONS)) as app:
        yield app


def provider_in(partition: int, prefix: str = "n") -> str:
    """A provider id whose key lands in ``partition``."""
    return next(
        f"{prefix}{k}"
        for k in range(1000)
        if partition_for(f"{prefix}{k}".encode(), PARTITIONS) == partition
    )


def drain(writers: Sequence[PartitionWriter]) -> list[Outcome]:
    """Everything the writers decide up to the end of their partitions."""
    outcomes: list[Outcome] = []
    for writer in writers:
        while (batch := writer.step()) is not None:
            outcomes += [o for applied in batch.applied for o in applied.outcomes]
    return outcomes


def of_kind(outcomes: Sequence[Outcome], kind: str) -> list[Outcome]:
    return [o for o in outcomes if o.kind == kind]


def test_a_hold_on_a_quiet_partition_expires_within_one_interval_of_its_deadline(
    app: App,
) -> None:
    clock = Clock(T0)
    publisher = Publisher(app.log, app.settings.topics, clock_ms=clock)
    writers = app.writers()
    node = provider_in(2)
    publisher.publish([*provider(node, VCPU=4, ts=T0), claim("r1", node, ts=T0, VCPU=2)])
    accepted = of_kind(drain(writers), Kind.ACCEPTED)
    deadline = accepted[0].expires_at_ms
    assert deadline is not None and deadline > T0

    reaper = Reaper(publisher, interval_s=INTERVAL_MS / 1000)
    expired: list[Outcome] = []
    while not expired:
        assert clock.now_ms <= deadline + INTERVAL_MS, "the reaper left the hold behind"
        clock.now_ms += INTERVAL_MS  # one interval passes between rounds
        reaper.step()
        outcomes = drain(writers)
        expired = of_kind(outcomes, Kind.EXPIRED)
        # nothing but expiry: a tick decides nothing else
        assert outcomes == expired
        if not expired:
            assert clock.now_ms <= deadline, "past its deadline on a tick, yet still held"
    [outcome] = expired
    assert (outcome.subject, outcome.expires_at_ms) == ("r1", deadline)
    assert deadline < outcome.clock_ms <= deadline + INTERVAL_MS
    assert outcome.partition == 2
    assert reaper.rounds == (outcome.clock_ms - T0) // INTERVAL_MS


def scenario(
    app: App, lags_ms: Sequence[int], order: Sequence[int]
) -> tuple[list[Decision], list[int]]:
    """Holds in two partitions, reapers with the given clock lags ticking each
    round in ``order``, a claim that needs an expired hold's capacity. The
    decisions (without the clocks and offsets that extra ticks shift) and the
    partitions' final clocks."""
    clock = Clock(T0)
    publisher = Publisher(app.log, app.settings.topics, clock_ms=clock)
    reapers = [
        Reaper(
            Publisher(app.log, app.settings.topics, clock_ms=clock.lagging(lag)),
            interval_s=INTERVAL_MS / 1000,
        )
        for lag in lags_ms
    ]
    writers = app.writers()
    a, b = provider_in(1, "a"), provider_in(3, "b")
    setup: list[Event] = [
        *provider(a, VCPU=4, ts=T0),
        *provider(b, VCPU=4, ts=T0),
        claim("r1", a, ts=T0, lease_ms=2_500, VCPU=4),
        claim("r2", b, ts=T0, lease_ms=4_200, VCPU=2),
        claim("r3", b, ts=T0, lease_ms=1_500, VCPU=2),
    ]
    publisher.publish(setup)
    decisions = drain(writers)
    for round_ in range(1, 7):
        clock.now_ms = T0 + round_ * INTERVAL_MS
        for k in order:
            reapers[k].step()
        if round_ == 1:
            publisher.publish([consume("r3", ts=clock.now_ms)])
        if round_ == 3:  # r1 is past its deadline: its capacity is free again
            publisher.publish([claim("r4", a, ts=clock.now_ms, lease_ms=60_000, VCPU=4)])
        decisions += drain(writers)
    brief = [(o.kind, o.subject, o.reasons, o.expires_at_ms) for o in decisions]
    return brief, [writer.state.clock_ms for writer in writers]


@pytest.mark.parametrize(
    ("lags_ms", "order"),
    [((0, 0), (0, 1)), ((0, 700), (1, 0)), ((0, 700), (0, 1)), ((0, 2_000), (1, 0))],
    ids=["same-clock", "lagging-first", "lagging-second", "far-behind"],
)
def test_several_reapers_decide_what_one_reaper_decides(
    tmp_path: Path, lags_ms: Sequence[int], order: Sequence[int]
) -> None:
    with App(Settings(data_dir=tmp_path / "one", partitions=PARTITIONS)) as alone:
        expected, clocks = scenario(alone, [0], [0])
    reservations = [(kind, rid) for kind, rid, _, _ in expected if kind != Kind.APPLIED]
    assert reservations == [
        (Kind.ACCEPTED, "r1"),
        (Kind.ACCEPTED, "r2"),
        (Kind.ACCEPTED, "r3"),
        (Kind.CONSUMED, "r3"),
        (Kind.EXPIRED, "r1"),
        (Kind.ACCEPTED, "r4"),
        (Kind.EXPIRED, "r2"),
    ]
    with App(Settings(data_dir=tmp_path / "many", partitions=PARTITIONS)) as crowd:
        assert scenario(crowd, lags_ms, order) == (expected, clocks)


def test_reapers_in_threads_expire_a_quiet_hold_once(app: App) -> None:
    publisher = Publisher(app.log, app.settings.topics)
    writers = app.writers()
    node = provider_in(0)
    now = publisher.clock_ms()
    publisher.publish(
        [*provider(node, VCPU=1, ts=now), claim("r1", node, ts=now, lease_ms=200, VCPU=1)]
    )
    stop = threading.Event()
    reapers = [Reaper(Publisher(app.log, app.settings.topics), interval_s=0.02) for _ in range(2)]
    threads = [threading.Thread(target=r.run, args=(stop,)) for r in reapers]
    for thread in threads:
        thread.start()
    seen: list[Outcome] = []

    def expired() -> bool:
        seen.extend(drain(writers))
        return bool(of_kind(seen, Kind.EXPIRED))

    try:
        wait_for(expired, "the hold to expire")
        # both reapers keep ticking after it: a few more rounds each
        rounds = [r.rounds for r in reapers]
        wait_for(
            lambda: all(r.rounds > n + 2 for r, n in zip(reapers, rounds, strict=True)),
            "more rounds",
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads)
    seen += drain(writers)
    assert [(o.kind, o.subject) for o in seen] == [
        (Kind.APPLIED, node),
        (Kind.APPLIED, node),
        (Kind.ACCEPTED, "r1"),
        (Kind.EXPIRED, "r1"),
    ]
    ticks = sum(app.log.end_offset(app.settings.topics.events, p) for p in range(PARTITIONS))
    assert ticks - 3 == PARTITIONS * sum(r.rounds for r in reapers)


def test_a_failed_round_is_logged_and_the_next_one_tried(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    class Flaky(Publisher):
        failures = 1

        def tick(self, partitions: Sequence[int] | None = None) -> None:
            if self.failures:
                self.failures -= 1
                raise OSError("broker away")
            super().tick(partitions)

    reaper = Reaper(Flaky(app.log, app.settings.topics), interval_s=0.001)
    reaper.run(threading.Event(), rounds=3)
    assert reaper.rounds == 2
    assert "a round of ticks failed" in caplog.text
    assert all(app.log.end_offset(app.settings.topics.events, p) == 2 for p in range(PARTITIONS))


def test_the_interval_must_be_positive(app: App) -> None:
    with pytest.raises(ValueError, match="positive"):
        Reaper(Publisher(app.log, app.settings.topics), interval_s=0)
