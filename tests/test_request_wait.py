"""``berth request --wait`` and :class:`berth.client.Answers`: a service
submits requests and batches and gets each one's answer, against a real
``berth serve`` process and a real scheduler worker."""

from __future__ import annotations

import json
import time
from pathlib import Path

from berth.app import App, Settings
from berth.client import Answers, Decisions, Publisher
from consumers.partition_writer import catch_up_all
from scheduling.config import SchedulerConfig
from schemas.events import Release
from schemas.requests import BatchRequest, PlacementRequest
from tests.builders import provider
from tests.conftest import Cli
from tests.processes import serving

NOW_MS = 10**12


def _lines(*requests: dict[str, object]) -> str:
    return "".join(json.dumps(r) + "\n" for r in requests)


def _request(rid: str, vcpu: int) -> dict[str, object]:
    return {
        "request_id": rid,
        "ts_ms": int(time.time() * 1000),
        "project_id": "p",
        "resources": {"VCPU": vcpu},
    }


def test_request_wait_prints_each_answer_from_a_running_scheduler(tmp_path: Path, cli: Cli) -> None:
    data = tmp_path / "data"
    with serving(data, partitions=2):
        now = int(time.time() * 1000)
        events = tmp_path / "events.jsonl"
        events.write_text(
            "".join(
                e.model_dump_json() + "\n"
                for n in range(2)
                for e in provider(f"node-{n}", ts=now, VCPU=(4, 1.0))
            )
        )
        assert cli("publish", "--data-dir", str(data), str(events))[0] == 0
        batch = {
            "type": "batch",
            "batch_id": "ci-1",
            "ts_ms": now,
            "members": [_request("ci-1-m", 2) | {"num_instances": 2}],
        }
        requests = tmp_path / "requests.jsonl"
        requests.write_text(
            _lines(_request("small", 1), _request("huge", 64), batch)
            + "not json\n"
            + _lines({"request_id": "no-resources"})
        )
        code, out, err = cli(
            "request", "--data-dir", str(data), "--wait", "--timeout-s", "60", str(requests)
        )
    assert code == 1  # two bad lines, and "huge" was not placed
    printed = [json.loads(line) for line in out.splitlines()]
    submitted, answered = printed[:3], printed[3:]
    assert [s["line"] for s in submitted] == [1, 2, 3]
    assert {a["request_id"]: a["placed"] for a in answered} == {
        "small": True,
        "huge": False,
        "ci-1": True,
    }
    (batch_answer,) = [a for a in answered if a["request_id"] == "ci-1"]
    assert batch_answer["status"] == "committed" and len(batch_answer["instances"]) == 2
    (small,) = [a for a in answered if a["request_id"] == "small"]
    assert "ranked" not in small  # spelled out for the reader
    best = small["candidates"][0]
    assert best["provider_id"] == small["reservations"][0][1]
    assert set(best["weighers"]) >= {"RAMWeigher", "CPUWeigher"} and best["score"] >= 0
    (huge,) = [a for a in answered if a["request_id"] == "huge"]
    assert "no valid host" in huge["reason"]
    assert "line 4: not JSON" in err
    assert "line 5: " in err and "missing" in err


def test_request_wait_without_a_scheduler_times_out_naming_the_unanswered(
    tmp_path: Path, cli: Cli
) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text(_lines(_request("r1", 1), _request("r2", 1)))
    data = ["--data-dir", str(tmp_path / "data")]
    started = time.monotonic()
    code, out, err = cli("request", *data, "--wait", "--timeout-s", "0.3", str(requests))
    assert code == 3
    assert time.monotonic() - started < 30
    assert len(out.splitlines()) == 2  # the submissions, no answers
    assert err == "berth: no answer after 0.3 s to r1, r2 (is a scheduler running?)\n"
    # without --wait, submitting is all it does
    assert cli("request", *data, str(requests))[0] == 0


def test_a_queued_batch_is_answered_once_it_is_placed(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path, partitions=2)) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        publisher.publish([e for n in range(2) for e in provider(f"n{n}", ts=1, VCPU=4)])
        writers = app.writers()
        worker = app.scheduler_worker(
            SchedulerConfig.default(), lambda: catch_up_all(writers), publisher
        )
        answers = Answers(app.log, app.settings.topics)
        member = PlacementRequest(
            request_id="fill-m",
            ts_ms=NOW_MS,
            project_id="p",
            resources={"VCPU": 4},
            num_instances=2,
        )
        waiting = member.model_copy(update={"request_id": "wait-m", "num_instances": 1})
        publisher.submit(
            [
                BatchRequest(batch_id="fill", ts_ms=NOW_MS, members=(member,)),
                BatchRequest(batch_id="wait", ts_ms=NOW_MS, members=(waiting,), mode="queue"),
            ]
        )
        worker.step()
        seen: list[str] = []
        # "wait" is queued: that answer is not its last, so it stays unanswered
        assert answers.wait(["fill", "wait"], 0, lambda a: seen.append(a["request_id"])) == ["wait"]
        assert seen == ["fill"]
        fill = answers.found["fill"]
        publisher.publish(
            [
                Release(event_id=f"rel-{rid}", ts_ms=NOW_MS, partition_key=pid, reservation_id=rid)
                for rid, pid in fill["reservations"]
            ]
        )
        worker.step()
        assert answers.wait(["wait"], 5, lambda a: seen.append(a["request_id"])) == []
        assert seen == ["fill", "wait"] and answers.found["wait"]["status"] == "committed"


def test_a_wait_reads_only_the_partitions_it_is_given(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path, partitions=2)) as app:
        publisher = Publisher(app.log, clock_ms=lambda: NOW_MS)
        decisions = Decisions(app.log, app.settings.topics)
        registered, inventory = provider("n1", ts=1, VCPU=4)
        ((partition, _), _) = publisher.publish([registered, inventory])
        catch_up_all(app.writers())
        wanted = [registered.event_id]
        assert decisions.wait(wanted, 0, partitions={1 - partition}) == wanted
        assert decisions.wait(wanted, 0, partitions={partition}) == []
        # only the wanted event's outcomes are kept
        assert list(decisions.found) == wanted
        assert [o.kind for o in decisions.found[registered.event_id]] == ["applied"]
