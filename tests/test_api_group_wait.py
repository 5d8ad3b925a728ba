"""``GET /v1/groups/{id}`` right after the group's decision: the decision
goes out before the view commits it, so a caller that asks at once is
shown the group once the view has committed what the log held when it
asked, not told it does not exist."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from berth.api import Api
from berth.api.credentials import Credentials, digest
from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from schemas.events import ServerGroupCreated
from tests.builders import provider
from tests.http_calls import call, serving

VIEW_LATE_S = 0.3


def test_a_group_asked_before_the_view_commits_waits_for_it(tmp_path: Path) -> None:
    credentials = Credentials({digest("t-admin"): "admin"})
    with App(Settings(data_dir=tmp_path / "data", partitions=1)) as app:
        writers = app.writers()
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        publisher.publish(provider("n1", ts=1, VCPU=4))
        catch_up_all(writers)
        created = ServerGroupCreated(
            event_id="group-g1", ts_ms=2, partition_key="g1", group_id="g1", policy="affinity"
        )
        publisher.publish([created])  # in the log, not yet in the view
        late = threading.Timer(VIEW_LATE_S, catch_up_all, args=(writers,))
        with serving(Api(app, credentials=credentials)) as url:
            asked = time.monotonic()
            late.start()
            try:
                status, reply = call(url, "/v1/groups/g1", token="t-admin")
            finally:
                late.join()
            waited = time.monotonic() - asked
            assert status == 200, reply
            assert reply["group_id"] == "g1" and reply["policy"] == "affinity"
            assert waited >= VIEW_LATE_S * 0.9  # it was the wait that found it
            # what the view never will hold is still 404, without a wait
            asked = time.monotonic()
            status, _ = call(url, "/v1/groups/nobody", token="t-admin")
            assert status == 404 and time.monotonic() - asked < 1.0
