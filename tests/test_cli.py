"""The CLI end to end on the embedded default: demo, replay --verify, publish,
the reaper, pools and deleting a consumer."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from berth.app import App, Settings
from berth.cli import main
from berth.client import Publisher
from consumers.snapshot_source import snapshot_from_view
from ledger.log import Append
from ledger.partitioner import partition_for
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
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    summary = run_demo(tmp_path / "demo", capsys)
    # its summary reports the requests: no log line each
    assert [r.getMessage() for r in caplog.records if r.name.startswith("consumers")] == []
    assert logging.getLogger("consumers").level == logging.NOTSET  # as it was
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
    # the Nova features at work: zones (the edge aggregate's too) and
    # architectures asked for are honoured, metrics reported every wave
    placed = summary["zone_or_arch_placed"]
    assert isinstance(placed, int) and placed > 50
    assert summary["zone_or_arch_misplaced"] == 0
    assert isinstance(summary["metrics_reports"], int) and summary["metrics_reports"] > 0
    # server groups of each policy, joined through transactions; the hard
    # rules checked against the view's members after every wave
    assert summary["server_groups"] == 4 * 4 * 4  # four of each policy, four waves
    joined, grouped = summary["group_requests"], summary["group_placed"]
    assert isinstance(joined, int) and isinstance(grouped, int) and 0 < grouped <= joined
    assert isinstance(summary["group_members_checked"], int)
    assert summary["group_members_checked"] > 0
    assert summary["group_rule_violations"] == 0
    # one provider in four has two NUMA cells and a PF with four VFs
    with App(Settings(data_dir=tmp_path / "demo"), migrate=False) as app:
        snapshot = snapshot_from_view(app.engine, placements=False)
    described = [p for p in snapshot.providers if p.numa_cells]
    assert len(described) == 8
    assert {(len(p.numa_cells), len(p.pci_devices)) for p in described} == {(2, 5)}


def test_demo_in_batches_never_splits_a_batch_nor_an_identifier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "demo"
    summary = run_demo(data, capsys, "--batch-size", "10", "--requests", "600")
    assert summary["requests"] == 600
    committed, aborted = summary["batches_committed"], summary["batches_aborted"]
    assert isinstance(committed, int) and isinstance(aborted, int)
    assert committed + aborted == 60
    assert committed and aborted  # the small cluster fills: some jobs cannot all fit
    assert summary["placed"] == committed * 10
    assert summary["partial_batches"] == 0
    assert summary["duplicate_identifiers"] == 0
    assert summary["overcommitted_providers"] == 0
    assert summary["group_rule_violations"] == 0  # batch members join groups too
    assert main(["replay", "--data-dir", str(data), "--verify"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["verified"] is True


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


def test_publish_s_clock_skew_is_configurable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "tick.jsonl"
    ahead_ms = 60_000
    ts = int(time.time() * 1000) + ahead_ms
    source.write_text(
        json.dumps({"type": "tick", "event_id": "t1", "ts_ms": ts, "partition_key": "x"}) + "\n"
    )
    publish = ["publish", "--data-dir", str(tmp_path / "d"), str(source)]
    assert main(publish) == 1
    assert "(at most 5000 allowed)" in capsys.readouterr().err
    assert main([*publish, "--max-skew-ms", str(10 * ahead_ms)]) == 0
    assert json.loads(capsys.readouterr().out)["line"] == 1
    monkeypatch.setenv("BERTH_MAX_SKEW_MS", str(10 * ahead_ms))
    assert main(publish) == 0
    assert json.loads(capsys.readouterr().out)["line"] == 1
    assert main([*publish, "--max-skew-ms", "-1"]) == 2
    assert "must not be negative" in capsys.readouterr().err


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


def test_explain_runs_the_configured_placement_scriptlet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "demo"
    run_demo(data, capsys)
    (tmp_path / "policy.star").write_text(
        "def instance_placement(request, candidates):\n"
        '    if get_instance_resources()["VCPU"] > 2:\n'
        '        return "big instances go through the capacity team"\n'
        '    set_target(candidates[-1]["provider_id"])\n'
    )
    config = tmp_path / "scheduler.toml"
    config.write_text('[scriptlet]\npath = "policy.star"\n')
    explain = ["explain", "--data-dir", str(data), "--config", str(config), "--json"]
    assert main([*explain, "--resources", "VCPU=4"]) == 1
    story = json.loads(capsys.readouterr().out)
    assert story["reason"] == (
        "refused by the placement scriptlet: big instances go through the capacity team "
        "(0 of 1 instances placed)"
    )
    assert main(["explain", "--data-dir", str(data), "--resources", "VCPU=1", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["providers"]
    assert main([*explain, "--resources", "VCPU=1"]) == 0
    last = json.loads(capsys.readouterr().out)["providers"]
    assert len(last) == 1 and last != best  # the program took the lowest ranked
    config.write_text('[scriptlet]\nsource = "x = 1"\n')
    assert main([*explain, "--resources", "VCPU=1"]) == 2
    assert "defines no instance_placement" in capsys.readouterr().err


# --- the reaper, deleting a consumer, pools ---------------------------------


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def key_in(partition: int, prefix: str, partitions: int) -> str:
    return next(
        f"{prefix}{k}"
        for k in range(1000)
        if partition_for(f"{prefix}{k}".encode(), partitions) == partition
    )


def publish_lines(data: Path, events: list[dict[str, object]], *options: str) -> None:
    source = data.parent / f"{data.name}-events.jsonl"
    source.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert main(["publish", "--data-dir", str(data), *options, str(source)]) == 0


def decisions(data: Path) -> list[Outcome]:
    """Run the partition writers over everything published so far."""
    with App(Settings(data_dir=data)) as app:
        outcomes = []
        for writer in app.writers():
            while (batch := writer.step()) is not None:
                outcomes += [o for applied in batch.applied for o in applied.outcomes]
    return outcomes


def test_reaper_ticks_every_partition_and_expires_an_abandoned_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "d"
    node = key_in(1, "n", 3)
    started = now_ms() - 60_000  # an instance that asked a minute ago, then vanished
    publish_lines(
        data,
        [
            {"type": "provider_registered", "event_id": "e1", "ts_ms": started,
             "partition_key": node, "provider_id": node, "name": node},
            {"type": "inventory_set", "event_id": "e2", "ts_ms": started, "partition_key": node,
             "provider_id": node, "inventories": {"VCPU": {"total": 2}}},
            {"type": "claim", "event_id": "e3", "ts_ms": started, "partition_key": node,
             "reservation_id": "r1", "consumer_id": "vm-1", "project_id": "p",
             "items": [{"provider_id": node, "resources": {"VCPU": 2}}], "lease_ms": 1000},
        ],
        "--partitions", "3",
    )  # fmt: skip
    assert main(["reaper", "--data-dir", str(data), "--interval", "0.01", "--rounds", "2"]) == 0
    with App(Settings(data_dir=data)) as app:
        ends = [app.log.end_offset(app.settings.topics.events, p) for p in range(3)]
    # two ticks each from the reaper's rounds, and node's three events
    assert ends == [2, 5, 2]
    outcomes = decisions(data)
    assert [(o.kind, o.subject) for o in outcomes if o.kind != Kind.APPLIED] == [
        (Kind.ACCEPTED, "r1"),
        (Kind.EXPIRED, "r1"),
    ]
    assert main(["reaper", "--data-dir", str(data), "--interval", "0"]) == 2


def test_pool_define_and_delete_consumer_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "d"
    partitions = 4
    node, pool_id = key_in(0, "n", partitions), key_in(3, "vnis-", partitions)
    ts = now_ms()
    assert main(["tick", "--data-dir", str(data), "--partitions", str(partitions)]) == 0
    code = main(
        ["pool", "define", pool_id, "--data-dir", str(data), "--kind", "vni",
         "--first", "5000", "--last", "5002", "--exclude", "5001"]
    )  # fmt: skip
    assert code == 0
    defined = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert defined == {"pool_id": pool_id, "partition": 3, "offset": 1}

    def take(rid: str, consumer: str, value: str | None = None) -> dict[str, object]:
        wanted = {"pool_id": pool_id} if value is None else {"pool_id": pool_id, "value": value}
        return {"type": "claim", "event_id": f"e-{rid}", "ts_ms": ts, "partition_key": pool_id,
                "reservation_id": rid, "consumer_id": consumer, "project_id": "p",
                "identifiers": [wanted], "lease_ms": 600_000}  # fmt: skip

    publish_lines(
        data,
        [
            {"type": "provider_registered", "event_id": "e1", "ts_ms": ts, "partition_key": node,
             "provider_id": node, "name": node},
            {"type": "inventory_set", "event_id": "e2", "ts_ms": ts, "partition_key": node,
             "provider_id": node, "inventories": {"VCPU": {"total": 2}}},
            {"type": "claim", "event_id": "e3", "ts_ms": ts, "partition_key": node,
             "reservation_id": "vm-1-cpu", "consumer_id": "vm-1", "project_id": "p",
             "items": [{"provider_id": node, "resources": {"VCPU": 2}}], "lease_ms": 600_000},
            take("vm-1-vni", "vm-1"),  # the lowest free: 5000
            take("vm-2-vni", "vm-2"),  # 5002: 5001 is excluded
            take("vm-3-vni", "vm-3"),  # none left
        ],
    )  # fmt: skip
    capsys.readouterr()
    assert main(["delete-consumer", "vm-1", "--data-dir", str(data)]) == 0
    deleted = json.loads(capsys.readouterr().out)
    assert deleted["consumer_id"] == "vm-1"
    assert [a["partition"] for a in deleted["appended"]] == list(range(partitions))
    publish_lines(data, [take("vm-4-vni", "vm-4", "5000")])  # free again

    outcomes = [o for o in decisions(data) if o.kind not in (Kind.APPLIED, Kind.NOOP)]
    assert [(o.partition, o.kind, o.subject, o.identifiers) for o in outcomes] == [
        (0, Kind.ACCEPTED, "vm-1-cpu", ()),
        (0, Kind.RELEASED, "vm-1-cpu", ()),
        (3, Kind.ACCEPTED, "vm-1-vni", ((pool_id, "5000"),)),
        (3, Kind.ACCEPTED, "vm-2-vni", ((pool_id, "5002"),)),
        (3, Kind.REJECTED, "vm-3-vni", ()),
        (3, Kind.RELEASED, "vm-1-vni", ((pool_id, "5000"),)),
        (3, Kind.ACCEPTED, "vm-4-vni", ((pool_id, "5000"),)),
    ]


def test_pool_define_reports_a_bad_definition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "d")
    code = main(["pool", "define", "net", "--data-dir", data, "--kind", "ipv4", "--first", "1"])
    assert code == 2
    assert "berth: pool net:" in capsys.readouterr().err
    assert main(["pool", "define", "lan", "--data-dir", data, "--kind", "set",
                 "--member", "a", "--member", "b"]) == 0  # fmt: skip


def test_berth_data_dir_from_the_environment_when_not_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "from-env"
    with App(Settings(data_dir=data, partitions=2)) as app:
        Publisher(app.log, clock_ms=lambda: 10**12).publish(
            [{"type": "tick", "event_id": "t1", "ts_ms": 1, "partition_key": "k"}]
        )
    monkeypatch.setenv("BERTH_DATA_DIR", str(data))
    monkeypatch.chdir(tmp_path)
    assert main(["status", "--lag", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert len(status["partitions"]) == 2
    assert sum(p["log_end"] for p in status["partitions"]) == 1
    assert not (tmp_path / "berth-data").exists()


def test_replay_beside_a_process_holding_the_log_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    with App(Settings(data_dir=data, partitions=2)):  # as berth serve holds it
        assert main(["replay", "--data-dir", str(data)]) == 2
    err = capsys.readouterr().err
    assert "is open in another log: stop the processes using it, then replay" in err
    assert "Traceback" not in err
