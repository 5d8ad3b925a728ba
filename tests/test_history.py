"""``berth history``: every decision about an id, from the view and the log,
on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from ledger.log import Append
from ledger.partitioner import partition_for
from schemas.codec import encode_event
from schemas.events import Tick
from tests.builders import claim, consume, provider
from tests.conftest import Cli
from tests.contracts.view_contract import pool_scenario


@pytest.fixture
def backend(tmp_path: Path, view_url: str) -> list[str]:
    """Two providers in two partitions, and consumer vm-1's history on them:
    r1 claimed and consumed on n1; r2 rejected on n2 (too big); r3 claimed
    on n2 and left to expire at a tick."""
    data = tmp_path / "data"
    settings = Settings(data_dir=data, db_url=view_url, partitions=2)
    assert partition_for(b"n1", 2) != partition_for(b"n2", 2)
    with App(settings) as app:
        Publisher(app.log, app.settings.topics).publish(
            [
                *provider("n1", VCPU=8, MEMORY_MB=4096),
                *provider("n2", VCPU=4, MEMORY_MB=2048),
                claim("r1", "n1", ts=1_000, consumer="vm-1", VCPU=2, event_id="c-r1").model_copy(
                    update={"correlation_id": "boot-vm-1"}
                ),
                consume("r1", ts=2_000, event_id="u-r1").model_copy(update={"partition_key": "n1"}),
                claim("r2", "n2", ts=3_000, consumer="vm-1", VCPU=16, event_id="c-r2"),
                claim("r3", "n2", ts=4_000, consumer="vm-1", VCPU=1, lease_ms=500, event_id="c-r3"),
                Tick(event_id="t-n2", ts_ms=9_000, partition_key="n2"),
            ]
        )
        catch_up_all(app.writers())
    return ["--data-dir", str(data), "--db", view_url]


def _history(cli: Cli, backend: list[str], *argv: str) -> Any:
    code, out, err = cli("history", *backend, "--json", *argv)
    assert (code, err) == (0, "")
    return json.loads(out)


def _steps(found: Any) -> list[tuple[str, str, str | None]]:
    """(subject, kind, the answered record's event id) per decision."""
    return [
        (s["subject"], s["kind"], s["record"]["event_id"] if "record" in s else None)
        for s in found["history"]
    ]


def test_a_reservations_history_links_each_decision_to_its_record(
    backend: list[str], cli: Cli
) -> None:
    found = _history(cli, backend, "r1")
    assert found["names"] == ["reservation"]
    [r1] = found["reservations"]
    assert (r1["status"], r1["consumer_id"], r1["project_id"]) == ("consumed", "vm-1", "proj")
    assert r1["items"] == [{"provider_id": "n1", "resources": {"VCPU": 2}}]
    assert _steps(found) == [("r1", "accepted", "c-r1"), ("r1", "consumed", "u-r1")]
    accepted, consumed = found["history"]
    assert accepted["record"] == {
        "type": "claim",
        "event_id": "c-r1",
        "ts_ms": 1_000,
        "correlation_id": "boot-vm-1",
    }
    assert accepted["expires_at_ms"] == 1_000 + 1_000
    assert (consumed["record"]["type"], consumed["clock_ms"]) == ("consume", 2_000)
    partition = partition_for(b"n1", 2)
    assert {s["partition"] for s in found["history"]} == {r1["partition"]} == {partition}


def test_a_consumers_history_spans_its_reservations_in_every_partition(
    backend: list[str], cli: Cli
) -> None:
    found = _history(cli, backend, "vm-1")
    assert found["names"] == ["consumer"]
    assert sorted(r["reservation_id"] for r in found["reservations"]) == ["r1", "r3"]
    # r3's expiry answers the tick that moved n2's clock past its lease
    assert _steps(found) == [
        ("r1", "accepted", "c-r1"),
        ("r1", "consumed", "u-r1"),
        ("r3", "accepted", "c-r3"),
        ("r3", "expired", "t-n2"),
    ]


def test_a_rejected_claim_has_a_history_but_no_reservation(backend: list[str], cli: Cli) -> None:
    found = _history(cli, backend, "r2")
    assert (found["names"], found["reservations"]) == ([], [])
    [rejected] = found["history"]
    assert (rejected["kind"], rejected["record"]["event_id"]) == ("rejected", "c-r2")
    [reason] = rejected["reasons"]
    assert (reason["code"], reason["requested"], reason["available"]) == (
        "INSUFFICIENT_CAPACITY",
        16,
        4,
    )
    code, out, _ = cli("history", *backend, "r2")
    assert code == 0
    assert "r2: no reservation, provider or pool in the view" in out
    assert "rejected  r2  n2: VCPU INSUFFICIENT_CAPACITY wanted 16, free 4  <- claim c-r2" in out


def test_a_providers_history_shows_its_usage_allocations_and_registration(
    backend: list[str], cli: Cli
) -> None:
    found = _history(cli, backend, "n1")
    assert found["names"] == ["provider"]
    assert found["provider"]["state"] == "enabled"
    assert found["provider"]["inventories"]["VCPU"]["consumed"] == 2
    assert found["provider"]["inventories"]["VCPU"]["free"] == 6
    assert found["provider"]["allocations"] == [
        {
            "reservation_id": "r1",
            "consumer_id": "vm-1",
            "status": "consumed",
            "resources": {"VCPU": 2},
        }
    ]
    # r3 expired: n2 holds nothing
    assert _history(cli, backend, "n2")["provider"]["allocations"] == []
    assert "    consumed by vm-1: VCPU=2 (r1)\n" in cli("history", *backend, "n1")[1]
    assert [(kind, record) for _, kind, record in _steps(found)] == [
        ("applied", found["history"][0]["record"]["event_id"]),
        ("applied", found["history"][1]["record"]["event_id"]),
    ]
    assert [s["record"]["type"] for s in found["history"]] == [
        "provider_registered",
        "inventory_set",
    ]


def test_the_view_alone_and_the_text_form(backend: list[str], cli: Cli) -> None:
    found = _history(cli, backend, "vm-1", "--no-records")
    assert [record for _, _, record in _steps(found)] == [None] * 4
    code, out, _ = cli("history", *backend, "r3")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "r3: reservation"
    assert lines[1].startswith("  reservation r3 (expired): consumer vm-1, project proj")
    assert lines[2] == "    n2: VCPU=1"
    assert lines[4] == "history (2 decisions):"
    assert "expired  r3" in lines[6] and lines[6].endswith("<- tick t-n2 at 9000")


def test_an_id_the_view_does_not_know_is_an_error(backend: list[str], cli: Cli) -> None:
    code, out, err = cli("history", *backend, "nobody")
    assert (code, out) == (1, "")
    assert err == "berth: the view holds nothing about 'nobody'\n"


def test_a_pool_a_transaction_and_the_identifiers_a_consumer_was_given(
    tmp_path: Path, cli: Cli
) -> None:
    data = tmp_path / "data"
    events, more = pool_scenario()
    with App(Settings(data_dir=data, partitions=1)) as app:
        topic = app.settings.topics.events
        app.log.append(topic, [Append(0, b"k", encode_event(e)) for e in events + more])
        catch_up_all(app.writers())
    backend = ["--data-dir", str(data)]

    def history(subject: str) -> Any:
        code, out, err = cli("history", *backend, subject, "--json")
        assert (code, err) == (0, "")
        return json.loads(out)

    ip = history("ip")
    assert ip["names"] == ["pool"] and ip["pool"]["kind"] == "ipv4"
    assert [s["kind"] for s in ip["history"]] == ["applied"]

    # the view knows a transaction by its holds while they are pending or
    # once aborted; a committed hold is an ordinary one
    t2 = history("t2")
    assert t2["names"] == ["transaction"]
    assert [(r["reservation_id"], r["status"]) for r in t2["reservations"]] == [("y1", "aborted")]
    assert [(s["subject"], s["kind"]) for s in t2["history"]] == [
        ("y1", "prepared"),
        ("y1", "aborted"),
    ]
    t1 = history("t1")  # committed: only the decision recorded under its own id
    assert (t1["names"], t1["reservations"]) == ([], [])
    assert [(s["subject"], s["kind"]) for s in t1["history"]] == [("t1", "noop")]

    vm1 = history("vm1")
    assert vm1["names"] == ["consumer"]
    a1 = [s for s in vm1["history"] if s["subject"] == "a1"]
    # a1 took 10.0.0.4 and the lowest VNI, and gave them back when released;
    # its claim, sent again, is a no-op
    assert [(s["kind"], s.get("identifiers")) for s in a1] == [
        ("accepted", [["ip", "10.0.0.4"], ["vni", "100"]]),
        ("released", [["ip", "10.0.0.4"], ["vni", "100"]]),
        ("noop", None),
    ]
    text = cli("history", *backend, "a1")[1]
    assert "released  a1  ip=10.0.0.4 vni=100  <- release" in text


def test_a_history_read_meets_a_commit_whole_or_not_at_all(
    tmp_path: Path, view_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view commits a claim's batch while a history read is between
    its tables (after the reservations, before the outcomes): the read
    shows the claim's decision with its reservation, or neither, never the
    decision alone (what a caller told "placed" once read back)."""
    import berth.history

    settings = Settings(data_dir=tmp_path / "data", db_url=view_url, partitions=1)
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics)
        writers = app.writers()
        publisher.publish(provider("n1", VCPU=8))
        catch_up_all(writers)
        publisher.publish([claim("r1", "n1", ts=1_000, VCPU=2, event_id="c-r1")])
        between = berth.history._provider
        committed: list[int] = []

        def commit_between(conn: Any, subject: str) -> Any:
            if not committed:
                committed.append(catch_up_all(writers))  # from the writer's own connection
            return between(conn, subject)

        monkeypatch.setattr(berth.history, "_provider", commit_between)
        found = berth.history.read_history(app.engine, "r1")
        assert committed == [1]
        assert not found.steps and not found.reservations  # the view as the read began
        again = berth.history.read_history(app.engine, "r1")
        assert [step.outcome.kind for step in again.steps] == ["accepted"]
        assert [r["reservation_id"] for r in again.reservations] == ["r1"]
