"""The Placement API's write pump (berth.placement_api.pump.WritePump):
the writes that arrive while a batch is being appended go out together in
the next append, and so do those begun in one turn of the loop; each
write gets its own decision or its own failure; a batch is appended while
the one before it waits for its decisions; a broken append fails only its
own batch; a batch's answers go out before the view commits it, which
follows at once; stop ends both threads."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, cast

import pytest

from berth.placement_api.errors import PlacementError
from berth.placement_api.pump import WritePump
from berth.placement_api.service import Appended, PlacementService, Refused, Told
from schemas.events import Event, PlacementNameDefined
from schemas.outcomes import Code, Kind, Outcome

TIMEOUT_S = 30.0


def _trait(name: str) -> dict[str, Any]:
    return {"type": "placement_name_defined", "kind": "trait", "name": name}


class _Service:
    """append_many and decided_many as the pump calls them: each append
    recorded, the first one held until :attr:`release` is set; a trait
    named ``CUSTOM_REFUSED`` refused, ``CUSTOM_BROKEN`` a broken append."""

    def __init__(self) -> None:
        self.appends: list[list[str]] = []
        self.first_append = threading.Event()
        self.second_append = threading.Event()
        self.release = threading.Event()
        self.deciding = threading.Event()
        self.decide_may_end = threading.Event()
        self.decide_may_end.set()
        self.tell: Told | None = None
        self.events: list[Event] = []

    def append_many(
        self, events: list[Event], tell: Told | None = None
    ) -> list[Appended | Outcome | Exception]:
        names = [event.name for event in events if isinstance(event, PlacementNameDefined)]
        self.appends.append(names)
        self.tell, self.events = tell, events
        if len(self.appends) == 1:
            self.first_append.set()
            assert self.release.wait(TIMEOUT_S)
        if len(self.appends) == 2:
            self.second_append.set()
        if "CUSTOM_BROKEN" in names:
            raise OSError("the log's disk is gone")
        return [self._decision(event, name) for event, name in zip(events, names, strict=True)]

    def _decision(self, event: Event, name: str) -> Appended | Outcome | Exception:
        if name == "CUSTOM_TOLD":  # left to the writer to tell
            return Appended(event.event_id, cast(Any, None), 0, len(self.appends))
        if name == "CUSTOM_REFUSED":
            return Refused(Code.PLACEMENT_CONCURRENT_UPDATE, f"{name} is taken")
        return Outcome(0, len(self.appends), 0, Kind.APPLIED, event.event_id, name, 1)

    def decided_many(
        self, appended: list[Appended | Outcome | Exception]
    ) -> list[Outcome | Exception]:
        self.deciding.set()
        assert self.decide_may_end.wait(TIMEOUT_S)
        return [self._told(one) if isinstance(one, Appended) else one for one in appended]

    @staticmethod
    def _told(one: Appended) -> Outcome:
        return Outcome(0, one.offset, 0, Kind.APPLIED, one.event_id, "CUSTOM_TOLD", 1)


def _pump(service: _Service) -> WritePump:
    return WritePump(cast(PlacementService, service))


async def _write(pump: WritePump, name: str) -> Outcome | BaseException:
    try:
        return await pump.write(_trait(name))
    except (Refused, PlacementError, OSError) as failure:
        return failure


async def _in_thread(wait: threading.Event) -> bool:
    return await asyncio.get_running_loop().run_in_executor(None, wait.wait, TIMEOUT_S)


def test_writes_arriving_during_an_append_go_out_together_each_with_its_own_answer() -> None:
    service = _Service()
    pump = _pump(service)

    async def race() -> list[Outcome | BaseException]:
        first = asyncio.ensure_future(_write(pump, "CUSTOM_FIRST"))
        assert await _in_thread(service.first_append)
        names = ["CUSTOM_A", "CUSTOM_REFUSED", "CUSTOM_B"]
        others = [asyncio.ensure_future(_write(pump, name)) for name in names]
        await asyncio.sleep(0)  # every write queued while the first append is held
        service.release.set()
        return [await first, *[await other for other in others]]

    try:
        first, a, refused, b = asyncio.run(asyncio.wait_for(race(), TIMEOUT_S))
    finally:
        service.release.set()
        pump.stop()
    assert service.appends == [["CUSTOM_FIRST"], ["CUSTOM_A", "CUSTOM_REFUSED", "CUSTOM_B"]]
    assert isinstance(first, Outcome) and first.subject == "CUSTOM_FIRST" and first.offset == 1
    assert isinstance(a, Outcome) and (a.subject, a.offset) == ("CUSTOM_A", 2)
    assert isinstance(b, Outcome) and (b.subject, b.offset) == ("CUSTOM_B", 2)
    assert isinstance(refused, Refused) and refused.code == Code.PLACEMENT_CONCURRENT_UPDATE


def test_the_writes_begun_in_one_turn_of_the_loop_are_appended_together() -> None:
    service = _Service()
    service.release.set()
    pump = _pump(service)

    async def late(name: str) -> Outcome | BaseException:
        # the loop blocked between two writes of one turn: a thread woken by
        # the first would append it alone meanwhile
        time.sleep(0.2)
        return await _write(pump, name)

    async def one_turn() -> list[Outcome | BaseException]:
        first = asyncio.ensure_future(_write(pump, "CUSTOM_A"))
        second = asyncio.ensure_future(late("CUSTOM_B"))
        return [await first, await second]

    try:
        a, b = asyncio.run(asyncio.wait_for(one_turn(), TIMEOUT_S))
    finally:
        pump.stop()
    assert service.appends == [["CUSTOM_A", "CUSTOM_B"]]
    assert isinstance(a, Outcome) and isinstance(b, Outcome)


def test_the_next_batch_is_appended_while_the_one_before_waits_for_its_decisions() -> None:
    service = _Service()
    service.release.set()
    service.decide_may_end.clear()
    pump = _pump(service)

    async def overlap() -> list[Outcome | BaseException]:
        first = asyncio.ensure_future(_write(pump, "CUSTOM_FIRST"))
        assert await _in_thread(service.deciding)
        second = asyncio.ensure_future(_write(pump, "CUSTOM_SECOND"))
        # appended, though the first is still waiting for its decisions
        assert await _in_thread(service.second_append)
        service.decide_may_end.set()
        return [await first, await second]

    try:
        first, second = asyncio.run(asyncio.wait_for(overlap(), TIMEOUT_S))
    finally:
        service.decide_may_end.set()
        pump.stop()
    assert isinstance(first, Outcome) and isinstance(second, Outcome)
    assert service.appends == [["CUSTOM_FIRST"], ["CUSTOM_SECOND"]]


def test_a_write_told_its_decision_is_answered_before_its_round_ends() -> None:
    service = _Service()
    service.release.set()
    service.decide_may_end.clear()  # the round still appending outcomes, committing
    pump = _pump(service)

    async def told() -> Outcome | BaseException:
        answer = asyncio.ensure_future(_write(pump, "CUSTOM_TOLD"))
        assert await _in_thread(service.deciding)
        assert service.tell is not None
        [event] = service.events
        outcome = Outcome(0, 7, 0, Kind.APPLIED, event.event_id, "CUSTOM_TOLD", 1)
        # as the writer's round does, from its own thread
        writer = threading.Thread(target=service.tell, args=([(event.event_id, [outcome])],))
        writer.start()
        writer.join(TIMEOUT_S)
        return await answer

    try:
        # well before the held round would give up (TIMEOUT_S)
        one = asyncio.run(asyncio.wait_for(told(), TIMEOUT_S / 3))
        assert service.deciding.is_set() and not service.decide_may_end.is_set()
    finally:
        service.decide_may_end.set()
        pump.stop()
    assert isinstance(one, Outcome) and (one.subject, one.offset) == ("CUSTOM_TOLD", 7)


def test_a_broken_append_fails_its_own_batch_and_the_pump_goes_on() -> None:
    service = _Service()
    service.release.set()
    pump = _pump(service)

    async def writes() -> list[Outcome | BaseException]:
        return [
            await _write(pump, "CUSTOM_FIRST"),
            await _write(pump, "CUSTOM_BROKEN"),
            await _write(pump, "CUSTOM_AFTER"),
        ]

    try:
        first, broken, after = asyncio.run(asyncio.wait_for(writes(), TIMEOUT_S))
    finally:
        pump.stop()
    assert isinstance(first, Outcome) and isinstance(after, Outcome)
    assert isinstance(broken, OSError)


def test_an_invalid_write_is_refused_before_it_is_queued() -> None:
    service = _Service()
    pump = _pump(service)
    with pytest.raises(PlacementError) as refused:
        asyncio.run(pump.write({"type": "placement_name_defined", "kind": "trait"}))
    assert refused.value.status == 400
    assert service.appends == []
    pump.stop()


def test_stop_ends_both_threads() -> None:
    service = _Service()
    service.release.set()
    pump = _pump(service)
    asyncio.run(asyncio.wait_for(_write(pump, "CUSTOM_ONE"), TIMEOUT_S))
    threads = [t for t in threading.enumerate() if t.name.startswith("placement-write-")]
    assert len(threads) == 2
    pump.stop()
    assert not any(thread.is_alive() for thread in threads)
    with pytest.raises(RuntimeError):
        asyncio.run(pump.write(_trait("CUSTOM_LATE")))
