"""The embedded default as separate processes: ``berth serve`` runs while
``berth publish`` and ``berth request`` append to the same data directory,
and no partition gets a second writer or scheduler."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from berth.app import App, Settings
from berth.cli import main
from ledger.embedded import EmbeddedLog
from ledger.log import LogError
from ledger.topics import DEFAULT_TOPICS
from scheduling.config import SchedulerConfig
from tests.builders import provider
from tests.contracts.log_contract import read_all
from tests.polling import wait_for
from tests.processes import serving


def _answers(data: Path) -> list[dict[str, object]]:
    with EmbeddedLog(data, read_only=True) as log:
        topic = DEFAULT_TOPICS.placements
        return [
            json.loads(r.value)
            for p in range(log.partition_count(topic))
            for r in read_all(log, topic, p)
        ]


def test_requests_published_while_serve_runs_are_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    with serving(data, partitions=4):
        now = int(time.time() * 1000)
        events = tmp_path / "events.jsonl"
        events.write_text(
            "".join(
                event.model_dump_json() + "\n"
                for n in range(3)
                for event in provider(f"node-{n}", ts=now, VCPU=(4, 1.0), MEMORY_MB=8192)
            )
        )
        assert main(["publish", "--data-dir", str(data), str(events)]) == 0
        requests = tmp_path / "requests.jsonl"
        requests.write_text(
            "".join(
                json.dumps(
                    {
                        "request_id": f"r{k}",
                        "ts_ms": now,
                        "project_id": "p",
                        "resources": {"VCPU": 2, "MEMORY_MB": 4096},
                    }
                )
                + "\n"
                for k in range(7)
            )
        )
        assert main(["request", "--data-dir", str(data), str(requests)]) == 0
        capsys.readouterr()
        wait_for(lambda: len(_answers(data)) == 7, "seven answers to the requests", timeout_s=60)
    answers = {a["request_id"]: a for a in _answers(data)}
    placed = [a for a in answers.values() if a["placed"]]
    # three providers of 4 VCPU hold exactly six instances of 2
    assert len(placed) == 6
    failed = [a for a in answers.values() if not a["placed"]]
    assert len(failed) == 1 and "no valid host" in str(failed[0]["reason"])


def test_a_second_writer_or_scheduler_of_a_partition_is_refused(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, partitions=4)
    with App(settings) as first, App(settings) as second:
        first.writers([0, 1])
        second.writers([2, 3])
        with pytest.raises(LogError, match="already owned"):
            second.writers([1])
        first.scheduler_worker(SchedulerConfig.default(), lambda: None, partitions=[0])
        with pytest.raises(LogError, match="already owned"):
            second.scheduler_worker(SchedulerConfig.default(), lambda: None)
