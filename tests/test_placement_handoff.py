"""The writer's handoff of decisions to the Placement API's waiting writes
(berth.placement_api.service.Handoff): each write gets its own record's
outcomes, whichever thread commits them and whenever; a record the writer
commits past without a decision answers at once, not at the timeout."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from berth.placement_api.service import Handoff
from projections.batch import Applied, Batch, DeadLetter
from schemas.codec import validate_event
from schemas.events import PLACEMENT_KEY
from schemas.outcomes import Kind, Outcome


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


def test_each_write_gets_its_own_outcomes_from_the_committing_thread() -> None:
    handoff = Handoff()
    ids = [f"e{n}" for n in range(8)]
    waiting = {event_id: handoff.expect(event_id) for event_id in ids}
    with ThreadPoolExecutor(len(ids)) as pool:
        futures = {
            event_id: pool.submit(handoff.wait, event_id, waiting[event_id], n, 30.0)
            for n, event_id in enumerate(ids)
        }
        # committed in two batches, the second before the first's waiters ran
        handoff.committed(Batch(0, 0, 3, [_applied(n, ids[n]) for n in range(3)]))
        handoff.committed(Batch(0, 3, 8, [_applied(n, ids[n]) for n in range(3, 8)]))
        for n, event_id in enumerate(ids):
            [outcome] = futures[event_id].result(timeout=30) or []
            assert (outcome.event_id, outcome.offset) == (event_id, n)


def test_a_batch_committed_before_the_wait_is_still_handed_over() -> None:
    handoff = Handoff()
    waiting = handoff.expect("early")
    handoff.committed(Batch(0, 0, 1, [_applied(0, "early")]))
    [outcome] = handoff.wait("early", waiting, 0, 30.0) or []
    assert outcome.event_id == "early"


def test_a_record_committed_past_without_a_decision_answers_at_once() -> None:
    handoff = Handoff()
    lost, other = handoff.expect("lost"), handoff.expect("other")
    answer: list[object] = []
    waiter = threading.Thread(target=lambda: answer.append(handoff.wait("lost", lost, 1, 30.0)))
    start = time.monotonic()
    waiter.start()
    # offset 0 is another's record, offset 1 did not decode (a dead letter)
    handoff.committed(Batch(0, 0, 2, [_applied(0, "x")], [DeadLetter(1, "bad", b"")]))
    waiter.join(timeout=30)
    assert answer == [None]
    assert time.monotonic() - start < 10
    # a write whose record is later is woken by the dead letter, and waits on
    handoff.committed(Batch(0, 2, 3, [_applied(2, "other")]))
    [outcome] = handoff.wait("other", other, 2, 30.0) or []
    assert outcome.offset == 2


def test_a_write_never_committed_times_out() -> None:
    handoff = Handoff()
    waiting = handoff.expect("never")
    assert handoff.wait("never", waiting, 5, 0.05) is None
