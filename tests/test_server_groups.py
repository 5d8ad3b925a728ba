"""Server groups as records of the log: created and deleted by events, joined
through placements, their hard rules kept by the group's partition across
requests and partitions, through the real ledger, the view, a restart and a
replay."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from berth.replay import replay
from consumers.partition_writer import catch_up_all
from consumers.server_groups import read_group
from ledger.partitioner import partition_for
from projections.view.tables import outcomes
from scheduling.config import SchedulerConfig
from schemas.events import ClaimSet, ClaimSpec, Event, ServerGroupCreated, ServerGroupDeleted
from schemas.requests import PlacementRequest
from tests.builders import provider
from tests.placements import placement_answers

NOW_MS = 10**12
CONFIG = SchedulerConfig.from_mapping(
    {
        "filters": {
            "enabled": [
                "ComputeFilter",
                "ResourceFilter",
                "ServerGroupAffinityFilter",
                "ServerGroupAntiAffinityFilter",
            ]
        },
        # spread: without a group, each request goes to the emptiest provider
        "weighers": {"RAMWeigher": {"multiplier": 1.0}},
    }
)


def created(gid: str, policy: str, most: int | None = None, ts: int = 1) -> ServerGroupCreated:
    return ServerGroupCreated(
        event_id=f"create-{gid}-{ts}",
        ts_ms=ts,
        partition_key=gid,
        group_id=gid,
        policy=policy,  # type: ignore[arg-type]
        max_server_per_host=most,
    )


def deleted(gid: str, ts: int = 2) -> ServerGroupDeleted:
    return ServerGroupDeleted(
        event_id=f"delete-{gid}-{ts}", ts_ms=ts, partition_key=gid, group_id=gid
    )


def request(rid: str, **fields: Any) -> PlacementRequest:
    return PlacementRequest(
        request_id=rid,
        ts_ms=NOW_MS,
        project_id="p",
        resources={"VCPU": 1, "MEMORY_MB": 512},
        lease_ms=10**8,
        **fields,
    )


def _cluster(d: Deployment, count: int = 4) -> list[str]:
    pids = [f"n{i}" for i in range(count)]
    d.publish(*[e for pid in pids for e in provider(pid, ts=1, VCPU=16, MEMORY_MB=16384)])
    return pids


class Deployment:
    """An app's writers and scheduler worker, made once (each owns its partitions)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        self.writers = app.writers()
        self.worker = app.scheduler_worker(CONFIG, self.catch_up)

    def catch_up(self) -> None:
        catch_up_all(self.writers)

    def place(self, *requests: PlacementRequest) -> dict[str, Any]:
        for r in requests:  # one at a time: each sees the ones before it in the view
            self.edge.submit([r])
            while self.worker.step():
                pass
        return {a["request_id"]: a for a in placement_answers(self.app)}

    def publish(self, *events: Event) -> None:
        self.edge.publish(list(events))
        self.catch_up()

    def decisions(self, subjects: list[str]) -> dict[str, tuple[str, str]]:
        """Subject -> (kind, first reason's code) of its last outcome in the view."""
        o = outcomes.c
        found: dict[str, tuple[str, str]] = {}
        with self.app.engine.connect() as conn:
            rows = conn.execute(
                select(o.subject, o.kind, o.reasons)
                .where(o.subject.in_(subjects))
                .order_by(o.partition, o["offset"], o.seq)
            )
            for row in rows:
                found[row.subject] = (row.kind, row.reasons[0]["code"] if row.reasons else "")
        return found


def _hosts(answer: dict[str, Any]) -> list[str]:
    return [pid for _, pid in answer["reservations"]]


def test_an_affinity_group_keeps_every_request_on_one_provider_across_partitions(
    tmp_path: Path,
) -> None:
    with App(Settings(data_dir=tmp_path / "data", partitions=4)) as app:
        d = Deployment(app)
        _cluster(d)
        d.publish(created("web", "affinity"))
        answers = d.place(*[request(f"r{i}", group_id="web") for i in range(4)])
        where = {rid: _hosts(a) for rid, a in answers.items()}
        # without the group, RAMWeigher would have spread them over four providers
        assert len({h for hs in where.values() for h in hs}) == 1, where
        (host,) = where["r0"]
        group = read_group(app.engine, "web")
        assert group is not None and group.rule.partition == partition_for(b"web", 4)
        assert Counter(m.provider_id for m in group.members) == {host: 4}
        # the membership lives in the group's partition, beside or apart from the compute
        assert all(a["status"] == "committed" for a in answers.values())
        plain = d.place(request("plain"))["plain"]
        assert _hosts(plain) != [host]  # spread as before: a request without a group


def test_anti_affinity_holds_max_server_per_host_and_a_full_group_is_refused(
    tmp_path: Path,
) -> None:
    with App(Settings(data_dir=tmp_path / "data", partitions=4)) as app:
        d = Deployment(app)
        _cluster(d, count=3)
        d.publish(created("db", "anti-affinity", most=2))
        answers = d.place(*[request(f"r{i}", group_id="db") for i in range(7)])
        placed = [a for a in answers.values() if a["placed"]]
        assert len(placed) == 6
        assert sorted(Counter(h for a in placed for h in _hosts(a)).values()) == [2, 2, 2]
        assert not answers["r6"]["placed"]
        group = read_group(app.engine, "db")
        assert group is not None and len(group.members) == 6


def test_members_leave_when_released_and_the_group_when_deleted(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path / "data", partitions=4)) as app:
        d = Deployment(app)
        _cluster(d, count=2)
        d.publish(created("solo", "anti-affinity"))
        answers = d.place(*[request(f"r{i}", group_id="solo") for i in range(3)])
        assert [answers[f"r{i}"]["placed"] for i in range(3)] == [True, True, False]
        d.edge.release_consumer("r0.0.0")  # the instance goes: compute and membership
        d.catch_up()
        group = read_group(app.engine, "solo")
        assert group is not None and len(group.members) == 1
        assert d.place(request("r9", group_id="solo"))["r9"]["placed"]
        d.publish(deleted("solo", ts=5))
        assert read_group(app.engine, "solo") is None
        gone = d.place(request("r10", group_id="solo"))["r10"]
        assert not gone["placed"] and "no server group solo" in gone["reason"]


def test_a_request_that_names_no_group_or_the_wrong_policy_is_refused(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path / "data", partitions=2)) as app:
        d = Deployment(app)
        _cluster(d, count=2)
        d.publish(created("g", "affinity"))
        answers = d.place(
            request("nothing", group_id="nope"),
            request("wrong", group_id="g", group_policy="anti-affinity"),
            request("adhoc", group_id="x", group_policy="anti-affinity"),
        )
    assert "no server group nope" in answers["nothing"]["reason"]
    assert "g is affinity, the request says anti-affinity" in answers["wrong"]["reason"]
    assert answers["adhoc"]["placed"]  # a group never created: the old, ad-hoc meaning


def _member(rid: str, gid: str, on: str) -> ClaimSet:
    spec = ClaimSpec(
        reservation_id=rid, consumer_id=rid, project_id="p", server_group=gid, group_host=on
    )
    return ClaimSet(event_id=rid, ts_ms=NOW_MS, partition_key=gid, claims=(spec,))


def test_the_writer_refuses_a_member_that_breaks_the_rule_after_a_restart(
    tmp_path: Path,
) -> None:
    """The group's state comes back from the view: a claim that would put an
    affinity group's member elsewhere is refused by the restarted writer, and
    the whole log replays to the same outcomes."""
    settings = Settings(data_dir=tmp_path / "data", partitions=4)
    with App(settings) as app:
        d = Deployment(app)
        _cluster(d)
        d.publish(created("web", "affinity"), created("spread", "anti-affinity"))
        answers = d.place(request("a", group_id="web"), request("b", group_id="spread"))
        (host,) = _hosts(answers["a"])
        (spread_host,) = _hosts(answers["b"])
    with App(settings) as app:  # a restart: every writer loads its state from the view
        d = Deployment(app)
        other = "n3" if host != "n3" else "n2"
        d.publish(
            _member("elsewhere", "web", other),
            _member("beside", "web", host),
            _member("crowd", "spread", spread_host),
            created("web", "affinity", ts=3),
            created("web", "anti-affinity", ts=4),
        )
        decided = d.decisions(["elsewhere", "beside", "crowd", "web"])
        placed = d.place(request("c", group_id="web"))["c"]
    assert decided == {
        "elsewhere": ("rejected", "AFFINITY_CONFLICT"),
        "beside": ("accepted", ""),
        "crowd": ("rejected", "ANTI_AFFINITY_CONFLICT"),
        "web": ("rejected", "GROUP_EXISTS"),
    }
    assert _hosts(placed) == [host]
    result = replay(settings, verify=True)
    assert result.divergence is None and result.verified == result.outcomes
