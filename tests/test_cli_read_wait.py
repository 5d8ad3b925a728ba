"""``berth history ID``, ``berth group show ID`` and ``berth aggregate show
ID`` right after an answer,
each run as its own process: the answer goes out before the view commits
what it decided, so the command waits for the view to commit what the log
held when asked, woken by the commit, rather than say the view holds
nothing of the id.

The view's commit is held back until the command waits for it: on SQLite a
waiter creates the file the view's commits ring (:mod:`projections.view.commits`)
before it reads the committed offset, so the test removes that file and
commits once the command has made it again. A command that does not wait
never makes it: it reads the view a step behind and exits first."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import PartitionWriter, catch_up_all
from schemas.events import ServerGroupCreated
from tests.builders import claim, provider
from tests.polling import wait_for


@dataclass
class Ledger:
    """A log and view in ``data``, and the writers that commit to the view."""

    data: Path
    app: App
    writers: list[PartitionWriter]
    publisher: Publisher

    @property
    def bell(self) -> Path:
        return Path(f"{self.app.engine.url.database}-commits")

    def berth(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """``berth ARGV... --data-dir DATA`` run to its end."""
        argv = (*argv, "--data-dir", str(self.data))
        command = [sys.executable, "-m", "berth.cli", *argv]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    def asked_before_commit(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """``berth ARGV...`` asked while the view is a step behind the log:
        the writers commit once it waits for them (or has exited)."""
        self.bell.unlink()  # made again by the command once it waits for a commit
        argv = (*argv, "--data-dir", str(self.data))
        command = [sys.executable, "-m", "berth.cli", *argv]
        asked = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: self.bell.exists() or asked.poll() is not None, "it to wait", 60)
            catch_up_all(self.writers)  # the view commits, and rings
            out, err = asked.communicate(timeout=60)
        finally:
            asked.kill()
            asked.wait()
        return subprocess.CompletedProcess(command, asked.returncode, out, err)


@contextmanager
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    data = tmp_path / "data"
    with App(Settings(data_dir=data, partitions=2)) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        held = Ledger(data, app, app.writers(), publisher)
        publisher.publish(provider("n1", ts=1, VCPU=4))
        catch_up_all(held.writers)
        yield held


def _reply(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_history_asked_before_the_view_commits_waits_for_it(tmp_path: Path) -> None:
    with ledger(tmp_path) as held:
        held.publisher.publish([claim("r1", "n1", ts=2, VCPU=1)])  # not yet in the view
        reply = _reply(held.asked_before_commit("history", "r1", "--json"))
        assert [r["reservation_id"] for r in reply["reservations"]] == ["r1"]
        assert reply["reservations"][0]["status"] == "held"

        # the view is not behind: an id it will never hold is answered at once
        held.bell.unlink()
        never = held.berth("history", "nobody")
        assert never.returncode == 1 and "holds nothing about 'nobody'" in never.stderr
        assert not held.bell.exists()  # it did not wait for a commit


def test_a_group_shown_before_the_view_commits_waits_for_it(tmp_path: Path) -> None:
    with ledger(tmp_path) as held:
        created = ServerGroupCreated(
            event_id="group-g1", ts_ms=2, partition_key="g1", group_id="g1", policy="affinity"
        )
        held.publisher.publish([created])  # not yet in the view
        reply = _reply(held.asked_before_commit("group", "show", "g1"))
        assert reply["group_id"] == "g1" and reply["policy"] == "affinity"

        held.bell.unlink()
        never = held.berth("group", "show", "nobody")
        assert never.returncode == 1 and "no such group" in never.stderr
        assert not held.bell.exists()


def test_an_aggregate_shown_before_the_view_commits_waits_for_it(tmp_path: Path) -> None:
    with ledger(tmp_path) as held:
        held.publisher.define_aggregate("az1", {"k": "v"})  # a copy in each partition
        reply = _reply(held.asked_before_commit("aggregate", "show", "az1"))
        assert reply == {"aggregate_id": "az1", "metadata": {"k": "v"}, "members": []}

        held.bell.unlink()
        never = held.berth("aggregate", "show", "nobody")
        assert never.returncode == 2 and "no such aggregate" in never.stderr
        assert not held.bell.exists()
