"""Answers handed from ``berth serve``'s scheduler worker to the API's
waiting callers in one process (:mod:`berth.api.handoff`): the hub on its
own with real threads, and a real ``berth serve --api`` whose replies are
exactly the answers its log holds."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

from berth.api.handoff import AnswerHub
from ledger.embedded import EmbeddedLog
from ledger.topics import DEFAULT_TOPICS
from tests.http_calls import call
from tests.processes import berth_running


def _answer(rid: str, **more: Any) -> dict[str, Any]:
    return {"request_id": rid, "placed": True, "reservations": [], **more}


def _waiting(
    hub: AnswerHub, ids: list[str], timeout_s: float
) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(hub.wait(ids, timeout_s)))
    thread.start()
    return thread, got


def test_a_waiter_wakes_with_the_answers_handed_over_and_no_others() -> None:
    hub = AnswerHub()
    hub.expect(["a", "b"])
    thread, got = _waiting(hub, ["a", "b"], 30)
    started = time.monotonic()
    hub.hand_over([_answer("a"), _answer("x")])
    hub.hand_over([{**_answer("b"), "status": "queued"}])  # not final
    hub.hand_over([_answer("b", attempts=2)])
    thread.join(timeout=30)
    assert time.monotonic() - started < 10  # woken, not timed out
    assert got == [({"a": _answer("a"), "b": _answer("b", attempts=2)}, [])]


def test_a_waiter_whose_time_passes_returns_what_came_and_the_rest_pending() -> None:
    hub = AnswerHub()
    hub.expect(["a", "b"])
    hub.hand_over([_answer("a")])
    assert hub.wait(["a", "b"], 0.05) == ({"a": _answer("a")}, ["b"])
    hub.hand_over([_answer("b")])  # no one waits for it any more: not kept
    hub.expect(["b"])
    assert hub.wait(["b"], 0) == ({}, ["b"])


def test_an_answer_before_expect_or_after_drop_is_not_kept() -> None:
    hub = AnswerHub()
    hub.hand_over([_answer("a")])
    hub.expect(["a"])
    hub.drop(["a"])
    hub.hand_over([_answer("a")])
    hub.expect(["a"])
    assert hub.wait(["a"], 0) == ({}, ["a"])


def test_two_callers_waiting_for_one_id_both_get_it() -> None:
    hub = AnswerHub()
    hub.expect(["a"])
    hub.expect(["a"])
    first, got_first = _waiting(hub, ["a"], 30)
    second, got_second = _waiting(hub, ["a"], 30)
    hub.hand_over([_answer("a")])
    first.join(timeout=30)
    second.join(timeout=30)
    assert got_first == got_second == [({"a": _answer("a")}, [])]


def test_replies_out_waits_for_every_reply_owed_and_drops_them_past_its_time() -> None:
    hub = AnswerHub()
    assert hub.replies_out(0)
    hub.expect(["a"])
    hub.hand_over([_answer("a")])
    hub.wait(["a"], 0)
    threading.Timer(0.01, hub.replied).start()
    assert hub.replies_out(30)
    hub.expect(["b"])
    hub.wait(["b"], 0)  # its caller went away: no reply ever
    assert not hub.replies_out(0.01)
    assert hub.replies_out(0)


def test_a_reply_is_owed_from_the_hand_over_before_its_caller_wakes() -> None:
    hub = AnswerHub()
    hub.expect(["a", "b"])
    hub.hand_over([_answer("a")])
    assert hub.replies_out(0)  # not all its answers: no reply yet
    hub.hand_over([_answer("b")])
    # the worker that handed them over runs on at once: it finds the reply
    # owed although the caller has not woken yet (past its time, dropped)
    assert not hub.replies_out(0)
    assert hub.wait(["a", "b"], 0) == ({"a": _answer("a"), "b": _answer("b")}, [])
    assert hub.replies_out(0)  # owed once, from the hand-over, not again on waking
    hub.expect(["c"])
    hub.hand_over([_answer("c")])

    def reply() -> None:
        hub.wait(["c"], 0)
        hub.replied()

    threading.Timer(0.01, reply).start()
    assert hub.replies_out(30)


def test_a_caller_whose_submission_failed_owes_no_reply() -> None:
    hub = AnswerHub()
    hub.expect(["a"])
    hub.hand_over([_answer("a")])  # a resubmitted id answered again, say
    hub.drop(["a"])
    assert hub.replies_out(0)


def test_serve_replies_with_the_answers_its_log_holds(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    argv = ("serve", "--data-dir", str(data), "--partitions", "2", "--api", f"127.0.0.1:{port}")
    replied: dict[str, Any] = {}
    with berth_running(*argv, ready=lambda: _listening(port)):
        now = int(time.time() * 1000)
        status, _ = call(url, "/v1/events?wait=30", _provider("n1", now, 4))
        assert status == 200
        one = {"ts_ms": now, "project_id": "p", "resources": {"VCPU": 3}}
        batch = {
            "type": "batch",
            "batch_id": "b",
            "ts_ms": now,
            "members": [one | {"request_id": "m"}],
        }
        for body in (one | {"request_id": "a"}, one | {"request_id": "c"}, batch):
            status, reply = call(url, "/v1/requests?wait=30", body)
            assert status == 200, reply
            replied |= reply["answers"]
            # what an answer reports was durable when the reply went out
            for reservation, _ in reply["answers"].get("a", {}).get("reservations", []):
                assert _logged_decisions(data)[reservation] == "accepted"
        status, again = call(url, "/v1/requests?wait=30", one | {"request_id": "a"})
        assert status == 200 and again["answers"] == {"a": replied["a"]}  # its first answer
    assert {rid: answer["placed"] for rid, answer in replied.items()} == {
        "a": True,
        "c": False,
        "b": False,
    }
    logged = _logged_answers(data)
    assert {rid: logged[rid] for rid in replied} == replied


def test_a_queued_batch_is_failed_at_its_deadline_with_no_record_arriving(tmp_path: Path) -> None:
    """serve's loop, idle, still does the work no record announces."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    argv = ("serve", "--data-dir", str(tmp_path / "data"), "--partitions", "2")
    with berth_running(*argv, "--api", f"127.0.0.1:{port}", ready=lambda: _listening(port)):
        now = int(time.time() * 1000)
        status, _ = call(url, "/v1/events?wait=30", _provider("n1", now, 4))
        assert status == 200
        held = {"request_id": "h", "ts_ms": now, "project_id": "p", "resources": {"VCPU": 3}}
        status, reply = call(url, "/v1/requests?wait=30", held)
        assert status == 200 and reply["answers"]["h"]["placed"]
        # fits once the hold is released, which it is not: it waits, then fails
        now = int(time.time() * 1000)
        member = {"request_id": "m", "ts_ms": now, "project_id": "p", "resources": {"VCPU": 2}}
        batch = {
            "type": "batch",
            "batch_id": "q",
            "ts_ms": now,
            "mode": "queue",
            "queue_timeout_ms": 2000,
            "members": [member],
        }
        status, reply = call(url, "/v1/requests?wait=30", batch)
    assert status == 200, reply
    answer = reply["answers"]["q"]
    assert (answer["status"], answer["reason"]) == ("failed", "queue deadline passed")


def _provider(pid: str, now: int, vcpus: int) -> list[dict[str, Any]]:
    common = {"ts_ms": now, "partition_key": pid, "provider_id": pid}
    inventory = {"VCPU": {"total": vcpus}}
    return [
        {"type": "provider_registered", "event_id": f"reg-{pid}", "name": pid, **common},
        {"type": "inventory_set", "event_id": f"inv-{pid}", "inventories": inventory, **common},
    ]


def _logged_answers(data: Path) -> dict[str, Any]:
    log = EmbeddedLog(data, read_only=True)
    try:
        topic = DEFAULT_TOPICS.placements
        answers = {}
        for p in range(log.partition_count(topic)):
            for record in log.read(topic, p, 0, 1000):
                answer = json.loads(record.value)
                answer.pop("source")
                answers[answer["request_id"]] = answer
        return answers
    finally:
        log.close()


def _logged_decisions(data: Path) -> dict[str, str]:
    log = EmbeddedLog(data, read_only=True)
    try:
        topic = DEFAULT_TOPICS.outcomes
        return {
            outcome["subject"]: outcome["kind"]
            for p in range(log.partition_count(topic))
            for record in log.read(topic, p, 0, 1000)
            if (outcome := json.loads(record.value))
        }
    finally:
        log.close()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
