"""Server groups as records of the log: created and deleted by events, joined
through placements, their hard rules kept by the group's partition across
requests and partitions, through the real ledger, the view, a restart and a
replay."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from berth.api import Api
from berth.api.credentials import Credentials, digest
from berth.app import App, Settings
from berth.client import Publisher, PublishError
from berth.replay import replay
from consumers.partition_writer import catch_up_all
from consumers.server_groups import read_group
from ledger.partitioner import partition_for
from projections.view.tables import (
    outcomes,
    reservations,
    server_group_members,
    server_groups,
)
from scheduling.config import SchedulerConfig
from schemas.events import ClaimSet, ClaimSpec, Event, ServerGroupCreated, ServerGroupDeleted
from schemas.requests import BatchRequest, PlacementRequest
from tests.builders import provider
from tests.conftest import Cli
from tests.http_calls import call, deciding
from tests.http_calls import serving as serving_api
from tests.placements import placement_answers
from tests.polling import wait_for
from tests.processes import serving

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

    def place(self, *requests: PlacementRequest | BatchRequest) -> dict[str, Any]:
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
        batch = BatchRequest(
            batch_id="b", ts_ms=NOW_MS, members=(request("b0", group_id="nope2"),), mode="queue"
        )
        answers |= d.place(batch)
    assert "no server group nope" in answers["nothing"]["reason"]
    assert "g is affinity, the request says anti-affinity" in answers["wrong"]["reason"]
    assert answers["adhoc"]["placed"]  # a group never created: the old, ad-hoc meaning
    # refused, not queued: waiting would not make the group exist
    assert answers["b"]["status"] == "failed"
    assert answers["b"]["reason"] == "member 0 (b0): no server group nope2 (berth group create)"


def _member(rid: str, gid: str, on: str, project: str = "p") -> ClaimSet:
    spec = ClaimSpec(
        reservation_id=rid, consumer_id=rid, project_id=project, server_group=gid, group_host=on
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
    before = _group_tables(settings)
    result = replay(settings, verify=True, jobs=2)  # a rebuild, in a fresh file
    assert result.divergence is None and result.verified == result.outcomes
    assert _group_tables(settings) == before


def _group_tables(settings: Settings) -> tuple[Sequence[Any], ...]:
    """The view's server groups (but the offset of the batch that wrote
    each, which depends on how the log was cut into batches), members and
    the members' reservations."""
    with App(settings) as app, app.engine.connect() as conn:
        g, m, r = server_groups.c, server_group_members.c, reservations.c
        return (
            conn.execute(
                select(g.group_id, g.partition, g.policy, g.max_server_per_host).order_by(
                    g.group_id
                )
            ).all(),
            conn.execute(select(server_group_members).order_by(m.reservation_id)).all(),
            conn.execute(
                select(r.reservation_id, r.status, r.expires_at_ms)
                .join(server_group_members, m.reservation_id == r.reservation_id)
                .order_by(r.reservation_id)
            ).all(),
        )


def test_the_group_commands_and_a_request_through_berth_serve(tmp_path: Path, cli: Cli) -> None:
    data = tmp_path / "data"
    where = ["--data-dir", str(data)]
    with serving(data, 2):
        for pid in ("n1", "n2"):
            assert cli("provider", "register", pid, *where, "--wait")[0] == 0
            assert (
                cli("provider", "inventory", pid, "VCPU=4", "MEMORY_MB=4096", *where, "--wait")[0]
                == 0
            )
        code, out, _ = cli("group", "create", "web", "--policy", "anti-affinity", *where, "--wait")
        decided = [json.loads(line) for line in out.splitlines()]
        assert code == 0 and decided[-1]["kind"] == "applied" and decided[-1]["subject"] == "web"
        code, out, _ = cli("group", "create", "web", "--policy", "affinity", *where, "--wait")
        assert code == 1 and '"GROUP_EXISTS"' in out
        code, _, err = cli(
            "group", "create", "x", "--policy", "affinity", "--max-server-per-host", "2", *where
        )
        assert code == 2 and "max_server_per_host is a rule of the anti-affinity policy" in err
        asked = tmp_path / "asked.json"
        asked.write_text(
            "\n".join(
                json.dumps(request(f"r{i}", group_id="web").model_dump(mode="json"))
                for i in range(3)
            )
        )
        code, out, _ = cli("request", str(asked), *where, "--wait")
        answers = [json.loads(line) for line in out.splitlines() if '"placed"' in line]
        assert code == 1 and [a["placed"] for a in answers] == [True, True, False], out
        # the answer follows the writers' decisions, which they publish
        # before their view commits: the view may be a moment behind
        wait_for(
            lambda: (
                json.loads(cli("group", "show", "web", *where)[1])["hosts"] == {"n1": 1, "n2": 1}
            ),
            "both members in the view",
        )
        code, out, _ = cli("group", "show", "web", *where)
        assert code == 0 and json.loads(out)["policy"] == "anti-affinity"
        code, out, _ = cli("explain", "--resources", "VCPU=1", "--group", "web", *where)
        assert code == 1 and "n1: anti-affinity group web: 1 member(s) here" in out
        assert cli("headroom", "--resources", "VCPU=1", "--group", "nope", *where)[0] == 2
        code, out, _ = cli("group", "list", *where)
        assert [json.loads(line)["group_id"] for line in out.splitlines()] == ["web"]
        code, out, _ = cli("group", "delete", "web", *where, "--wait")
        kinds = [json.loads(line)["kind"] for line in out.splitlines() if '"kind"' in line]
        assert code == 0 and kinds == ["released", "released", "applied"]
        wait_for(lambda: cli("group", "show", "web", *where)[0] == 1, "the group gone")
        assert cli("group", "delete", "web", *where)[0] == 2


def test_the_api_creates_shows_and_deletes_a_group(tmp_path: Path) -> None:
    tokens = {"admin": "t-admin", "operator": "t-operator", "project:p": "t-p"}
    credentials = Credentials({digest(token): role for role, token in tokens.items()})
    with (
        App(Settings(data_dir=tmp_path / "data", partitions=2)) as app,
        deciding(app),
        serving_api(Api(app, credentials=credentials)) as url,
    ):
        setup = [
            json.loads(e.model_dump_json()) for e in provider("n1", ts=1, VCPU=4, MEMORY_MB=4096)
        ]
        assert call(url, "/v1/events?wait=30", setup, token="t-operator")[0] == 200
        body = {"policy": "affinity"}
        status, reply = call(url, "/v1/groups/g1?wait=30", body, token="t-operator", method="PUT")
        assert status == 200
        ((outcome,),) = reply["decisions"].values()
        assert outcome["kind"] == "applied" and outcome["subject"] == "g1"
        theirs = {**body, "project_id": "q"}  # a project makes only its own groups
        status, _ = call(url, "/v1/groups/g2", theirs, token="t-p", method="PUT")
        assert status == 403
        status, reply = call(
            url, "/v1/groups/g2", {"policy": "sideways"}, token="t-admin", method="PUT"
        )
        assert status == 422 and reply["errors"][0]["pointer"] == "/policy"
        nowhere = json.loads(request("r0", group_id="g9").model_dump_json())
        status, reply = call(url, "/v1/requests", nowhere, token="t-p")
        assert status == 409 and reply["errors"][0]["pointer"] == "/group_id"
        assert "no server group g9" in reply["errors"][0]["detail"]
        # a decision is published before its view commits: the reads may lag
        wait_for(lambda: call(url, "/v1/groups/g1", token="t-p")[0] == 200, "g1 in the view")
        asked = json.loads(request("r1", group_id="g1").model_dump_json())
        status, reply = call(url, "/v1/requests?wait=30", asked, token="t-p")
        assert status == 200 and reply["answers"]["r1"]["placed"]
        wait_for(
            lambda: call(url, "/v1/groups/g1", token="t-p")[1].get("hosts") == {"n1": 1},
            "r1 a member in the view",
        )
        status, shown = call(url, "/v1/groups/g1", token="t-p")
        assert shown["members"][0]["consumer_id"] == "r1.0.0"
        status, listed = call(url, "/v1/groups", token="t-p")
        assert status == 200 and listed == {
            "groups": [
                {
                    "group_id": "g1",
                    "policy": "affinity",
                    "max_server_per_host": 1,
                    "project_id": None,
                    "user_id": None,
                }
            ]
        }
        status, reply = call(url, "/v1/groups/g1?wait=30", token="t-operator", method="DELETE")
        assert status == 200
        wait_for(lambda: call(url, "/v1/groups/g1", token="t-p")[0] == 404, "g1 gone")
        assert call(url, "/v1/groups/g1", token="t-operator", method="DELETE")[0] == 404


def test_the_edge_refuses_a_membership_keyed_to_another_partition(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path / "data", partitions=4)) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        key = next(
            k for k in ("a", "b", "c", "d", "e") if edge.partition_of(k) != edge.partition_of("web")
        )
        elsewhere = _member("m1", "web", "n1").model_copy(update={"partition_key": key})
        with pytest.raises(PublishError, match="claim m1: server group web is in partition"):
            edge.publish([elsewhere])
        assert all(app.log.end_offset(app.settings.topics.events, p) == 0 for p in range(4))


def owned(gid: str, project: str | None, acting: str | None = None) -> ServerGroupCreated:
    return created(gid, "affinity").model_copy(
        update={"project_id": project, "acting_project": acting, "event_id": f"own-{gid}"}
    )


def test_a_group_belongs_to_its_project_in_the_log(tmp_path: Path) -> None:
    """Only the group's project joins it, through the scheduler or a claim
    already in the log; a project publishes only its own groups' creation
    and deletion; a shared group (no project) is anyone's to join."""
    settings = Settings(data_dir=tmp_path / "data", partitions=2)
    with App(settings) as app:
        d = Deployment(app)
        _cluster(d, count=2)
        d.publish(
            owned("mine", "p", acting="p"),
            owned("shared", None),
            owned("theirs", "p", acting="q"),  # q may not make p's group
            _member("q-claim", "mine", "n0", project="q"),
        )
        answers = d.place(
            request("from-p", group_id="mine"),
            request("from-q", group_id="mine").model_copy(update={"project_id": "q"}),
            request("q-shared", group_id="shared").model_copy(update={"project_id": "q"}),
        )
        gone = deleted("mine", ts=3)
        d.publish(gone.model_copy(update={"acting_project": "q"}))
        refused_delete = d.decisions(["mine"])["mine"]
        d.publish(gone.model_copy(update={"acting_project": "p", "event_id": "p-deletes"}))
        decided = d.decisions(["theirs", "q-claim", "mine"])
    assert answers["from-p"]["placed"] and answers["q-shared"]["placed"]
    assert not answers["from-q"]["placed"]
    assert answers["from-q"]["reason"] == "server group mine is another project's, not project q's"
    assert refused_delete == ("rejected", "PROJECT_MISMATCH")
    assert decided == {
        "theirs": ("rejected", "PROJECT_MISMATCH"),
        "q-claim": ("rejected", "GROUP_OF_ANOTHER_PROJECT"),
        "mine": ("applied", ""),
    }
    result = replay(settings, verify=True, jobs=2)
    assert result.divergence is None and result.verified == result.outcomes


def test_the_api_and_cli_keep_a_projects_groups_its_own(tmp_path: Path, cli: Cli) -> None:
    tokens = {"operator": "t-operator", "project:p": "t-p", "project:q": "t-q"}
    credentials = Credentials({digest(token): role for role, token in tokens.items()})
    data = tmp_path / "data"
    with (
        App(Settings(data_dir=data, partitions=2)) as app,
        deciding(app),
        serving_api(Api(app, credentials=credentials)) as url,
    ):
        setup = [
            json.loads(e.model_dump_json()) for e in provider("n1", ts=1, VCPU=4, MEMORY_MB=4096)
        ]
        assert call(url, "/v1/events?wait=30", setup, token="t-operator")[0] == 200
        body: dict[str, Any] = {"policy": "affinity", "user_id": "alice"}
        status, reply = call(url, "/v1/groups/pg?wait=30", body, token="t-p", method="PUT")
        assert status == 200, reply
        assert [o["kind"] for o in next(iter(reply["decisions"].values()))] == ["applied"]
        mine = {**body, "project_id": "p"}
        assert call(url, "/v1/groups/qg", mine, token="t-q", method="PUT")[0] == 403
        status, _ = call(
            url, "/v1/groups/sg?wait=30", {"policy": "affinity"}, token="t-operator", method="PUT"
        )
        assert status == 200
        wait_for(lambda: call(url, "/v1/groups/pg", token="t-p")[0] == 200, "pg in the view")
        wait_for(lambda: call(url, "/v1/groups/sg", token="t-q")[0] == 200, "sg in the view")
        shown = call(url, "/v1/groups/pg", token="t-p")[1]
        assert (shown["project_id"], shown["user_id"]) == ("p", "alice")
        # to q, p's group does not exist
        assert call(url, "/v1/groups/pg", token="t-q")[0] == 404
        assert [g["group_id"] for g in call(url, "/v1/groups", token="t-q")[1]["groups"]] == ["sg"]
        assert call(url, "/v1/groups/pg", token="t-q", method="DELETE")[0] == 404
        assert call(url, "/v1/groups/sg", token="t-q", method="DELETE")[0] == 403
        asked = json.loads(
            request("r-q", group_id="pg").model_copy(update={"project_id": "q"}).model_dump_json()
        )
        status, reply = call(url, "/v1/requests", asked, token="t-q")
        assert status == 409 and reply["errors"][0]["pointer"] == "/group_id"
        assert "no server group pg of project q" in reply["errors"][0]["detail"]
        # the CLI's edge, on the same log and view
        where = ["--data-dir", str(data)]
        code, out, _ = cli("group", "list", "--project", "q", *where)
        assert [json.loads(line)["group_id"] for line in out.splitlines()] == ["sg"]
        asked_file = tmp_path / "asked.json"
        asked_file.write_text(json.dumps(asked) + "\n")
        code, out, err = cli("request", str(asked_file), *where)
        assert code == 1 and out == ""
        assert "line 1: r-q: server group pg is another project's, not project q's" in err
        code, _, err = cli("group", "create", "x", "--policy", "affinity", "--user", "u", *where)
        assert code == 2 and "give project_id" in err
        status, _ = call(url, "/v1/groups/pg?wait=30", token="t-p", method="DELETE")
        assert status == 200
