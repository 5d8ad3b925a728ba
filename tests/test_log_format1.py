"""A log written in format 1, before records were chained (a 30-request
demo, kept in ``tests/data/format1``), still opens, replays exactly and takes
appends in its own format."""

from __future__ import annotations

import json
import shutil
from contextlib import closing
from pathlib import Path

import pytest

from ledger.embedded import EmbeddedLog
from ledger.log import Append
from tests.conftest import Cli

FIXTURE = Path(__file__).parent / "data" / "format1"


@pytest.fixture
def old_data(tmp_path: Path) -> Path:
    data = tmp_path / "old"
    shutil.copytree(FIXTURE, data)
    return data


def test_a_format_1_log_reads_and_appends_in_its_own_format(old_data: Path) -> None:
    with closing(EmbeddedLog(old_data)) as log:
        assert log.format("berth.events") == 1
        events = log.read("berth.events", 0, 0, 1000)
        assert len(events) == log.end_offset("berth.events", 0) > 30
        assert all(json.loads(r.value)["type"] for r in events)
        offset = log.append("berth.events", [Append(0, b"k", b"appended")])[0]
        assert offset == len(events)
    with closing(EmbeddedLog(old_data)) as log:
        assert log.read("berth.events", 0, offset, 10)[0].value == b"appended"
        assert log.check("berth.events", 0).damage is None
        log.create_topic("fresh", 1)
        assert log.format("fresh") == 2


def test_a_format_1_log_replays_every_decision_exactly(old_data: Path, cli: Cli) -> None:
    code, out, err = cli("replay", "--data-dir", str(old_data), "--verify", "--jobs", "1")
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["verified"] is True
    assert result["verified_outcomes"] > 30
