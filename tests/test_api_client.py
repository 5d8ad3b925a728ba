"""The typed client, and the CLI driving a remote Berth with ``--api URL``
(no data directory of its own), against a live ``berth serve --api``."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.api.client import ApiClient, ApiProblem
from schemas.requests import PlacementRequest
from tests.builders import claim, provider
from tests.polling import wait_for
from tests.processes import berth_running
from tests.test_api import _free_port, _listening


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("client") / "data"
    port = _free_port()
    argv = ("serve", "--data-dir", str(data), "--partitions", "2", "--idle-wait-s", "0.005")
    with berth_running(*argv, "--api", f"127.0.0.1:{port}", ready=lambda: _listening(port)):
        yield f"http://127.0.0.1:{port}"


def test_the_typed_client(url: str) -> None:
    now = int(time.time() * 1000)
    with ApiClient(url) as berth:
        reply = berth.publish(provider("c1", ts=now, VCPU=8), wait=30)
        assert reply.decisions is not None and reply.pending is None
        assert {o.kind for d in reply.decisions.values() for o in d} == {"applied"}
        request = PlacementRequest(
            request_id="q1", ts_ms=now, project_id="p", resources={"VCPU": 2}
        )
        answered = berth.submit([request], wait=30)
        assert answered.answers is not None and answered.answers["q1"]["placed"] is True
        rid = answered.answers["q1"]["reservations"][0][0]
        assert berth.history(rid).reservations[0]["project_id"] == "p"
        assert berth.headroom({"VCPU": 2}).instances == 3
        assert berth.queue() == {}
        assert berth.status(lag=True)["behind"] >= 0
        with pytest.raises(ApiProblem) as refused:
            berth.history("nobody")
        assert refused.value.status == 404 and refused.value.problem["title"] == "Not Found"
        # the stream starts at the end once it connects: claims go on being
        # made from another thread until the first is streamed
        streamed = threading.Event()

        def claims() -> None:
            with ApiClient(url) as other:
                for n in itertools.count():
                    if streamed.wait(0.2):
                        return
                    reply = other.publish([claim(f"streamed-{n}", "c1", ts=now, VCPU=1)])
                    assert reply.decisions is None

        publishing = threading.Thread(target=claims)
        publishing.start()
        stream = berth.stream("outcomes")
        try:
            (event_id, outcome) = next(stream)
        finally:
            streamed.set()
            publishing.join(timeout=30)
            stream.close()
        assert outcome["subject"].startswith("streamed-") and outcome["kind"] == "accepted"
        assert event_id.count(":") == 2  # partition:offset of both partitions


def test_the_cli_drives_a_remote_berth(url: str, tmp_path: Path) -> None:
    def berth(*argv: str) -> tuple[int, str, str]:
        # in an empty directory, the default data directory's parent
        done = subprocess.run(
            [sys.executable, "-m", "berth.cli", *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if k != "BERTH_DATA_DIR"},
        )
        return done.returncode, done.stdout, done.stderr

    code, out, err = berth("provider", "register", "remote-1", "--api", url, "--wait")
    assert code == 0, err
    decision = json.loads(out.splitlines()[1])
    assert decision["kind"] == "applied" and decision["subject"] == "remote-1"
    code, out, _ = berth("history", "remote-1", "--api", url)
    assert code == 0 and json.loads(out)["provider"]["provider_id"] == "remote-1"
    code, out, _ = berth("status", "--api", url, "--lag")
    assert code == 0 and "behind" in json.loads(out)
    assert berth("queue", "--api", url)[:2] == (0, "{}\n")
    code, _, err = berth("history", "nobody", "--api", url)
    assert code == 1 and "the view holds nothing about 'nobody'" in err
    code, out, err = berth(
        "group", "create", "remote-g", "--policy", "anti-affinity", "--api", url, "--wait"
    )
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["kind"] == "applied"
    code, out, _ = berth(
        "group", "create", "remote-g", "--policy", "affinity", "--api", url, "--wait"
    )
    assert code == 1 and "GROUP_EXISTS" in out
    wait_for(lambda: berth("group", "show", "remote-g", "--api", url)[0] == 0, "remote-g shown")
    code, out, _ = berth("group", "show", "remote-g", "--api", url)
    assert json.loads(out)["policy"] == "anti-affinity"
    code, out, _ = berth("group", "list", "--api", url)
    assert [json.loads(line)["group_id"] for line in out.splitlines()] == ["remote-g"]
    code, out, _ = berth("group", "delete", "remote-g", "--api", url, "--wait")
    assert code == 0 and json.loads(out.splitlines()[-1])["kind"] == "applied"
    assert list(tmp_path.iterdir()) == []  # no data directory made
