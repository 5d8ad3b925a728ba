"""The writer's handoff of decisions to the Placement API's waiting writes
(berth.placement_api.service.Handoff): each write gets its own record's
outcomes as soon as they are decided, whichever thread decides them and
whenever, before the view commits them; a record the writer decides past
without a decision answers at once, not at the timeout; given a round of
the writer to run, the waiting writes run it themselves, one at a time,
and leave it to the loop once it fails; a read waits until the view holds
every batch decided, and runs a round itself when the one that decided
them failed; the providers saved since the last deletion of one are known
without reading the view."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from berth.placement_api.service import Handoff
from projections.batch import Applied, Batch, DeadLetter
from schemas.codec import validate_event
from schemas.events import PLACEMENT_KEY
from schemas.outcomes import Kind, Outcome
from tests.polling import wait_for


def _applied(offset: int, event_id: str) -> Applied:
    event = validate_event(
        {
            "type": "placement_name_defined",
            "event_id": event_id,
            "ts_ms": 1,
            "partition_key": PLACEMENT_KEY,
            "kind": "trait",
            "name": f"CUSTOM_T{offset}",
        }
    )
    outcome = Outcome(0, offset, 0, Kind.APPLIED, event_id, f"CUSTOM_T{offset}", 1)
    return Applied(offset, event, [outcome])


def test_each_write_gets_its_own_outcomes_from_the_deciding_thread() -> None:
    handoff = Handoff()
    ids = [f"e{n}" for n in range(8)]
    waiting = {event_id: handoff.expect(event_id) for event_id in ids}
    with ThreadPoolExecutor(len(ids)) as pool:
        futures = {
            event_id: pool.submit(handoff.wait, event_id, waiting[event_id], n, 30.0)
            for n, event_id in enumerate(ids)
        }
        # decided in two batches, the second before the first's waiters ran
        handoff.decided(Batch(0, 0, 3, [_applied(n, ids[n]) for n in range(3)]))
        handoff.decided(Batch(0, 3, 8, [_applied(n, ids[n]) for n in range(3, 8)]))
        for n, event_id in enumerate(ids):
            [outcome] = futures[event_id].result(timeout=30) or []
            assert (outcome.event_id, outcome.offset) == (event_id, n)


def test_a_batch_decided_before_the_wait_is_still_handed_over() -> None:
    handoff = Handoff()
    waiting = handoff.expect("early")
    handoff.decided(Batch(0, 0, 1, [_applied(0, "early")]))
    [outcome] = handoff.wait("early", waiting, 0, 30.0) or []
    assert outcome.event_id == "early"


def test_a_record_decided_past_without_a_decision_answers_at_once() -> None:
    handoff = Handoff()
    lost, other = handoff.expect("lost"), handoff.expect("other")
    answer: list[object] = []
    waiter = threading.Thread(target=lambda: answer.append(handoff.wait("lost", lost, 1, 30.0)))
    start = time.monotonic()
    waiter.start()
    # offset 0 is another's record, offset 1 did not decode (a dead letter)
    handoff.decided(Batch(0, 0, 2, [_applied(0, "x")], [DeadLetter(1, "bad", b"")]))
    waiter.join(timeout=30)
    assert answer == [None]
    assert time.monotonic() - start < 10
    # a write whose record is later is woken by the dead letter, and waits on
    handoff.decided(Batch(0, 2, 3, [_applied(2, "other")]))
    [outcome] = handoff.wait("other", other, 2, 30.0) or []
    assert outcome.offset == 2


def test_a_write_never_decided_times_out() -> None:
    handoff = Handoff()
    waiting = handoff.expect("never")
    assert handoff.wait("never", waiting, 5, 0.05) is None


class _Writer:
    """A writer's rounds as a write drives them: each decides the records
    appended since the last, as one batch, and tells who ran it."""

    def __init__(self, handoff: Handoff) -> None:
        self.handoff = handoff
        self.appended: list[str] = []
        self.decided = 0
        self.rounds: list[str] = []
        self.inside = 0
        self.overlapped = False
        self.lock = threading.Lock()

    def append(self, event_id: str) -> int:
        with self.lock:
            self.appended.append(event_id)
            return len(self.appended) - 1

    def round(self) -> bool:
        with self.lock:
            self.inside += 1
            self.overlapped = self.overlapped or self.inside > 1
            start, ids = self.decided, self.appended[self.decided :]
            self.decided = len(self.appended)
        self.rounds.append(threading.current_thread().name)
        time.sleep(0.001)  # a round takes a while: the other writes queue meanwhile
        if ids:
            applied = [_applied(start + n, event_id) for n, event_id in enumerate(ids)]
            self.handoff.decided(Batch(0, start, start + len(ids), applied))
        with self.lock:
            self.inside -= 1
        return bool(ids)


def test_waiting_writes_drive_the_writer_one_round_at_a_time() -> None:
    writer = _Writer(Handoff())
    handoff = writer.handoff = Handoff(writer.round)
    ids = [f"e{n}" for n in range(40)]

    def write(event_id: str) -> int:
        waiting = handoff.expect(event_id)
        offset = writer.append(event_id)
        [outcome] = handoff.wait(event_id, waiting, offset, 30.0) or []
        assert outcome.event_id == event_id
        return outcome.offset

    with ThreadPoolExecutor(8, thread_name_prefix="write") as pool:
        offsets = list(pool.map(write, ids))
    assert sorted(offsets) == list(range(len(ids)))
    assert not writer.overlapped  # never two rounds at once
    assert writer.rounds and all(name.startswith("write") for name in writer.rounds)
    assert len(writer.rounds) < len(ids)  # a round decides the writes queued behind it


def test_a_round_that_fails_leaves_the_writer_to_the_loop() -> None:
    rounds: list[int] = []

    def failing() -> bool:
        rounds.append(1)
        raise RuntimeError("the view is gone")

    handoff = Handoff(failing)
    waiting = handoff.expect("e0")
    answer: list[list[Outcome] | None] = []
    waiter = threading.Thread(target=lambda: answer.append(handoff.wait("e0", waiting, 0, 30.0)))
    waiter.start()
    wait_for(lambda: bool(rounds), "the waiting write's round", timeout_s=30)
    # the loop's round decides it; the write does not try again
    handoff.decided(Batch(0, 0, 1, [_applied(0, "e0")]))
    waiter.join(timeout=30)
    [found] = answer
    assert [outcome.event_id for outcome in found or []] == ["e0"]
    assert rounds == [1]


def _provider(offset: int, kind: str, uuid: str, refused: bool = False) -> Applied:
    event = validate_event(
        {
            "type": f"placement_provider_{kind}",
            "event_id": f"p{offset}",
            "ts_ms": 1,
            "partition_key": PLACEMENT_KEY,
            "uuid": uuid,
            **({"name": uuid} if kind == "saved" else {}),
        }
    )
    decided = Kind.REJECTED if refused else Kind.APPLIED
    return Applied(offset, event, [Outcome(0, offset, 0, decided, f"p{offset}", uuid, 1)])


def test_the_providers_saved_since_the_last_deletion_are_known_without_a_read() -> None:
    handoff = Handoff()
    a, b, c = (f"{n}" * 8 + "-0000-4000-8000-" + f"{n}" * 12 for n in (1, 2, 3))
    handoff.decided(Batch(0, 0, 2, [_provider(0, "saved", a), _provider(1, "saved", b, True)]))
    assert handoff.unsaved([a, b, c]) == [b, c]  # b was refused, c never saved
    handoff.decided(Batch(0, 2, 4, [_provider(2, "saved", c), _provider(3, "deleted", a)]))
    assert handoff.unsaved([a, b, c]) == [a, b, c]  # a deletion forgets them all
    assert handoff.deletions == 1
    handoff.decided(Batch(0, 4, 5, [_provider(4, "saved", c)]))
    assert handoff.unsaved([a, b, c]) == [a, b]


def test_a_read_waits_for_the_view_to_commit_every_write_answered() -> None:
    handoff = Handoff()
    assert handoff.settle(0.01)  # nothing decided: nothing to wait for
    waiting = handoff.expect("e0")
    batch = Batch(0, 0, 1, [_applied(0, "e0")])
    handoff.decided(batch)
    [outcome] = handoff.wait("e0", waiting, 0, 30.0) or []  # answered before the commit
    assert outcome.event_id == "e0"
    assert not handoff.settle(0.05)  # no one commits it: the read does not go on
    settled: list[bool] = []
    reader = threading.Thread(target=lambda: settled.append(handoff.settle(30.0)))
    reader.start()
    reader.join(timeout=0.05)
    assert reader.is_alive() and settled == []  # still waiting
    handoff.committed(batch)
    reader.join(timeout=30)
    assert settled == [True]


def test_a_read_runs_a_round_when_the_one_that_decided_failed_to_commit() -> None:
    # the round failed after deciding and the writer reloaded the view:
    # the read's own round decides the record again (the same) and commits it
    batch = Batch(0, 0, 1, [_applied(0, "e0")])
    rounds: list[int] = []

    def drive() -> bool:
        rounds.append(1)
        handoff.decided(batch)
        handoff.committed(batch)
        return True

    handoff = Handoff(drive)
    handoff.decided(batch)
    start = time.monotonic()
    assert handoff.settle(30.0)
    assert rounds == [1]
    assert time.monotonic() - start < 10
    assert handoff.settle(30.0)  # in the view: no second round
    assert rounds == [1]


def test_a_write_is_told_its_decision_by_the_deciding_thread() -> None:
    handoff = Handoff()
    told: list[tuple[str, list[tuple[str, int]]]] = []

    def tell(decisions: list[tuple[str, list[Outcome]]]) -> None:
        name = threading.current_thread().name
        told.append((name, [(event_id, o[0].offset) for event_id, o in decisions]))

    for event_id in ("a", "b"):
        handoff.expect(event_id, tell)
    handoff.expect("c")  # not told: it waits
    decider = threading.Thread(
        target=handoff.decided,
        args=(Batch(0, 0, 3, [_applied(0, "a"), _applied(1, "c"), _applied(2, "b")]),),
        name="decider",
    )
    decider.start()
    decider.join(timeout=30)
    assert told == [("decider", [("a", 0), ("b", 2)])]  # one call for the batch
