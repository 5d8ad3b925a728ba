"""``berth explain --request``: a past request explained from the log alone,
after the policy that placed it has changed twice and the cluster has moved
on: the view rebuilt as of its answer's offsets, the recorded policy version
recompiled, the pick recomputed and found the same; a provider's story
(removed by a filter, or ranked lower with each weigher's part)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path

import pytest

from berth.app import App, Settings
from berth.client import Answers, Publisher
from consumers.partition_writer import catch_up_all
from consumers.policies import publish_policy
from ledger.embedded import EmbeddedLog
from ledger.log import Append
from ledger.topics import DEFAULT_TOPICS
from scheduling.config import SchedulerConfig
from schemas.events import ServerGroupCreated
from schemas.requests import PlacementRequest
from tests.builders import provider, set_state
from tests.conftest import Cli

NOW = int(time.time() * 1000)
PACKING = {"weighers": {"RAMWeigher": -1.0}}
SPREADING = {"weighers": {"RAMWeigher": 1.0}}


class Cluster:
    """The writers and a scheduler worker of one app, stepped by hand."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.publisher = Publisher(app.log, app.settings.topics)
        self.writers = app.writers()
        self.worker = app.scheduler_worker(
            SchedulerConfig.default(), lambda: catch_up_all(self.writers)
        )
        self.answers = Answers(app.log, app.settings.topics)

    def place(self, rid: str, ram_mb: int, group_id: str | None = None) -> dict[str, object]:
        """Submit one request of project p; its answer."""
        request = PlacementRequest(
            request_id=rid,
            ts_ms=NOW,
            project_id="p",
            resources={"MEMORY_MB": ram_mb},
            forbidden_traits=frozenset({"CUSTOM_NEVER"}),  # a set, as JSON a list
            group_id=group_id,
        )
        self.publisher.submit([request])
        catch_up_all(self.writers)
        while self.worker.step():
            pass
        catch_up_all(self.writers)
        assert self.answers.wait([rid], 10.0) == []
        answer: dict[str, object] = self.answers.found[rid]
        return answer


def _set(app: App, name: str, policy: Mapping[str, object]) -> int:
    record = {"type": "policy_set", "name": name, "policy": policy}
    return publish_policy(app.log, app.settings.topics, record)


def test_a_request_placed_under_an_old_policy_is_explained_from_the_log(
    tmp_path: Path, cli: Cli
) -> None:
    settings = Settings(data_dir=tmp_path, partitions=2)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics)
        events = [
            e
            for name, ram in (("small", 4096), ("mid", 8192), ("big", 16384), ("off", 65536))
            for e in provider(name, ts=NOW, VCPU=8, MEMORY_MB=ram)
        ]
        publisher.publish([*events, set_state("off", "disabled", ts=NOW)])
        version = _set(app, "packing", PACKING)
        assignment = {"type": "policy_assigned", "project_id": "p", "name": "packing"}
        publish_policy(app.log, app.settings.topics, assignment)
        cluster = Cluster(app)
        first = cluster.place("r1", 1024)
        # the policy changes twice and the cluster fills: none of it may
        # change how r1 is explained
        _set(app, "packing", SPREADING)
        cluster.place("r2", 8192)
        _set(app, "packing", {"weighers": {"CPUWeigher": 1.0}})
        cluster.place("r3", 2048)

    assert first["reservations"] == [[first["reservations"][0][0], "small"]]  # type: ignore[index]
    code, out, err = cli(
        "explain", "--data-dir", str(tmp_path), "--request", "r1", "--provider", "big", "--json"
    )
    assert code == 0, err
    story = json.loads(out)
    assert story["policy"] == f"packing@{version}" and story["policy_in_log"]
    assert story["recorded"] == story["recomputed"] == ["small"] and story["same"]
    assert story["removed"] == {"ComputeFilter": 1}  # off is disabled
    big = story["provider"]
    assert big["rank"] == 3 and big["weighers"]["RAMWeigher"][1] == -1.0
    assert story["first"]["provider_id"] == "small"

    code, out, _ = cli(
        "explain", "--data-dir", str(tmp_path), "--request", "r1", "--provider", "off"
    )
    assert code == 0
    assert "off: removed by ComputeFilter" in out and f"policy packing@{version}" in out

    code, _, err = cli("explain", "--data-dir", str(tmp_path), "--request", "nobody")
    assert code == 1 and "no answer to request 'nobody'" in err

    # berth history finds a request by its id: its instances' reservations
    code, out, err = cli("history", "--data-dir", str(tmp_path), "r1", "--json")
    assert code == 0, err
    found = json.loads(out)
    assert found["names"] == ["request"]
    assert [r["consumer_id"] for r in found["reservations"]] == ["r1.0"]
    assert [step["kind"] for step in found["history"]] == ["accepted"]


def test_replay_verify_checks_every_policy_and_the_policy_each_answer_names(
    tmp_path: Path, cli: Cli
) -> None:
    with App(Settings(data_dir=tmp_path, partitions=2)) as app:
        Publisher(app.log, app.settings.topics).publish(provider("n", ts=NOW, MEMORY_MB=4096))
        _set(app, "default", PACKING)
        Cluster(app).place("r1", 1024)
    code, out, err = cli("replay", "--data-dir", str(tmp_path), "--verify")
    assert code == 0, err
    verified = json.loads(out.strip().splitlines()[-1])
    assert verified["verified"] and verified["verified_policies"] == 1
    assert verified["verified_answers"] == 1

    # a policy record that slipped past the edge (written to the log by
    # hand) and no longer compiles: every scheduler skips it, and so the
    # replay names it
    with closing(EmbeddedLog(tmp_path)) as log:
        bad = {"type": "policy_set", "name": "x", "policy": {"filters": {"enabled": ["Nope"]}}}
        log.append(DEFAULT_TOPICS.policies, [Append(0, b"x", json.dumps(bad).encode())])
    code, out, err = cli("replay", "--data-dir", str(tmp_path), "--verify")
    assert code == 1 and "policy x@1 no longer compiles" in err and "Nope" in err


def test_the_last_answer_to_a_request_is_found_among_many(tmp_path: Path) -> None:
    from berth.audit import READ_BATCH, AuditError, find_answer
    from ledger.partitioner import partition_for

    with closing(EmbeddedLog(tmp_path)) as log:
        topic = DEFAULT_TOPICS.placements
        log.create_topic(topic, 2)
        partition = partition_for(b"wanted", 2)

        def answer(rid: str, n: int) -> Append:
            return Append(partition, rid.encode(), json.dumps({"request_id": rid, "n": n}).encode())

        # its answers early, across a read's boundary and before a long tail
        appends = [answer("other", n) for n in range(2 * READ_BATCH + 500)]
        appends[3] = answer("wanted", 1)
        appends[READ_BATCH + 499] = answer("wanted", 2)
        log.append(topic, appends)
        assert find_answer(log, topic, "wanted")["n"] == 2
        log.append(topic, [answer("wanted", 3)])
        assert find_answer(log, topic, "wanted")["n"] == 3
        with pytest.raises(AuditError, match="no answer to request 'nobody'"):
            find_answer(log, topic, "nobody")


def test_a_grouped_request_is_explained_under_its_groups_rule_then(
    tmp_path: Path, cli: Cli
) -> None:
    """The providers a server group's rule removed, as the group's members
    stood at the answer's offsets: a member released since changes nothing."""
    settings = Settings(data_dir=tmp_path, partitions=3)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics)
        publisher.publish(
            [e for name in ("a", "b", "c") for e in provider(name, ts=NOW, MEMORY_MB=8192)]
        )
        for gid, policy in (("spread", "anti-affinity"), ("web", "affinity")):
            publisher.publish(
                [
                    ServerGroupCreated(
                        event_id=f"mk-{gid}",
                        ts_ms=NOW,
                        partition_key=gid,
                        group_id=gid,
                        policy=policy,  # type: ignore[arg-type]
                        project_id="p",
                    )
                ]
            )
        cluster = Cluster(app)
        first = cluster.place("s1", 1024, group_id="spread")
        second = cluster.place("s2", 1024, group_id="spread")
        cluster.place("w1", 1024, group_id="web")
        third = cluster.place("w2", 1024, group_id="web")
        # the cluster moves on: the first member leaves its group
        publisher.release_consumer("s1.0")
        catch_up_all(cluster.writers)

    (taken,) = [pid for _, pid in first["reservations"]]  # type: ignore[attr-defined]
    (home,) = {pid for _, pid in third["reservations"]}  # type: ignore[attr-defined]
    code, out, err = cli(
        "explain", "--data-dir", str(tmp_path), "--request", "s2", "--provider", taken, "--json"
    )
    assert code == 0, err
    story = json.loads(out)
    assert (
        story["recorded"]
        == story["recomputed"]
        == [
            pid
            for _, pid in second["reservations"]  # type: ignore[attr-defined]
        ]
    )
    assert story["removed"] == {"ServerGroupAntiAffinityFilter": 1}
    assert story["provider"]["filtered_by"] == "ServerGroupAntiAffinityFilter"
    assert story["server_group"]["hosts"] == {taken: 1}
    assert (
        story["server_group"]["policy"] == "anti-affinity" and not story["server_group"]["refused"]
    )

    code, out, err = cli("explain", "--data-dir", str(tmp_path), "--request", "w2")
    assert code == 0, err
    assert "ServerGroupAffinityFilter removed 2" in out
    assert f"server group web (affinity): members then on {home} 1" in out
