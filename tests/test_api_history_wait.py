"""``GET /v1/history/{id}`` right after an answer: the answer goes out
before the view commits what it decided, so a caller that asks at once is
shown it once the view has committed what the log held when it asked, not
told it does not exist."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from berth.api import Api
from berth.api.credentials import Credentials, digest
from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from tests.builders import claim, provider
from tests.http_calls import call, serving

VIEW_LATE_S = 0.3


def test_a_history_asked_before_the_view_commits_waits_for_it(tmp_path: Path) -> None:
    credentials = Credentials({digest("t-admin"): "admin"})
    with App(Settings(data_dir=tmp_path / "data", partitions=1)) as app:
        writers = app.writers()
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        publisher.publish(provider("n1", ts=1, VCPU=4))
        catch_up_all(writers)
        publisher.publish([claim("r1", "n1", ts=2, VCPU=1)])  # in the log, not yet in the view
        late = threading.Timer(VIEW_LATE_S, catch_up_all, args=(writers,))
        with serving(Api(app, credentials=credentials)) as url:
            asked = time.monotonic()
            late.start()
            try:
                status, reply = call(url, "/v1/history/r1", token="t-admin")
            finally:
                late.join()
            waited = time.monotonic() - asked
            assert status == 200, reply
            assert reply["reservations"][0]["status"] == "held"
            assert waited >= VIEW_LATE_S * 0.9  # it was the wait that found it
            # what the view never will hold is still 404, without a wait
            asked = time.monotonic()
            status, _ = call(url, "/v1/history/nobody", token="t-admin")
            assert status == 404 and time.monotonic() - asked < 1.0
