"""The CLI end to end on the embedded default: demo, replay --verify, publish."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from berth.app import App, Settings
from berth.cli import main
from ledger.log import Append
from schemas.outcomes import Kind, Outcome


def run_demo(data_dir: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    code = main(
        [
            "demo",
            "--data-dir",
            str(data_dir),
            "--providers",
            "30",
            "--requests",
            "2000",
            "--partitions",
            "4",
            "--json",
            *extra,
        ]
    )
    summary: dict[str, object] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0
    return summary


def test_demo_places_expires_and_never_overcommits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = run_demo(tmp_path / "demo", capsys)
    assert summary["requests"] == 2000
    assert summary["overcommitted_providers"] == 0
    assert isinstance(summary["placed"], int) and summary["placed"] > 500
    assert isinstance(summary["expired"], int) and summary["expired"] > 0
    assert isinstance(summary["consumed"], int) and summary["consumed"] > 0
    # the tight cluster shows both: requests with no valid host, and claims that
    # lost a race on the shared view, were rejected by the writer and retried
    assert summary["failed"] and summary["claims_rejected_by_writer"]
    assert isinstance(summary["attempts"], int) and summary["attempts"] > 2000
    utilisation = summary["utilisation"]
    assert isinstance(utilisation, dict)
    assert set(utilisation) == {"VCPU", "MEMORY_MB", "DISK_GB"}


def test_demo_is_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = run_demo(tmp_path / "a", capsys)
    second = run_demo(tmp_path / "b", capsys)
    volatile = {"elapsed_s", "requests_per_s", "data_dir"}
    assert {k: v for k, v in first.items() if k not in volatile} == {
        k: v for k, v in second.items() if k not in volatile
    }


def test_demo_refuses_a_directory_it_did_not_make(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    assert main(["demo", "--data-dir", str(tmp_path), "--requests", "10"]) == 2
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_replay_verify_reproduces_every_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "demo"
    summary = run_demo(data, capsys)
    assert main(["replay", "--data-dir", str(data), "--verify"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["verified"] is True
    assert result["outcomes"] == summary["decisions"]
    assert result["verified_outcomes"] == summary["decisions"]


def test_replay_verify_reports_the_first_divergence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "demo"
    run_demo(data, capsys)
    # a forged outcome for a new record: the replayed decision will differ
    with App(Settings(data_dir=data)) as app:
        topics = app.settings.topics
        end = app.log.end_offset(topics.events, 0)
        from schemas.codec import encode_event
        from tests.builders import tick

        app.log.append(topics.events, [Append(0, b"t", encode_event(tick(1)))])
        app.log.append(topics.events, [Append(0, b"t", encode_event(tick(2)))])
        forged = Outcome(0, end, 0, Kind.APPLIED, "forged", "nothing", 0)
        app.log.append(topics.outcomes, [Append(0, b"x", forged.to_json())])
    assert main(["replay", "--data-dir", str(data), "--verify"]) == 1
    err = capsys.readouterr().err
    assert f"partition 0 offset {end}" in err


def test_publish_reports_bad_lines_and_appends_good_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        json.dumps(
            {
                "type": "provider_registered",
                "event_id": "e1",
                "ts_ms": 1,
                "partition_key": "n1",
                "provider_id": "n1",
                "name": "n1",
            }
        ),
        "{broken",
        json.dumps({"type": "claim", "event_id": "e2", "ts_ms": 2, "partition_key": "n1"}),
        json.dumps({"type": "tick", "event_id": "e3", "ts_ms": 10**15, "partition_key": "x"}),
    ]
    source = tmp_path / "events.jsonl"
    source.write_text("\n".join(lines) + "\n")
    code = main(["publish", "--data-dir", str(tmp_path / "d"), "--partitions", "2", str(source)])
    captured = capsys.readouterr()
    assert code == 1
    assert [json.loads(x)["line"] for x in captured.out.splitlines()] == [1]
    assert "line 2:" in captured.err
    assert "line 3:" in captured.err and "reservation_id" in captured.err
    assert "line 4:" in captured.err and "ahead of this edge's clock" in captured.err


def test_explain_tells_the_story_of_a_request_that_fits_nowhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "demo"
    run_demo(data, capsys)
    code = main(["explain", "--data-dir", str(data), "--resources", "VCPU=1,MEMORY_MB=10000000"])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[0].startswith("choice: no valid host: 0 of 1 instances placed")
    assert out[1] == "30 providers considered; ResourceFilter: -30"
    assert len(out) == 2 + 30
    assert all("MEMORY_MB wanted 10000000, free" in line for line in out[2:])
    code = main(["explain", "--data-dir", str(data), "--resources", "VCPU=1", "--json"])
    story = json.loads(capsys.readouterr().out)
    assert code == 0 and story["placed"] and len(story["providers"]) == 1
