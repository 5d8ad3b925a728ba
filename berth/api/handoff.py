"""Answers handed from ``berth serve``'s scheduler worker to the API's
waiting callers in the same process, once the log holds them durably.

With ``?wait=``, a caller of ``POST /v1/requests`` waits for its answers.
An API beside the writers and the only scheduler worker (``berth serve
--api``) need not read them back from the placements topic: the worker
hands each answer over here after its append returned, so after it is
durable, exactly as it was appended. A reply therefore never names an
answer (nor the decisions it reports) that a restart could lose. The
wait is a condition, woken by the hand-over; nothing polls.

It also tells the worker when the replies it woke are out
(:meth:`AnswerHub.replies_out`), so that the work it does ahead of the
next request (reading the view's changes) does not compete with them for
the interpreter. A reply is owed from the hand-over that completes its
caller's answers, not from when that caller's thread wakes: the worker
that handed them over runs on at once, and would otherwise find nothing
owed and start that work before the caller had even woken.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True, eq=False)
class _Waiter:
    """One caller expecting ``ids``."""

    ids: frozenset[str]
    owed: bool = False
    """Its answers are all handed over: counted in the replies owed."""
    waiting: bool = False
    """A :meth:`AnswerHub.wait` call is this caller's."""


class AnswerHub:
    """Final answers by request (or batch) id, for the callers waiting on them."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._wanted: Counter[str] = Counter()
        """Id -> how many callers wait for it."""
        self._found: dict[str, dict[str, Any]] = {}
        self._waiters: list[_Waiter] = []
        self._owed = 0
        """Replies whose answers are all handed over (or whose wait ended)
        and that are not yet sent."""

    def expect(self, ids: Iterable[str]) -> None:
        """Wait for ``ids`` (before they are submitted: an answer handed
        over before this is not kept)."""
        ids = list(ids)
        with self._cond:
            self._wanted.update(ids)
            self._waiters.append(_Waiter(frozenset(ids)))

    def hand_over(self, answers: Sequence[dict[str, Any]]) -> None:
        """Durable answers, as appended (without their ``source``); a
        queued batch's answer is not final and is not kept."""
        with self._cond:
            woke = False
            for answer in answers:
                rid = answer["request_id"]
                if rid in self._wanted and answer.get("status") != "queued":
                    self._found[rid] = answer
                    woke = True
            if woke:
                found = self._found
                for waiter in self._waiters:
                    if not waiter.owed and all(rid in found for rid in waiter.ids):
                        waiter.owed = True
                        self._owed += 1
                self._cond.notify_all()

    def wait(self, ids: Sequence[str], timeout_s: float) -> tuple[dict[str, Any], list[str]]:
        """The answers to ``ids`` (which :meth:`expect` was told of) that
        came within ``timeout_s``, and the ids still pending; either way
        the ids are no longer waited for. The caller owes a reply:
        :meth:`replied` once it is sent."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            waiter = self._claim(ids)
            try:
                while not all(rid in self._found for rid in ids):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                found = {rid: self._found[rid] for rid in ids if rid in self._found}
                if waiter is None or not waiter.owed:
                    self._owed += 1
                return found, sorted(rid for rid in set(ids) if rid not in found)
            finally:
                if waiter is not None:
                    self._waiters.remove(waiter)
                self._forget(ids)

    def drop(self, ids: Sequence[str]) -> None:
        """No longer wait for ``ids`` (their submission failed)."""
        with self._cond:
            waiter = self._claim(ids)
            if waiter is not None:
                self._waiters.remove(waiter)
                if waiter.owed:  # no reply will say it went out
                    self._owed -= 1
                    if self._owed <= 0:
                        self._owed = 0
                        self._cond.notify_all()
            self._forget(ids)

    def _claim(self, ids: Sequence[str]) -> _Waiter | None:
        """The first waiter :meth:`expect` made for ``ids`` that no call
        has taken yet, now taken; the caller holds the condition."""
        key = frozenset(ids)
        for waiter in self._waiters:
            if waiter.ids == key and not waiter.waiting:
                waiter.waiting = True
                return waiter
        return None

    def _forget(self, ids: Sequence[str]) -> None:
        for rid in ids:
            self._wanted[rid] -= 1
            if self._wanted[rid] <= 0:
                del self._wanted[rid]
                self._found.pop(rid, None)

    def replied(self) -> None:
        """A reply :meth:`wait` woke went out."""
        with self._cond:
            self._owed -= 1
            if self._owed <= 0:
                self._owed = 0
                self._cond.notify_all()

    def replies_out(self, timeout_s: float) -> bool:
        """Wait until every reply owed is sent, ``timeout_s`` at most;
        whether they were. Past the time the debts are dropped: a reply
        whose caller went away is never sent, and no one waits on it twice."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._owed > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._owed = 0
                    return False
                self._cond.wait(left)
            return True
