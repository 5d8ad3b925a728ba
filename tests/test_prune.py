"""``berth prune``: the view's outcome rows older than a time go, exactly
those, and nothing that decides notices; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

import berth.prune
from berth.app import App, Settings
from berth.client import Publisher
from berth.prune import prune_outcomes
from berth.replay import replay
from consumers.partition_writer import catch_up_all
from projections.view.engine import make_engine
from projections.view.tables import outcomes
from tests.builders import claim, consume, provider, release
from tests.conftest import Cli
from tests.postgres import scratch_database


def _decisions(url: str) -> list[tuple[int, int, int, int]]:
    """(partition, offset, seq, clock) of every outcome row."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            c = outcomes.c
            rows = conn.execute(select(c.partition, c.offset, c.seq, c.clock_ms))
            return sorted((int(p), int(o), int(s), int(t)) for p, o, s, t in rows)
    finally:
        engine.dispose()


def _history(settings: Settings, rounds: range) -> None:
    """Claims, consumes and releases on four providers in two partitions,
    each round a second of partition clock later than the last."""
    with App(settings) as app:
        publisher = Publisher(app.log, app.settings.topics)
        publisher.publish([e for n in range(4) for e in provider(f"n{n}", ts=0, VCPU=64)])
        for r in rounds:
            ts = 1_000 * r
            for n in range(4):
                rid, pid = f"r{r}-{n}", f"n{n}"
                publisher.publish(
                    [
                        claim(rid, pid, ts=ts, VCPU=1, lease_ms=600_000),
                        consume(rid, ts=ts + 1).model_copy(update={"partition_key": pid}),
                        release(rid, ts=ts + 2).model_copy(update={"partition_key": pid}),
                    ]
                )
        catch_up_all(app.writers())


def test_exactly_the_older_outcomes_go_and_the_writers_go_on(
    tmp_path: Path, view_url: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(berth.prune, "DELETE_SPAN", 7)  # several transactions a partition
    data = tmp_path / "data"
    settings = Settings(data_dir=data, db_url=view_url, partitions=2)
    _history(settings, range(1, 21))
    before = _decisions(view_url)
    backend = ["--data-dir", str(data), "--db", view_url]
    code, out, _ = cli("prune", *backend, "--before-ms", "10000", "--dry-run", "--json")
    assert code == 0 and _decisions(view_url) == before
    older = [d for d in before if d[3] < 10_000]
    assert 0 < len(older) < len(before)
    assert json.loads(out)["rows"] == len(older)

    code, out, _ = cli("prune", *backend, "--before-ms", "10000")
    assert (code, out) == (0, f"deleted {len(older):,} outcome rows decided before 10000\n")
    assert _decisions(view_url) == [d for d in before if d[3] >= 10_000]

    # the writers resume from the view as before, and decide on
    _history(settings, range(21, 23))
    assert len(_decisions(view_url)) > len(before) - len(older)
    # the reservation stays in the view; its decisions are gone
    gone = json.loads(cli("history", *backend, "r1-0", "--json")[1])
    assert (gone["reservations"][0]["status"], gone["history"]) == ("released", [])
    kept = json.loads(cli("history", *backend, "r15-0", "--json")[1])
    assert [step["kind"] for step in kept["history"]] == ["accepted", "consumed", "released"]

    # the log still holds everything: a replay writes every outcome again
    with scratch_database() as fresh:
        replayed = replay(Settings(data_dir=data, db_url=fresh), verify=True)
        assert replayed.divergence is None
        assert _decisions(fresh) == sorted(older + _decisions(view_url))


def test_nothing_to_prune_and_an_age(tmp_path: Path, cli: Cli) -> None:
    data = tmp_path / "data"
    url = f"sqlite:///{data / 'view.db'}"
    _history(Settings(data_dir=data, partitions=2), range(1, 3))
    assert prune_outcomes(make_engine(url), before_ms=0) == [
        berth.prune.Pruned(0, 0, 0),
        berth.prune.Pruned(1, 0, 0),
    ]
    # the clocks here are seconds after 1970: all older than a day
    code, out, _ = cli("prune", "--data-dir", str(data), "--older-than-days", "1", "--json")
    assert code == 0 and _decisions(url) == []
    assert json.loads(out)["rows"] > 0
    code, _, err = cli("prune", "--data-dir", str(data), "--older-than-days", "-1")
    assert code == 2 and "must not be negative" in err
