"""Scheduling policies set at run time: validated before they are appended,
picked up by a running scheduler at its next step, chosen per project, and
named in every answer they made."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import pytest

from berth.app import App, Settings
from berth.client import Answers, Decisions, Publisher
from consumers.policies import PolicyBook, PolicyError, publish_policy
from ledger.embedded import EmbeddedLog
from ledger.topics import DEFAULT_TOPICS
from scheduling.config import SchedulerConfig
from schemas.requests import PlacementRequest
from tests.builders import provider
from tests.conftest import Cli
from tests.processes import serving

PACKING = """
[weighers]
RAMWeigher = -1.0
"""

REFUSING = """
def instance_placement(request, candidates):
    if request.project_id == "frozen":
        return "project frozen"
    return None
"""


def _policy_end(data: Path) -> int:
    with closing(EmbeddedLog(data, read_only=True)) as log:
        return log.end_offset(DEFAULT_TOPICS.policies, 0)


@pytest.mark.parametrize(
    ("policy", "why"),
    [
        ({"filters": {"enabled": ["NoSuchFilter"]}}, "NoSuchFilter"),
        ({"weighers": {"RAMWeigher": "heavy"}}, "RAMWeigher"),
        ({"scriptlet": {"source": "def instance_placement(request, candidates)\n"}}, "star:1:"),
        ({"scriptlet": {"source": "def instance_placement(request):\n  return None\n"}}, "arg"),
        ({"scriptlet": {"path": "x.star"}}, "source, not path"),
        ({"tables": {}}, "unknown sections"),
    ],
)
def test_a_bad_policy_is_refused_at_the_edge_and_nothing_appended(
    tmp_path: Path, policy: dict[str, object], why: str
) -> None:
    with App(Settings(data_dir=tmp_path, partitions=2)) as app:
        before = app.log.end_offset(app.settings.topics.policies, 0)
        with pytest.raises(PolicyError, match=why):
            publish_policy(
                app.log, app.settings.topics, {"type": "policy_set", "name": "p", "policy": policy}
            )
        assert app.log.end_offset(app.settings.topics.policies, 0) == before


def test_each_version_is_compiled_once(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path, partitions=2)) as app:
        topics = app.settings.topics
        book = PolicyBook(app.log, topics, SchedulerConfig.default())
        assert book.default().label == "default@configuration"
        v1 = publish_policy(
            app.log, topics, {"type": "policy_set", "name": "default", "policy": {}}
        )
        assert book.refresh() == 1
        engine = book.default().engine
        assert book.refresh() == 0 and book.default().engine is engine
        assert book.default().label == f"default@{v1}"


def _request(rid: str, project: str = "p1", policy: str | None = None) -> PlacementRequest:
    return PlacementRequest(
        request_id=rid,
        ts_ms=0,
        project_id=project,
        resources={"VCPU": 1, "MEMORY_MB": 1024},
        policy=policy,
    )


def test_a_running_server_places_by_the_policy_in_force(tmp_path: Path, cli: Cli) -> None:
    data = tmp_path / "data"
    settings = Settings(data_dir=data, partitions=4)
    with serving(data, 4), App(settings, migrate=False) as app:
        edge = Publisher(app.log, settings.topics)
        decisions = Decisions(app.log, settings.topics)
        setup = [
            *provider("small", ts=edge.clock_ms(), VCPU=64, MEMORY_MB=8192),
            *provider("large", ts=edge.clock_ms(), VCPU=64, MEMORY_MB=65536),
        ]
        edge.publish(setup)
        assert decisions.wait([e.event_id for e in setup], 30) == []
        answers = Answers(app.log, settings.topics)

        def place(request: PlacementRequest) -> dict[str, object]:
            request = request.model_copy(update={"ts_ms": edge.clock_ms()})
            edge.submit([request])
            assert answers.wait([request.request_id], 30) == []
            return answers.found[request.request_id]

        spread = place(_request("before"))
        assert spread["reservations"][0][1] == "large"  # type: ignore[index]
        assert spread["policy"] == "default@configuration"

        policy_file = tmp_path / "packing.toml"
        policy_file.write_text(PACKING)
        code, out, err = cli(
            "policy", "set", "default", "--file", str(policy_file), "--data-dir", str(data)
        )
        assert code == 0, err
        version = json.loads(out)["version"]
        packed = place(_request("after"))
        assert packed["reservations"][0][1] == "small"  # type: ignore[index]
        assert packed["policy"] == f"default@{version}"

        # a project of its own: p2 keeps spreading once given a policy that does
        code, _, err = cli(
            "policy",
            "set",
            "spread",
            "--file",
            str(tmp_path / "none.toml"),
            "--data-dir",
            str(data),
        )
        assert code == 2 and "none.toml" in err  # no such file: nothing appended
        (tmp_path / "spread.toml").write_text("[weighers]\nRAMWeigher = 1.0\n")
        assert (
            cli(
                "policy",
                "set",
                "spread",
                "--file",
                str(tmp_path / "spread.toml"),
                "--data-dir",
                str(data),
            )[0]
            == 0
        )
        assert cli("policy", "use", "spread", "--project", "p2", "--data-dir", str(data))[0] == 0
        assert place(_request("p2-a", "p2"))["reservations"][0][1] == "large"  # type: ignore[index]
        assert place(_request("p1-b", "p1"))["reservations"][0][1] == "small"  # type: ignore[index]

        # a server group's member is a transaction of its own, placed by its
        # project's policy all the same, and its answer names it
        for group, policy in (("g-spread", "soft-anti-affinity"), ("g-pack", "soft-affinity")):
            code, _, err = cli(
                "group", "create", group, "--policy", policy, "--wait", "--data-dir", str(data)
            )
            assert code == 0, err
        member = place(_request("p2-g", "p2").model_copy(update={"group_id": "g-spread"}))
        assert member["batch"] is True and member["placed"] is True
        assert member["reservations"][0][1] == "large"  # type: ignore[index]
        assert str(member["policy"]).startswith("spread@")
        member = place(_request("p1-g", "p1").model_copy(update={"group_id": "g-pack"}))
        assert member["reservations"][0][1] == "small"  # type: ignore[index]
        assert member["policy"] == f"default@{version}"
        nowhere = place(_request("p2-x", "p2").model_copy(update={"group_id": "no-such"}))
        assert nowhere["placed"] is False and str(nowhere["policy"]).startswith("spread@")
        refused = place(_request("p1-c", "p1", policy="spread"))
        assert refused["placed"] is False
        assert "not the one project 'p1' may use" in str(refused["reason"])

        # LXD's habit: the default policy's scriptlet, set from the command line
        code, _, err = cli(
            "config", "set", "scheduler.scriptlet", REFUSING, "--data-dir", str(data)
        )
        assert code == 0, err
        frozen = place(_request("cold", "frozen"))
        assert frozen["placed"] is False
        assert "refused by the placement scriptlet: project frozen" in str(frozen["reason"])
        assert place(_request("warm", "p1"))["placed"] is True

        code, _, err = cli(
            "policy", "use", "spread", "--aggregate", "rack-7", "--data-dir", str(data)
        )
        assert code == 0, err

        code, out, _ = cli("policy", "list", "--json", "--data-dir", str(data))
        listing = json.loads(out)
        assert set(listing["policies"]) == {"default", "spread"}
        assert listing["projects"] == {"p2": "spread"}
        assert listing["aggregates"] == {"rack-7": "spread"}
        code, out, _ = cli("policy", "show", "default", "--json", "--data-dir", str(data))
        shown = json.loads(out)
        assert shown["policy"]["weighers"] == {"RAMWeigher": -1.0}
        assert "project frozen" in shown["policy"]["scriptlet"]["source"]


def test_headroom_is_measured_by_the_default_policy_in_force(tmp_path: Path, cli: Cli) -> None:
    data = tmp_path / "data"
    settings = Settings(data_dir=data, partitions=2)
    with App(settings) as app:
        Publisher(app.log, settings.topics).publish(provider("n1", ts=1, VCPU=8))
        from consumers.partition_writer import catch_up_all

        catch_up_all(app.writers())
    shape = ["headroom", "--resources", "VCPU=2", "--json", "--data-dir", str(data)]
    code, out, _ = cli(*shape)
    assert code == 0 and json.loads(out)["instances"] == 4
    capped = tmp_path / "capped.toml"
    capped.write_text(
        '[filters]\nenabled = ["ComputeFilter", "ResourceFilter", "IsolatedHostsFilter"]\n'
        '[filters.IsolatedHostsFilter]\nisolated_hosts = ["n1"]\nisolated_images = ["img"]\n'
    )
    assert cli("policy", "set", "default", "--file", str(capped), "--data-dir", str(data))[0] == 0
    code, out, _ = cli(*shape)
    assert code == 0 and json.loads(out)["instances"] == 0  # n1 kept for isolated images
