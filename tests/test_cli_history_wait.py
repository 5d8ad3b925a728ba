"""``berth history ID`` right after an answer, run as its own process: the
answer goes out before the view commits what it decided, so the command
waits for the view to commit what the log held when asked, woken by the
commit, rather than say the view holds nothing of the id.

The view's commit is held back until the command waits for it: on SQLite a
waiter creates the file the view's commits ring (:mod:`projections.view.commits`)
before it reads the committed offset, so the test removes that file and
commits once the command has made it again. A command that does not wait
never makes it: it reads the view a step behind and exits first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from tests.builders import claim, provider
from tests.polling import wait_for


def _history(data: Path, subject: str) -> subprocess.Popen[str]:
    argv = ["history", subject, "--data-dir", str(data), "--json"]
    return subprocess.Popen(
        [sys.executable, "-m", "berth.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_history_asked_before_the_view_commits_waits_for_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with App(Settings(data_dir=data, partitions=1)) as app:
        writers = app.writers()
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        publisher.publish(provider("n1", ts=1, VCPU=4))
        catch_up_all(writers)
        bell = Path(f"{app.engine.url.database}-commits")
        bell.unlink()  # made again by the command once it waits for a commit
        publisher.publish([claim("r1", "n1", ts=2, VCPU=1)])  # in the log, not yet in the view

        asked = _history(data, "r1")
        wait_for(lambda: bell.exists() or asked.poll() is not None, "the command to wait", 60)
        catch_up_all(writers)  # the view commits r1, and rings
        out, err = asked.communicate(timeout=60)
        assert asked.returncode == 0, err
        reply = json.loads(out)
        assert [r["reservation_id"] for r in reply["reservations"]] == ["r1"]
        assert reply["reservations"][0]["status"] == "held"

        # the view is not behind: an id it will never hold is answered at once
        bell.unlink()
        never = _history(data, "nobody")
        out, err = never.communicate(timeout=60)
        assert never.returncode == 1 and "holds nothing about 'nobody'" in err
        assert not bell.exists()  # it did not wait for a commit
