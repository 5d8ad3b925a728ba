"""``berth metrics``: the log's and the view's state served to Prometheus,
read back over HTTP with the Prometheus client's own parser, on SQLite and
PostgreSQL."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from berth.app import App, Settings
from berth.cli import main
from berth.client import Publisher
from berth.metrics import LedgerCollector, serve
from consumers.partition_writer import catch_up_all
from consumers.queue_projector import QueueProjector
from consumers.snapshot_source import snapshot_from_view
from ledger.log import Append
from ledger.partitioner import partition_for
from scheduling.config import SchedulerConfig
from scheduling.headroom import headroom
from scheduling.model import Request
from schemas.requests import BatchRequest, PlacementRequest
from tests.builders import claim, consume, provider, release
from tests.polling import wait_for
from tests.prometheus import Samples, by_label, parse

NOW_MS = 10**12
LISTEN_ANY = ("--listen", "127.0.0.1:0")


def scrape(url: str, path: str = "/metrics") -> Samples:
    with urllib.request.urlopen(url + path, timeout=10) as response:
        assert response.status == 200
        return parse(response.read().decode())


def _queued_batch(app: App, publisher: Publisher) -> None:
    """A queue-mode batch of three 8-VCPU instances that cannot fit, answered
    ``queued`` by a scheduler worker and folded into the view's queue depth,
    and a request for 1 VCPU that it places."""
    writers = app.writers()
    worker = app.scheduler_worker(
        SchedulerConfig.default(), lambda: catch_up_all(writers), publisher
    )
    member = PlacementRequest(
        request_id="ci-m", ts_ms=NOW_MS, project_id="ci", resources={"VCPU": 8}, num_instances=3
    )
    one = PlacementRequest(request_id="one", ts_ms=NOW_MS, project_id="p", resources={"VCPU": 1})
    publisher.submit(
        [one, BatchRequest(batch_id="ci", ts_ms=NOW_MS, members=(member,), mode="queue")]
    )
    worker.step()
    assert QueueProjector(app.log, app.settings.topics, app.engine).catch_up() == 2


def test_a_scrape_shows_progress_usage_and_the_queue(tmp_path: Path, view_url: str) -> None:
    settings = Settings(data_dir=tmp_path / "data", db_url=view_url, partitions=2)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        publisher.publish(
            [
                *provider("n1", ts=1_000, VCPU=8, MEMORY_MB=4096),
                *provider("n2", ts=1_000, VCPU=4),
                claim("r1", "n1", ts=2_000, VCPU=2, MEMORY_MB=512),
                claim("r2", "n2", ts=3_000, VCPU=4),
                consume("r2", ts=4_000).model_copy(update={"partition_key": "n2"}),
                claim("r3", "n2", ts=4_000, VCPU=1),  # n2 is full: rejected
            ]
        )
        ends = {str(p): app.log.end_offset(settings.topics.events, p) for p in range(2)}
        two_vcpu = Request("h", {"VCPU": 2})
        placement = SchedulerConfig.default().engine()
        collector = LedgerCollector(
            app.log, app.engine, settings.topics, 2, shapes=[two_vcpu], placement=placement
        )
        host, port, _ = serve(collector, "127.0.0.1", 0)
        url = f"http://{host}:{port}"

        def room() -> dict[str, float]:
            """The headroom as a full read of the view measures it."""
            measured = headroom(placement, snapshot_from_view(app.engine), two_vcpu)
            return {"VCPU=2": measured.instances}

        before = scrape(url)
        assert before[("berth_view_up", ())] == 1
        assert by_label(before, "berth_log_end_offset", "partition") == ends
        assert by_label(before, "berth_view_behind_records", "partition") == ends
        assert by_label(before, "berth_partition_clock_seconds", "partition") == {}

        catch_up_all(app.writers())
        after = scrape(url)
        assert by_label(after, "berth_view_behind_records", "partition") == {"0": 0, "1": 0}
        assert by_label(after, "berth_view_applied_offset", "partition") == ends
        clocks = by_label(after, "berth_partition_clock_seconds", "partition")
        assert clocks == {str(partition_for(b"n1", 2)): 2.0, str(partition_for(b"n2", 2)): 4.0}
        assert by_label(after, "berth_dead_letters_total", "partition") == {"0": 0, "1": 0}
        assert by_label(after, "berth_resource_capacity", "resource_class") == {
            "VCPU": 12,
            "MEMORY_MB": 4096,
        }
        assert by_label(after, "berth_resource_held", "resource_class") == {
            "VCPU": 2,
            "MEMORY_MB": 512,
        }
        assert by_label(after, "berth_resource_consumed", "resource_class")["VCPU"] == 4
        assert by_label(after, "berth_resource_free", "resource_class")["VCPU"] == 6
        assert by_label(after, "berth_providers", "state") == {
            "enabled": 2,
            "disabled": 0,
            "offline": 0,
            "evacuating": 0,
        }
        statuses = by_label(after, "berth_reservations", "status")
        assert statuses == {
            "held": 1,
            "consumed": 1,
            "pending": 0,
            "released": 0,
            "expired": 0,
            "aborted": 0,
        }
        assert after[("berth_overcommitted_providers", ())] == 0
        assert by_label(after, "berth_queue_instances", "shape") == {}
        # n1: 6 VCPU free, n2 none
        assert by_label(after, "berth_headroom_instances", "shape") == {"VCPU=2": 3} == room()
        assert by_label(after, "berth_headroom_providers", "shape") == {"VCPU=2": 1}

        _queued_batch(app, publisher)
        queued = scrape(url)
        assert by_label(queued, "berth_queue_instances", "shape") == {"VCPU=8": 3}
        assert by_label(queued, "berth_queue_batches", "shape") == {"VCPU=8": 1}
        # the exporter's snapshot follows the view's changes since the last scrape
        assert by_label(queued, "berth_headroom_instances", "shape") == room()
        answers = {
            (labels["kind"], labels["result"]): n
            for (name, raw), n in queued.items()
            if name == "berth_placement_answers_total"
            for labels in [dict(raw)]
        }
        assert answers == {("request", "placed"): 1, ("batch", "queued"): 1}
        assert queued[("berth_placement_attempts_total", ())] == 1
        kinds = by_label(queued, "berth_outcomes_total", "kind")
        # 4 for the providers, r1 and r2, r2 consumed, r3 rejected, "one"
        # claimed, its clock (NOW_MS) past r1's lease
        assert kinds == {"applied": 4, "accepted": 3, "consumed": 1, "rejected": 1, "expired": 1}
        assert by_label(queued, "berth_rejections_total", "code") == {"INSUFFICIENT_CAPACITY": 1}

        # a writer that resumes publishes its last outcomes again: counted once
        topic = settings.topics.outcomes
        p = partition_for(b"n2", 2)
        last = app.log.read(topic, p, app.log.end_offset(topic, p) - 1, 1)[0]
        app.log.append(topic, [Append(p, last.key, last.value)])
        assert by_label(scrape(url), "berth_outcomes_total", "kind") == kinds

        publisher.publish([release("r2", ts=5_000).model_copy(update={"partition_key": "n2"})])
        catch_up_all(app.writers())
        released = scrape(url)
        # "one" took 1 VCPU of n1, r1 expired; n2 is free again
        assert by_label(released, "berth_headroom_instances", "shape") == {"VCPU=2": 5} == room()


def test_a_view_that_cannot_be_read_is_reported_down_not_an_error(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    with App(settings, migrate=False) as app:  # no schema: every query fails
        host, port, _ = serve(
            LedgerCollector(app.log, app.engine, settings.topics, 1), "127.0.0.1", 0
        )
        assert scrape(f"http://{host}:{port}") == {("berth_view_up", ()): 0}


def test_once_lag_and_listen_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    with App(Settings(data_dir=data, partitions=2)) as app:
        Publisher(app.log, app.settings.topics).publish([*provider("n1", VCPU=8)])
        catch_up_all(app.writers())
    assert main(["metrics", "--data-dir", str(data), "--once"]) == 0
    full = parse(capsys.readouterr().out)
    assert by_label(full, "berth_resource_capacity", "resource_class") == {"VCPU": 8}
    assert main(["metrics", "--data-dir", str(data), "--once", "--lag"]) == 0
    lag = parse(capsys.readouterr().out)
    names = {name for name, _ in lag}
    assert "berth_view_behind_records" in names
    assert not any(name.startswith(("berth_resource", "berth_reservations")) for name in names)
    assert main(["metrics", "--data-dir", str(data), "--listen", "9480"]) == 2
    assert "--listen wants HOST:PORT, not '9480'" in capsys.readouterr().err
    assert main(["metrics", "--data-dir", str(data), "--once", "--headroom", "VCPU=4"]) == 0
    assert parse(capsys.readouterr().out)[("berth_headroom_instances", (("shape", "VCPU=4"),))] == 2
    assert main(["metrics", "--data-dir", str(data), "--once", "--headroom", "VCPU"]) == 2
    assert "resources are CLASS=AMOUNT,...: not 'VCPU'" in capsys.readouterr().err


def test_the_exporter_serves_until_sigterm(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with App(Settings(data_dir=data, partitions=1)) as app:
        Publisher(app.log, app.settings.topics).publish([*provider("n1", VCPU=8)])
    exporter = subprocess.Popen(
        [sys.executable, "-m", "berth.cli", "metrics", "--data-dir", str(data), *LISTEN_ANY],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert exporter.stderr is not None
        said = []
        found = None
        while found is None and (line := exporter.stderr.readline()):
            said.append(line)
            found = re.search(r"serving (http://[\d.]+:\d+)/metrics", line)
        assert found, said
        url = found.group(1)
        # the exporter reads; the writers have not run, so the records wait
        samples: Samples = {}

        def scraped() -> bool:
            samples.update(scrape(url))
            return bool(samples)

        wait_for(scraped, "a scrape", timeout_s=30)
        assert samples[("berth_view_behind_records", (("partition", "0"),))] == 2
    finally:
        exporter.send_signal(signal.SIGTERM)
        _, err = exporter.communicate(timeout=30)
    assert exporter.returncode == 0, err
