"""Recovering a data directory: berth log verify scrubs it, berth backup
copies it while it serves, berth restore checks a copy before using it, and
berth log truncate cuts a damaged partition on purpose."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

from berth.app import App, Settings
from berth.client import Decisions, Publisher
from consumers.partition_writer import catch_up_all
from ledger.embedded import EmbeddedLog
from schemas.outcomes import Outcome
from tests.builders import claim, provider
from tests.conftest import Cli
from tests.damage import PARTITIONS, flip, ledger, node, view_ahead_of_its_log, workload
from tests.processes import serving


def test_a_cut_on_purpose_is_recorded_kept_aside_and_rebuilds_the_view(
    tmp_path: Path, cli: Cli
) -> None:
    settings = ledger(tmp_path / "data")
    data = settings.data_dir
    flip(data, settings.topics.events, 0)
    with closing(EmbeddedLog(data, read_only=True)) as log:
        damage = log.damage(settings.topics.events, 0)
        assert damage is not None
        at = int(damage.split("record ")[1].split(" ")[0])
        whole = (data / "log" / settings.topics.events / "p0.log").read_bytes()
    code, _, err = cli(
        "log", "truncate", "--data-dir", str(data), "--partition", "0", "--offset", str(at)
    )
    assert code == 2 and "--i-understand" in err
    assert (data / "log" / settings.topics.events / "p0.log").read_bytes() == whole
    code, out, _ = cli(
        "log",
        "truncate",
        "--data-dir",
        str(data),
        "--partition",
        "0",
        "--offset",
        str(at),
        "--i-understand",
    )
    assert code == 0
    lines = [json.loads(line) for line in out.strip().splitlines()]
    events_cut, outcomes_cut, rebuilt = lines
    assert events_cut["cut"]["topic"] == settings.topics.events
    assert outcomes_cut["cut"]["topic"] == settings.topics.outcomes
    assert rebuilt["verified"] is True
    kept = Path(events_cut["cut"]["aside"]).read_bytes()
    assert (data / "log" / settings.topics.events / "p0.log").read_bytes() + kept == whole
    recorded = [json.loads(line) for line in (data / "log" / "cuts.jsonl").read_text().splitlines()]
    assert recorded[0]["offset"] == at and "record" in recorded[0]["damage"]
    code, out, _ = cli("log", "verify", "--data-dir", str(data), "--recompute", "all")
    assert code == 0, out
    # the partition takes appends again, and its writer decides them
    with App(settings) as app:
        edge = Publisher(app.log, settings.topics, clock_ms=lambda: 10**6)
        placed = edge.publish([claim("after-cut", node(0), ts=9000, VCPU=1)])
        assert placed[0] == (0, at)
        writers = app.writers()
        catch_up_all(writers)
        assert all(w.halted is None for w in writers)
    code, _, _ = cli("replay", "--data-dir", str(data), "--verify")
    assert code == 0


def test_a_backup_taken_under_load_restores_and_replays_to_the_same_decisions(
    tmp_path: Path, cli: Cli
) -> None:
    data = tmp_path / "data"
    settings = Settings(data_dir=data, partitions=PARTITIONS)
    with serving(data, PARTITIONS), App(settings, migrate=False) as app:
        edge = Publisher(app.log, settings.topics)
        decisions = Decisions(app.log, settings.topics)
        first = [e for p in range(PARTITIONS) for e in provider(node(p), VCPU=10_000)]
        edge.publish(first)
        assert decisions.wait([e.event_id for e in first], timeout_s=30) == []
        backups = []
        for round_ in range(3):
            load = workload(round_ * 40, 40)
            edge.publish(load[: len(load) // 2])
            target = tmp_path / f"backup{round_}"
            code, out, err = cli("backup", str(target), "--data-dir", str(data))
            assert code == 0, err
            backups.append((target, json.loads(out)))
            edge.publish(load[len(load) // 2 :])
        assert decisions.wait([e.event_id for e in load], timeout_s=30) == []
    for target, manifest in backups:
        assert manifest["records"] > 0
        restored = tmp_path / f"restored-{target.name}"
        code, out, err = cli("restore", str(target), "--data-dir", str(restored))
        assert code == 0, err
        assert "sound" in out
        code, out, err = cli("replay", "--data-dir", str(restored), "--verify")
        assert code == 0, err
        assert json.loads(out.strip().splitlines()[-1])["verified"] is True
        _assert_prefix_of(restored, data)


def _assert_prefix_of(restored: Path, original: Path) -> None:
    """Every partition of the restored log is a prefix of the original's,
    record for record, outcomes included."""
    with (
        closing(EmbeddedLog(restored, read_only=True)) as small,
        closing(EmbeddedLog(original, read_only=True)) as big,
    ):
        for topic, count in small.topics().items():
            for p in range(count):
                mine = small.read(topic, p, 0, 100_000)
                assert big.read(topic, p, 0, len(mine) or 1)[: len(mine)] == mine


def test_a_restore_refuses_a_damaged_backup_and_a_used_directory(tmp_path: Path, cli: Cli) -> None:
    settings = ledger(tmp_path / "data", records_each=10)
    code, _, err = cli("backup", str(tmp_path / "bk"), "--data-dir", str(settings.data_dir))
    assert code == 0, err
    code, _, err = cli("restore", str(tmp_path / "bk"), "--data-dir", str(settings.data_dir))
    assert code == 1 and "not empty" in err
    flip(tmp_path / "bk", settings.topics.outcomes, 0)
    code, _, err = cli("restore", str(tmp_path / "bk"), "--data-dir", str(tmp_path / "new"))
    assert code == 1
    assert "DAMAGED" in err and "not a sound backup" in err
    assert not (tmp_path / "new" / "log").exists()


def test_log_verify_names_metadata_problems(tmp_path: Path, cli: Cli) -> None:
    settings = ledger(tmp_path / "data", records_each=5)
    topic_dir = settings.data_dir / "log" / settings.topics.events
    code, out, _ = cli("log", "verify", "--data-dir", str(settings.data_dir), "--json")
    assert code == 0
    found = json.loads(out)
    assert found["sound"] is True and found["records"] > 0
    assert found["recomputed"][0]["verified"] > 0
    (topic_dir / "p7.log").write_bytes(b"")
    code, out, _ = cli("log", "verify", "--data-dir", str(settings.data_dir))
    assert code == 1 and "partition files beyond its 2: [7]" in out
    (topic_dir / "p7.log").unlink()
    (topic_dir / "meta.json").write_text("{not json")
    code, out, _ = cli("log", "verify", "--data-dir", str(settings.data_dir))
    assert code == 1 and "meta.json: unreadable" in out


def test_outcomes_of_cut_records_are_cut_with_them(tmp_path: Path) -> None:
    settings = ledger(tmp_path / "data", records_each=12)
    with closing(EmbeddedLog(settings.data_dir, read_only=True)) as log:
        end = log.end_offset(settings.topics.events, 1)
    from berth.recovery import cut

    cut(settings, settings.topics.events, 1, end - 5, now_ms=1)
    with closing(EmbeddedLog(settings.data_dir, read_only=True)) as log:
        outcomes = [
            Outcome.from_json(r.value) for r in log.read(settings.topics.outcomes, 1, 0, 10_000)
        ]
    assert outcomes and max(o.offset for o in outcomes) == end - 6


def test_log_verify_finds_a_view_ahead_of_its_log(tmp_path: Path, cli: Cli) -> None:
    data = view_ahead_of_its_log(tmp_path).data_dir
    code, out, _ = cli("log", "verify", "--data-dir", str(data), "--json")
    assert code == 1
    problems = json.loads(out)["problems"]
    assert len(problems) == PARTITIONS and "the view has applied" in problems[0]
