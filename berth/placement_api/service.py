"""What the Placement API does without HTTP: append a Placement event, wait
for its writer's decision, and read the view, which holds every write
answered (read-your-writes). Every method blocks: the app calls them from
worker threads.

When the writer of Placement's partition runs in this process (``berth
serve``), it hands each batch's decisions to the waiting writes as soon as
it decides them (:class:`Handoff`), and a write whose record no one is
deciding yet drives that writer itself; a read first waits for the view to
commit what was decided (:meth:`PlacementService.settle`). Otherwise a
write follows the outcomes topic, then waits for the view's commit, woken
by it (``projections.view.commits``)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from berth.app import App
from berth.client import Decisions, Publisher, PublishError
from berth.placement_api.errors import PlacementError
from berth.placement_api.reads import existing_uuids
from ledger.publisher import wall_clock_ms
from projections.batch import Batch
from projections.view.commits import wait_committed
from schemas.codec import EventDecodeError, validate_event
from schemas.events import (
    PLACEMENT_KEY,
    Event,
    PlacementProviderDeleted,
    PlacementProviderSaved,
)
from schemas.outcomes import Code, Kind, Outcome

log = logging.getLogger(__name__)

DECISION_TIMEOUT_S = 30.0
SETTLE_ALONE_S = 0.5
"""How long a read waits for the round that decided the writes it must
see to commit them, before it runs a round itself (that round failed)."""


class Refused(Exception):
    """The writer refused the write: its reason, for the route to word."""

    def __init__(self, code: Code, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


Told = Callable[[list[tuple[str, list[Outcome]]]], object]
"""Told the decisions of the writes that gave it (:meth:`Handoff.expect`),
event id and outcomes, as the writer decides them: those of one batch at
once, from the deciding thread."""


class _Waiting:
    """One write waiting for its record's outcomes."""

    __slots__ = ("outcomes", "tell", "woken")

    def __init__(self, tell: Told | None) -> None:
        self.outcomes: list[Outcome] | None = None
        self.woken = threading.Event()
        self.tell = tell


class Handoff:
    """The decisions of the writer of one partition that runs in this
    process, handed to the writes waiting for them as soon as it decides
    each batch (:attr:`PartitionWriter.on_decided`), before the batch's
    outcomes are appended and the view commits it: a decision is a
    function of the log up to its record, which is durable before its
    write waits, and a restart decides those records again the same from
    the view. Each write is woken alone, when its own record's batch is
    decided (or, rarely, when a batch had a record that did not decode),
    or told (``tell``, the write pump's: its answers go back to the event
    loop from the deciding thread, which goes on to the batch's fsync and
    commit).

    Reads see every write answered (read-your-writes): :meth:`settle`
    waits until the view has committed every batch decided so far (told by
    :attr:`PartitionWriter.on_commit`, :meth:`committed`). The round that
    decided a batch commits it before it lets go of the writer.

    Given ``drive`` (a round of that writer: :func:`step_all` on it alone),
    a waiting write whose record is durable and that finds no other write
    driving the writer runs the round itself, in its own thread, as the
    leader of a group commit does: every record durable by then is decided
    in it, and the writes it answers need not wait for the process's loop
    to wake, nor for its turn there after the other partitions and the
    scheduler. The round holds the writer's lock, so the loop and a write
    never decide the partition at once; should a round fail, the writes
    stop driving and leave the writer to the loop, which says why."""

    def __init__(self, drive: Callable[[], object] | None = None) -> None:
        self._lock = threading.Lock()
        self._caught_up = threading.Condition(self._lock)
        """Notified as the view commits (for :meth:`settle`)."""
        self._waiting: dict[str, _Waiting] = {}
        """Event id -> the write waiting for its record's outcomes."""
        self._decided = 0
        """The offset after the last batch decided (and handed over)."""
        self._committed = 0
        """The offset after the last batch the view committed."""
        self._drive = drive
        self._driving = False
        """Whether a write is running a round of the writer."""
        self.deletions = 0
        """How many decided batches deleted a Placement provider (see
        :meth:`PlacementService.existing`)."""
        self._saved: set[str] = set()
        """Providers the decided batches saved since the last one that
        deleted a provider (in the view once :meth:`settle` returns)."""

    def expect(self, event_id: str, tell: Told | None = None) -> _Waiting:
        """Keep the outcomes of ``event_id``'s record (before it is
        appended); ``tell`` them too as soon as they are decided."""
        waiting = _Waiting(tell)
        with self._lock:
            self._waiting[event_id] = waiting
        return waiting

    def decided(self, batch: Batch) -> None:
        """The writer decided ``batch``: its decisions for those who wait."""
        deleted = any(isinstance(a.event, PlacementProviderDeleted) for a in batch.applied)
        if deleted:
            self.deletions += 1  # before any write this batch answers is woken
        saved = [
            a.event.uuid
            for a in batch.applied
            if isinstance(a.event, PlacementProviderSaved) and _accepted(a.outcomes)
        ]
        told: dict[int, tuple[Told, list[tuple[str, list[Outcome]]]]] = {}
        with self._lock:
            if deleted:
                self._saved.clear()
            else:
                self._saved.update(saved)
            self._decided = max(self._decided, batch.end)
            if not self._waiting:
                return
            for applied in batch.applied:
                event_id = applied.event.event_id
                waiting = self._waiting.pop(event_id, None)
                if waiting is None:
                    continue
                waiting.outcomes = applied.outcomes
                waiting.woken.set()
                if waiting.tell is not None:
                    tell = waiting.tell
                    told.setdefault(id(tell), (tell, []))[1].append((event_id, applied.outcomes))
            if batch.dead:  # whose record it was is unknown: each looks at its offset
                for waiting in self._waiting.values():
                    waiting.woken.set()
        for tell, decisions in told.values():  # one call for each pump's batch
            try:
                tell(decisions)
            except Exception:  # never into the writer's round: the write's wait answers it
                log.exception("placement-api: telling %d decisions failed", len(decisions))

    def committed(self, batch: Batch) -> None:
        """The view committed ``batch``: the reads waiting for it go on."""
        with self._lock:
            self._committed = max(self._committed, batch.end)
            self._caught_up.notify_all()

    def settle(self, timeout_s: float) -> bool:
        """Until the view holds every batch decided when called (and so
        every write answered); whether it does within ``timeout_s``. The
        round that decided them commits them; should it have failed (the
        writer took them back, reloading the view), a round run here
        decides and commits them again, if the loop has not already."""
        with self._lock:
            target = self._decided
            if self._committed >= target:
                return True
        deadline = time.monotonic() + timeout_s
        if self._caught_up_by(target, min(deadline, time.monotonic() + SETTLE_ALONE_S)):
            return True
        drive = self._drive
        if drive is not None:
            try:
                drive()
            except Exception:
                log.exception("placement-api: a read's round of the writer failed")
        return self._caught_up_by(target, deadline)

    def _caught_up_by(self, target: int, deadline: float) -> bool:
        """Whether the view commits up to ``target`` by ``deadline``."""
        with self._lock:
            while self._committed < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._caught_up.wait(left)
            return True

    def wait(
        self, event_id: str, waiting: _Waiting, offset: int, timeout_s: float
    ) -> list[Outcome] | None:
        """The outcomes of ``event_id``'s record at ``offset`` once its batch
        is decided; None when the writer decided past it without a
        decision (a dead letter) or ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        may_lead = True  # until a round this write ran decided nothing
        try:
            while True:
                with self._lock:
                    if waiting.outcomes is not None or self._decided > offset:
                        return waiting.outcomes
                    leads = may_lead and self._drive is not None and not self._driving
                    self._driving = self._driving or leads
                    waiting.woken.clear()  # another record's dead letter, or a round ended
                left = deadline - time.monotonic()
                if left <= 0:
                    if leads:
                        self._led()
                    return None
                if leads:
                    may_lead = self._lead()
                elif not waiting.woken.wait(left):
                    return None
        finally:
            self.forget(event_id)

    def _lead(self) -> bool:
        """Run a round of the writer for the writes waiting; whether it
        decided any record. The writes still waiting after it are woken:
        one of them leads the next."""
        drive = self._drive
        decided = False
        try:
            if drive is not None:
                decided = bool(drive())
        except Exception:
            log.exception("placement-api: a write's round of the writer failed; left to the loop")
            self._drive = None
        finally:
            self._led()
        return decided

    def _led(self) -> None:
        """The round is over: the writes still waiting look again."""
        with self._lock:
            self._driving = False
            for waiting in self._waiting.values():
                waiting.woken.set()

    def unsaved(self, uuids: list[str]) -> list[str]:
        """Those of ``uuids`` that no batch committed since the last deletion
        of a provider saved (as far as this handoff has seen)."""
        with self._lock:
            return [uuid for uuid in uuids if uuid not in self._saved]

    def forget(self, event_id: str) -> None:
        """``event_id`` waits no more (not appended after all, or timed out)."""
        with self._lock:
            self._waiting.pop(event_id, None)


@dataclass(frozen=True)
class Appended:
    """A write appended, waiting for its writer's decision."""

    event_id: str
    waiting: _Waiting
    partition: int
    offset: int


class PlacementService:
    """Placement's writes and reads on one :class:`App` (its log and view);
    given a :class:`Handoff`, the writer of Placement's partition runs in
    this process and hands it its decisions."""

    def __init__(
        self, app: App, timeout_s: float = DECISION_TIMEOUT_S, handoff: Handoff | None = None
    ) -> None:
        self.app = app
        self.engine = app.engine
        self.topics = app.settings.topics
        self.publisher = Publisher(app.log, self.topics)
        self.partition = self.publisher.partition_of(PLACEMENT_KEY)
        self.timeout_s = timeout_s
        self.handoff = handoff
        self._known: set[str] = set()
        """Providers the view held since the handoff's ``deletions`` was
        :attr:`_known_era`."""
        self._known_era = 0
        self._known_lock = threading.Lock()

    def existing(self, uuids: list[str]) -> set[str]:
        """Which of ``uuids`` are providers, as the view holds them. With a
        handoff (the writer of Placement's partition in this process, the
        only one to change its providers), a provider once found is
        remembered until a batch deletes a provider: a write of allocations
        then reads no table to check the providers it names; nor for a
        provider the writer saved since (:meth:`Handoff.unsaved`). Remembering is
        as good as reading the view a little earlier, which a write racing a
        deletion may do anyway (the writer judges it again), and a deletion
        is forgotten before its caller is answered."""
        handoff = self.handoff
        if handoff is None:
            return existing_uuids(self.engine, uuids)
        with self._known_lock:
            era = handoff.deletions
            if era != self._known_era:
                self._known.clear()
                self._known_era = era
            missing = [uuid for uuid in uuids if uuid not in self._known]
        if missing:
            # created by the writer in this process (as the race's providers
            # are): no read of the view for the first write to each
            missing = handoff.unsaved(missing)
        if not missing:
            return set(uuids)
        self.settle()  # a provider saved by a write answered is in the view
        found = existing_uuids(self.engine, missing)
        with self._known_lock:
            if self._known_era == era == handoff.deletions:  # no deletion since the read
                self._known |= found
        return found | (set(uuids) - set(missing))

    def settle(self) -> None:
        """Before a read: until the view holds every write answered (with a
        handoff; without one, a write is answered only once the view holds
        it). 503 when it does not in time."""
        handoff = self.handoff
        if handoff is not None and not handoff.settle(self.timeout_s):
            raise PlacementError(503, "the view is behind the writes already answered")

    def write(self, fields: Mapping[str, Any]) -> Outcome:
        """Append one Placement event and return the writer's decision once
        the view holds it; :class:`Refused` when the writer refused it."""
        return decision_of(self._outcomes(event_of(fields)))

    def append_many(
        self, events: list[Event], tell: Told | None = None
    ) -> list[Appended | Outcome | Exception]:
        """``events`` (from :func:`event_of`) appended (durable) in one
        append, one fsync for all, for :meth:`decided_many` to wait for
        (the write pump's first half); their decisions are also told to
        ``tell`` (see :class:`Handoff`) as soon as the writer makes them.
        Without a handoff, or should the append be refused, each is
        written alone as :meth:`write` does and its decision (or why it
        has none) is already here, and not told."""
        handoff = self.handoff
        if handoff is None:
            return [self._written(event) for event in events]
        waiting = [handoff.expect(event.event_id, tell) for event in events]
        try:
            placed = self.publisher.publish(events)
        except PublishError:  # whose it is, each alone says
            for event in events:
                handoff.forget(event.event_id)
            return [self._written(event) for event in events]
        except BaseException:
            for event in events:
                handoff.forget(event.event_id)
            raise
        return [
            Appended(event.event_id, waits, partition, offset)
            for event, waits, (partition, offset) in zip(events, waiting, placed, strict=True)
        ]

    def decided_many(
        self, appended: list[Appended | Outcome | Exception]
    ) -> list[Outcome | Exception]:
        """Each write of :meth:`append_many`'s decision, once its writer
        decided it (a waiting write leads the writer's round, see
        :class:`Handoff`), or why it has none (:class:`Refused`,
        :class:`PlacementError`): the write pump's second half."""
        found: list[Outcome | Exception] = []
        for one in appended:
            if not isinstance(one, Appended):
                found.append(one)
                continue
            assert self.handoff is not None
            outcomes = self.handoff.wait(one.event_id, one.waiting, one.offset, self.timeout_s)
            try:
                found.append(answer_of(_decided(outcomes, one.partition, one.offset)))
            except PlacementError as failure:
                found.append(failure)
        return found

    def _written(self, event: Event) -> Outcome | Exception:
        try:
            return decision_of(self._outcomes(event))
        except (Refused, PlacementError) as failure:
            return failure

    def _outcomes(self, event: Event) -> list[Outcome]:
        return self._decided_from_log(event) if self.handoff is None else self._handed(event)

    def _append(self, event: Event) -> tuple[int, int]:
        try:
            [(partition, offset)] = self.publisher.publish([event])
        except PublishError as error:
            raise PlacementError(400, str(error)) from None
        return partition, offset

    def _handed(self, event: Event) -> list[Outcome]:
        """The record's outcomes, handed over by the writer in this process
        once its batch is decided, and in the view."""
        assert self.handoff is not None
        waiting = self.handoff.expect(event.event_id)
        try:
            partition, offset = self._append(event)
        except BaseException:
            self.handoff.forget(event.event_id)
            raise
        outcomes = self.handoff.wait(event.event_id, waiting, offset, self.timeout_s)
        # a handler may read the view after its write (a provider created
        # is answered as the view holds it): not before it holds the write
        self.settle()
        return _decided(outcomes, partition, offset)

    def _decided_from_log(self, event: Event) -> list[Outcome]:
        """The record's outcomes from the outcomes topic, once the view has
        committed them too (a writer in another process)."""
        decisions = Decisions(self.app.log, self.topics)  # before the append: see Decisions
        partition, offset = self._append(event)
        pending = decisions.wait([event.event_id], self.timeout_s, partitions={partition})
        if pending:
            raise PlacementError(
                503, f"the write was appended ({partition}, {offset}) but not decided yet"
            )
        self._wait_view(partition, offset)
        return decisions.found[event.event_id]

    def _wait_view(self, partition: int, offset: int) -> None:
        """Until the view has committed the record at ``offset`` (an outcome
        is published before its batch commits), woken by the commit."""
        if not wait_committed(self.engine, partition, offset, self.timeout_s):
            raise PlacementError(503, "the write was decided but the view is behind")


def event_of(fields: Mapping[str, Any]) -> Event:
    """The Placement event a write of ``fields`` appends, with a new id and
    the edge's clock; 400 when it does not validate."""
    data = {
        **fields,
        "event_id": f"placement-{random_uuid()}",
        "ts_ms": wall_clock_ms(),
        "partition_key": PLACEMENT_KEY,
    }
    try:
        return validate_event(data)
    except EventDecodeError as error:
        raise PlacementError(400, f"JSON does not validate: {error}") from None


def random_uuid() -> str:
    """A random (version 4) UUID's text, as ``str(uuid.uuid4())`` but made
    from 16 random bytes directly: uuid4 and its text took 5 us, a write
    makes two (its request id and its event's id)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122's variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def decision_of(outcomes: list[Outcome]) -> Outcome:
    """The writer's decision on a write among its record's outcomes (an
    expiry the record's clock caused comes first); :class:`Refused` when
    it refused it."""
    own = [o for o in outcomes if o.subject and o.kind != Kind.EXPIRED]
    decision = own[-1]
    if decision.kind == Kind.REJECTED:
        reason = decision.reasons[0]
        raise Refused(reason.code, reason.detail)
    return decision


def answer_of(outcomes: list[Outcome]) -> Outcome | Exception:
    """The writer's decision on a write among its record's outcomes, or
    :class:`Refused` (as :func:`decision_of`, not raised)."""
    try:
        return decision_of(outcomes)
    except Refused as refused:
        return refused


def _accepted(outcomes: list[Outcome]) -> bool:
    """Whether the writer applied the write these are its record's outcomes of."""
    own = [o for o in outcomes if o.subject and o.kind != Kind.EXPIRED]
    return bool(own) and own[-1].kind != Kind.REJECTED


def _decided(outcomes: list[Outcome] | None, partition: int, offset: int) -> list[Outcome]:
    """A handed-over record's outcomes; 503 when it has none in time."""
    if not outcomes:
        raise PlacementError(
            503, f"the write was appended ({partition}, {offset}) but not decided yet"
        )
    return outcomes
