"""``berth status`` and ``berth dead-letters`` on a real log and view,
SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from ledger.log import Append
from ledger.partitioner import partition_for
from tests.builders import claim, consume, provider
from tests.conftest import Cli

BAD = b'{"type": "claim", "event_id": "e-bad"}'


def test_status_shows_what_the_writers_have_not_applied_yet(
    tmp_path: Path, view_url: str, cli: Cli
) -> None:
    data = tmp_path / "data"
    settings = Settings(data_dir=data, db_url=view_url, partitions=2)
    backend = ["--data-dir", str(data), "--db", view_url]
    with App(settings) as app:
        Publisher(app.log, app.settings.topics).publish(
            [
                *provider("n1", VCPU=(8, 2.0), MEMORY_MB=4096),
                *provider("n2", VCPU=(4, 1.0), MEMORY_MB=2048),
                claim("r1", "n1", ts=1_000, VCPU=6, MEMORY_MB=1024),
                claim("r2", "n2", ts=2_000, VCPU=2),
                consume("r2", ts=3_000).model_copy(update={"partition_key": "n2"}),
            ]
        )
        bad_partition = partition_for(b"n2", 2)
        app.log.append(app.settings.topics.events, [Append(bad_partition, b"n2", BAD)])
        ends = [app.log.end_offset(app.settings.topics.events, p) for p in range(2)]

        code, out, _ = cli("status", *backend, "--json")
        assert code == 0
        before = json.loads(out)
        assert [(p["log_end"], p["applied"], p["behind"]) for p in before["partitions"]] == [
            (end, 0, end) for end in ends
        ]
        assert before["behind"] == max(ends)
        assert before["resources"] == {} and before["reservations"] == {}
        code, _, err = cli("status", *backend, "--max-behind", "0")
        assert code == 1
        assert f"berth: a partition's view is {max(ends)} records behind its log" in err

        catch_up_all(app.writers())

    code, out, _ = cli("status", *backend, "--json", "--max-behind", "0")
    assert code == 0
    after = json.loads(out)
    assert [(p["applied"], p["behind"]) for p in after["partitions"]] == [(e, 0) for e in ends]
    assert [p["dead_letters"] for p in after["partitions"]] == [
        int(p == bad_partition) for p in range(2)
    ]
    assert after["partitions"][bad_partition]["clock_ms"] == 3_000
    assert after["resources"] == {
        "MEMORY_MB": {
            "resource_class": "MEMORY_MB",
            "capacity": 6144,
            "held": 1024,
            "consumed": 0,
            "free": 5120,
            "used": round(1024 / 6144, 4),
        },
        "VCPU": {
            "resource_class": "VCPU",
            "capacity": 20,
            "held": 6,
            "consumed": 2,
            "free": 12,
            "used": 0.4,
        },
    }
    assert after["providers"] == {"enabled": 2}
    assert after["reservations"] == {"consumed": 1, "held": 1}
    assert after["overcommitted_providers"] == 0

    code, out, _ = cli("status", *backend, "--lag", "--json")
    assert code == 0
    assert json.loads(out) == {
        "partitions": after["partitions"],
        "behind": 0,
        "view_ahead_of_log": [],
        "damaged": [],
    }
    code, out, _ = cli("status", *backend, "--lag")
    assert len(out.splitlines()) == 3 and "VCPU" not in out  # the header, two partitions

    code, out, _ = cli("status", *backend)
    assert code == 0
    assert "VCPU" in out and "40.0%" in out
    assert "reservations: 1 consumed, 1 held" in out
    assert "overcommitted providers: 0" in out

    code, out, _ = cli("dead-letters", *backend, "--json")
    assert code == 0
    (letter,) = [json.loads(line) for line in out.splitlines()]
    assert letter["partition"] == bad_partition
    assert letter["offset"] == ends[bad_partition] - 1
    assert letter["value"] == BAD.decode()
    assert "reservation_id" in letter["reason"]
    code, out, _ = cli("dead-letters", *backend)
    assert out.startswith(f"partition {bad_partition} offset {ends[bad_partition] - 1}: ")
    other = str(1 - bad_partition)
    assert cli("dead-letters", *backend, "--partition", other)[1] == "no dead letters\n"


def test_dead_letters_keeps_the_last_ones(tmp_path: Path, cli: Cli) -> None:
    data = tmp_path / "data"
    with App(Settings(data_dir=data, partitions=1)) as app:
        app.log.append(
            app.settings.topics.events,
            [Append(0, b"k", b"not json %d" % n) for n in range(5)],
        )
        catch_up_all(app.writers())
    code, out, _ = cli("dead-letters", "--data-dir", str(data), "--limit", "2", "--json")
    assert code == 0
    assert [json.loads(line)["offset"] for line in out.splitlines()] == [3, 4]


def test_status_of_a_view_without_its_schema_says_what_to_do(
    tmp_path: Path, view_url: str, cli: Cli
) -> None:
    backend = ["--data-dir", str(tmp_path / "data"), "--db", view_url]
    missing = "no such table" if view_url.startswith("sqlite") else 'relation "'
    for command in ("status", "dead-letters"):
        code, out, err = cli(command, *backend)
        assert code == 2 and out == ""
        assert f"berth: the view cannot be read ({missing}" in err
        assert "`berth migrate` creates its schema" in err
