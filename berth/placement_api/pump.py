"""Writes from the server's event loop, appended and decided in batches by
one thread of their own.

A write handed to a worker thread each costs that thread's wake-up, its
own append (an fsync, when no other write's shares it) and a wake-up for
its answer; on a machine busier than its cores, a thread woken while
another holds the GIL often waits out a whole time slice before it runs.
The pump instead takes every write that arrived while it was busy, appends
them in one append (one fsync) and lets their writer decide them in one
round. The thread that decides them hands all their answers back to the
loop with one wake-up as soon as they are decided, then appends their
outcomes (one fsync) and commits the view (one transaction) while the
answers go out; a read waits for that commit
(:meth:`PlacementService.settle`). Appending and deciding are two threads,
so that the next batch's records are made durable while their writer
decides the batch before (two topics, two group commits).

The loop hands the pump the writes its requests began in one turn at the
end of that turn, with one wake-up of the appending thread: a wake-up for
each write took a seventh of the loop's time, and woke the thread to
append one write while the others were still being begun."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Mapping
from typing import Any

from berth.placement_api.service import Appended, PlacementService, answer_of, event_of
from schemas.events import Event
from schemas.outcomes import Outcome

log = logging.getLogger(__name__)

_Waiting = tuple[Event, "asyncio.Future[Outcome]"]
_Appended = tuple["_Told", list[Appended | Outcome | Exception]]


class WritePump:
    """Placement writes from one event loop, written in batches by two
    threads: :meth:`PlacementService.append_many` and
    :meth:`~PlacementService.decided_many`."""

    def __init__(self, service: PlacementService) -> None:
        self.service = service
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._queue: list[_Waiting] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        self._appended: queue.SimpleQueue[_Appended | None] = queue.SimpleQueue()
        """Batches appended, for the deciding thread."""
        self._stopping = False
        self._begun: list[_Waiting] = []
        """Writes begun in the loop's current turn (touched by the loop only)."""

    async def write(self, fields: Mapping[str, Any]) -> Outcome:
        """What :meth:`PlacementService.write` answers, without blocking the
        loop: the decision, or :class:`Refused` / :class:`PlacementError`."""
        event = event_of(fields)  # a 400 before anything is queued
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Outcome] = loop.create_future()
        self._begun.append((event, answer))
        if len(self._begun) == 1:
            # after the other requests of this turn have begun theirs
            loop.call_soon(self._hand_over, loop)
        return await answer

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop: the writes begun in its last turn, to the appending thread."""
        begun, self._begun = self._begun, []
        with self._lock:
            if self._stopping:
                stopped = RuntimeError("the Placement API's write pump has stopped")
                _settle([answer for _, answer in begun], [stopped] * len(begun))
                return
            if not self._threads:
                self._start(loop)
            self._queue.extend(begun)
            self._arrived.notify()

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._threads = [
            threading.Thread(target=target, name=f"placement-write-{name}", daemon=True)
            for target, name in ((self._append, "append"), (self._decide, "decide"))
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """No more writes; the threads end once the writes taken are answered."""
        with self._lock:
            self._stopping = True
            self._arrived.notify()
        for thread in self._threads:
            thread.join(timeout=60)

    def _append(self) -> None:
        """Every write that arrived, appended at once, then on to :meth:`_decide`."""
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._arrived.wait()
                batch, self._queue = self._queue, []
            if not batch:
                self._appended.put(None)
                return  # stopping, and nothing left
            answers = [answer for _, answer in batch]
            told = _Told(self, {event.event_id: answer for event, answer in batch})
            try:
                appended = self.service.append_many([event for event, _ in batch], told)
            except Exception as error:  # a broken log: each write says so
                log.exception("placement-api: a batch of %d writes failed", len(batch))
                self._settle(answers, [error] * len(batch))
                continue
            self._appended.put((told, appended))

    def _decide(self) -> None:
        """The decisions on the appended batches, each batch's answered
        once all are decided (those the writer told as it decided them
        are already on their way)."""
        while (taken := self._appended.get()) is not None:
            told, appended = taken
            answers = list(told.answers.values())
            try:
                found: list[Outcome | BaseException] = list(self.service.decided_many(appended))
            except Exception as error:  # a broken view: each write says so
                log.exception("placement-api: a batch of %d writes failed", len(answers))
                found = [error] * len(answers)
            left = [(a, f) for a, f in zip(answers, found, strict=True) if a not in told.sent]
            if left:
                self._settle([a for a, _ in left], [f for _, f in left])

    def _settle(
        self, answers: list[asyncio.Future[Outcome]], found: list[Outcome | BaseException]
    ) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(_settle, answers, found)


class _Told:
    """A batch's writes, answered as their writer decides them
    (:data:`~berth.placement_api.service.Told`): from the thread deciding
    them, one wake-up of the loop for those of one decided batch, before
    that thread appends their outcomes and commits the view."""

    __slots__ = ("answers", "pump", "sent")

    def __init__(self, pump: WritePump, answers: dict[str, asyncio.Future[Outcome]]) -> None:
        self.pump = pump
        self.answers = answers
        """Event id -> the write's answer (in the batch's order)."""
        self.sent: set[asyncio.Future[Outcome]] = set()
        """The answers on their way."""

    def __call__(self, decisions: list[tuple[str, list[Outcome]]]) -> None:
        answers = [self.answers[event_id] for event_id, _ in decisions]
        found: list[Outcome | BaseException] = [answer_of(o) for _, o in decisions]
        self.sent.update(answers)
        self.pump._settle(answers, found)


def _settle(answers: list[asyncio.Future[Outcome]], found: list[Outcome | BaseException]) -> None:
    """On the loop: each waiting write its decision or its failure."""
    for answer, result in zip(answers, found, strict=True):
        if answer.done():  # its request was cancelled meanwhile
            continue
        if isinstance(result, BaseException):
            answer.set_exception(result)
        else:
            answer.set_result(result)
