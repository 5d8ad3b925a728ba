"""bench.end_to_end --described's metrics agents: a process of their own
whose reports, each with its own timestamp and values, the writers decide."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from projections.view.tables import providers
from schemas.codec import decode_event
from schemas.events import MetricsReported
from tests.builders import provider
from tests.polling import wait_for

ORIGIN_MS = 1_700_000_000_000


def test_the_agents_report_every_period_each_report_its_own(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=2)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: ORIGIN_MS)
        publisher.publish([*provider("node-000000", ts=1, VCPU=4), *provider("node-000001", ts=1)])
        writers = app.writers()
        catch_up_all(writers)
        events = app.settings.topics.events
        before = [app.log.end_offset(events, p) for p in range(2)]
        command = ["bench.metrics_agents", "--log", str(settings.data_dir), "--providers", "2"]
        command += ["--origin-ms", str(ORIGIN_MS), "--every-ms", "100"]
        agents = subprocess.Popen(
            [sys.executable, "-m", *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert agents.stdout is not None and agents.stdin is not None
        assert agents.stdout.readline() == "ready\n"
        agents.stdin.write(f"{time.time()!r}\n")
        agents.stdin.flush()

        def appended() -> int:
            return sum(app.log.end_offset(events, p) - before[p] for p in range(2))

        # a report every 100 ms of log time from each of the 2 providers
        wait_for(lambda: appended() >= 8, "four periods of reports", timeout_s=30)
        out, _ = agents.communicate(timeout=30)
        sent = json.loads(out)["metrics_reports"]
        assert sent == appended()
        decoded = [
            decode_event(record.value)
            for p in range(2)
            for record in app.log.read(events, p, before[p], 1000)
        ]
        reports = [r for r in decoded if isinstance(r, MetricsReported)]
        assert len(reports) == len(decoded)  # nothing but reports
        assert len({r.event_id for r in reports}) == sent  # none sent again
        for pid in ("node-000000", "node-000001"):
            times = [r.ts_ms for r in reports if r.provider_id == pid]
            # one a period, from the origin on, each at its own time
            assert times == [
                ORIGIN_MS + 50 * (pid == "node-000001") + 100 * k for k in range(len(times))
            ]
        catch_up_all(writers)
        with app.engine.connect() as conn:
            query = select(providers.c.provider_id, providers.c.metrics_at_ms)
            latest = {pid: at_ms for pid, at_ms in conn.execute(query)}
    assert latest == {
        r.provider_id: max(q.ts_ms for q in reports if q.provider_id == r.provider_id)
        for r in reports
    }
