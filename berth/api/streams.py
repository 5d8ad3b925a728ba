"""The writers' decisions and the scheduler's answers as Server-Sent Events,
so that a service in any language follows them without polling.

A stream reads one topic (``berth.outcomes`` or ``berth.placements``) on
from where it starts: the topic's end, or the position a client's
``Last-Event-ID`` names. Every event's ``id`` is that position after it, one
``partition:offset`` (the next record to read) for every partition, comma
separated, so a client that reconnects with the last id it saw misses
nothing and sees nothing twice. Records a project may not see are skipped,
and the position past them goes out as an event of its own with only an
``id`` (which a client keeps without dispatching anything); a comment goes
out when the stream has been quiet for :data:`KEEPALIVE_S`.

A quiet stream blocks a thread in :meth:`Log.wait` (the log's wake on
arrival) until a record comes or the keepalive is due: a new record goes out
at once, and an idle stream costs no CPU. Those threads have their own
limiter, so that many open streams never take the threads the other routes
run in.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import weakref
from collections.abc import AsyncIterator, Callable
from http import HTTPStatus

from anyio import CapacityLimiter, to_thread

from berth.api.problems import Problem
from berth.api.visibility import Visibility
from ledger.log import Log
from schemas.outcomes import Outcome

KEEPALIVE_S = 15.0
BATCH = 500
WAITING_STREAMS = 1000
"""How many streams may block a thread waiting for records at once (a
waiting thread sleeps in the kernel; past this many, a stream's next read
waits its turn)."""

_waits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _limiter() -> CapacityLimiter:
    """The streams' own threads, one limiter per event loop (a limiter
    belongs to the loop it is used in)."""
    loop = asyncio.get_running_loop()
    limiter = _waits.get(loop)
    if limiter is None:
        limiter = _waits[loop] = CapacityLimiter(WAITING_STREAMS)
    return limiter


Shown = Callable[[list[tuple[int, int, bytes]]], list[tuple[int, int, str]]]
"""(partition, offset, value) records -> (partition, offset, JSON data) of
those the caller may see."""


def parse_cursor(text: str | None, partitions: int) -> list[int] | None:
    """A ``Last-Event-ID``: ``partition:offset`` for some or all partitions
    (those not named start at their end); None when there is none. 400 when
    it is not one."""
    if text is None or not text.strip():
        return None
    offsets: list[int] = [-1] * partitions
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d{1,6}):(\d{1,19})\s*", part)
        if match is None or int(match[1]) >= partitions:
            raise Problem(
                HTTPStatus.BAD_REQUEST,
                f"Last-Event-ID is partition:offset,... for partitions 0 to {partitions - 1}",
                "bad-cursor",
            )
        offsets[int(match[1])] = int(match[2])
    return offsets


def cursor(offsets: list[int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in enumerate(offsets))


class Stream:
    """One client's stream of one topic."""

    def __init__(self, log: Log, topic: str, start: list[int] | None, shown: Shown) -> None:
        self.log = log
        self.topic = topic
        ends = [log.end_offset(topic, p) for p in range(log.partition_count(topic))]
        given = start or [-1] * len(ends)
        self.offsets = [o if o >= 0 else e for o, e in zip(given, ends, strict=True)]
        self.shown = shown

    def _read(self) -> tuple[list[tuple[int, int, str]], dict[int, int]]:
        """The next records the caller may see, and the next offset of each
        partition that had any."""
        found: list[tuple[int, int, bytes]] = []
        nexts: dict[int, int] = {}
        for partition, offset in enumerate(self.offsets):
            records = self.log.read(self.topic, partition, offset, BATCH)
            if records:
                found += [(partition, r.offset, r.value) for r in records]
                nexts[partition] = records[-1].offset + 1
        return self.shown(found), nexts

    def _next(self, timeout_s: float) -> tuple[list[tuple[int, int, str]], dict[int, int]]:
        """:meth:`_read`, after waiting up to ``timeout_s`` for a record to
        arrive if none has."""
        watches = {self.topic: dict(enumerate(self.offsets))}
        if not self.log.arrived(watches):
            self.log.wait(watches, timeout_s)
        return self._read()

    async def events(self, name: str) -> AsyncIterator[str]:
        """The stream's text, event after event, until the client goes."""
        quiet_since = time.monotonic()
        while True:
            left = max(0.0, quiet_since + KEEPALIVE_S - time.monotonic())
            # abandoned on cancel: a client that goes does not wait for the
            # thread's wait to end (which ends by itself by the keepalive)
            shown, nexts = await to_thread.run_sync(
                self._next, left, abandon_on_cancel=True, limiter=_limiter()
            )
            if not nexts:
                if time.monotonic() - quiet_since >= KEEPALIVE_S:
                    quiet_since = time.monotonic()
                    yield ": still here\n\n"
                continue
            quiet_since = time.monotonic()
            for partition, offset, data in shown:
                self.offsets[partition] = offset + 1
                yield f"id: {cursor(self.offsets)}\nevent: {name}\ndata: {data}\n\n"
            skipped = {p: o for p, o in nexts.items() if self.offsets[p] != o}
            if skipped:
                for partition, offset in skipped.items():
                    self.offsets[partition] = offset
                yield f"id: {cursor(self.offsets)}\n\n"


def outcomes_shown(seen: Visibility | None) -> Shown:
    """The outcomes topic's records as they go out: all of them, or those
    the project ``seen`` is for may see."""

    def shown(found: list[tuple[int, int, bytes]]) -> list[tuple[int, int, str]]:
        if seen is None:
            return [(p, o, value.decode()) for p, o, value in found]
        decoded = [(p, o, Outcome.from_json(value)) for p, o, value in found]
        visible = {id(x) for x in seen.outcomes(d for _, _, d in decoded)}
        return [(p, o, d.to_json().decode()) for p, o, d in decoded if id(d) in visible]

    return shown


def answers_shown(seen: Visibility | None) -> Shown:
    """The placements topic's answers as they go out (without their
    ``source``, as a waited request gets them): all, or the project's."""

    def shown(found: list[tuple[int, int, bytes]]) -> list[tuple[int, int, str]]:
        out = []
        for p, o, value in found:
            answer = json.loads(value)
            if seen is not None and not seen.answer(answer):
                continue
            answer.pop("source", None)
            out.append((p, o, json.dumps(answer)))
        return out

    return shown
