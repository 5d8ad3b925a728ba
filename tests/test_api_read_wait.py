"""``GET /v1/groups/{id}`` and ``GET /v1/aggregates/{id}`` right after their
decisions: a decision goes out before the view commits it, so a caller
that asks at once is shown it once the view has committed what the log
held when it asked, not told it does not exist."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from berth.api import Api
from berth.api.credentials import Credentials, digest
from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from schemas.events import ServerGroupCreated
from tests.builders import provider
from tests.http_calls import call, serving

VIEW_LATE_S = 0.3


def _asked_before_commit(
    app: App, publish: Callable[[Publisher], object], path: str
) -> tuple[int, Any, float]:
    """GET ``path`` while the view is a step behind what ``publish``
    appended, the view committing it VIEW_LATE_S later: the status, the
    reply, and how long it took."""
    credentials = Credentials({digest("t-admin"): "admin"})
    writers = app.writers()
    publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
    publisher.publish(provider("n1", ts=1, VCPU=4))
    catch_up_all(writers)
    publish(publisher)  # in the log, not yet in the view
    late = threading.Timer(VIEW_LATE_S, catch_up_all, args=(writers,))
    with serving(Api(app, credentials=credentials)) as url:
        asked = time.monotonic()
        late.start()
        try:
            status, reply = call(url, path, token="t-admin")
        finally:
            late.join()
        waited = time.monotonic() - asked
        # what the view never will hold is still 404, without a wait
        asked = time.monotonic()
        never, _ = call(url, path.rsplit("/", 1)[0] + "/nobody", token="t-admin")
        assert never == 404 and time.monotonic() - asked < 1.0
    return status, reply, waited


def test_a_group_asked_before_the_view_commits_waits_for_it(tmp_path: Path) -> None:
    created = ServerGroupCreated(
        event_id="group-g1", ts_ms=2, partition_key="g1", group_id="g1", policy="affinity"
    )
    with App(Settings(data_dir=tmp_path / "data", partitions=2)) as app:
        status, reply, waited = _asked_before_commit(
            app, lambda publisher: publisher.publish([created]), "/v1/groups/g1"
        )
    assert status == 200, reply
    assert reply["group_id"] == "g1" and reply["policy"] == "affinity"
    assert waited >= VIEW_LATE_S * 0.9  # it was the wait that found it


def test_an_aggregate_asked_before_the_view_commits_waits_for_it(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path / "data", partitions=2)) as app:
        status, reply, waited = _asked_before_commit(
            app,
            lambda publisher: publisher.define_aggregate("az1", {"k": "v"}),
            "/v1/aggregates/az1",
        )
    assert status == 200, reply
    assert reply == {"aggregate_id": "az1", "metadata": {"k": "v"}, "members": []}
    assert waited >= VIEW_LATE_S * 0.9


def test_a_request_naming_a_group_before_the_view_commits_it_waits_for_it(
    tmp_path: Path,
) -> None:
    credentials = Credentials({digest("t-admin"): "admin"})
    created = ServerGroupCreated(
        event_id="group-g1", ts_ms=2, partition_key="g1", group_id="g1", policy="affinity"
    )
    with App(Settings(data_dir=tmp_path / "data", partitions=2)) as app:
        writers = app.writers()
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: 10**12)
        publisher.publish([created])  # in the log, not yet in the view
        late = threading.Timer(VIEW_LATE_S, catch_up_all, args=(writers,))
        request = {"request_id": "vm-1", "ts_ms": 0, "project_id": "p", "resources": {"VCPU": 1}}
        with serving(Api(app, credentials=credentials)) as url:
            asked = time.monotonic()
            late.start()
            try:
                named = {**request, "group_id": "g1"}
                status, reply = call(url, "/v1/requests", named, token="t-admin")
            finally:
                late.join()
            assert status == 202, reply  # submitted, not 409 "no server group g1"
            assert time.monotonic() - asked >= VIEW_LATE_S * 0.9
            # a group never created is still refused, without a wait
            asked = time.monotonic()
            nobody = {**request, "request_id": "vm-2", "group_id": "nobody"}
            status, reply = call(url, "/v1/requests", nobody, token="t-admin")
            assert status == 409 and "no server group nobody" in json.dumps(reply)
            assert time.monotonic() - asked < 1.0
