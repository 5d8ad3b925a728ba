"""``berth replay --until-ms``: the view as it was when each partition's
clock reached a time is the view the live writers left when they had
decided exactly those records."""

from __future__ import annotations

import json
import multiprocessing
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import berth.replay
from bench.common import claim, lifecycle
from bench.projector import _populate
from berth.app import App, Settings, open_log
from berth.cli import main
from berth.replay import replay
from consumers.partition_writer import catch_up_all
from ledger.log import Append
from ledger.partitioner import partition_for
from projections.view.engine import make_engine
from schemas.codec import EventDecodeError, decode_event
from tests.contracts.view_contract import BATCH_DEPENDENT, _dump
from tests.postgres import scratch_database

PARTITIONS = 4
UNTIL_MS = 4_500
BAD = b'{"type": "claim", "event_id": "bad", "ts_ms": 999999999999}'
"""Not an event: its stamp, far past UNTIL_MS, moves no clock."""


def _write(data: Path) -> str:
    """Claims, consumes and releases stamped 1,000-4,000 on 40 providers,
    then 5,000-8,000; a record that does not decode among the first, and a
    claim stamped 1,500 among the second. Returns that late claim's id."""
    rng = random.Random(5)
    with App(Settings(data_dir=data, partitions=PARTITIONS)) as app:
        pids = _populate(app, 40)
        topic = app.settings.topics.events

        def appended(first_ms: int, rids: str) -> None:
            appends = []
            for k in range(400):
                pid = pids[rng.randrange(len(pids))]
                rid = f"{rids}{k}"
                ts = first_ms + k * 7
                lease = rng.choice((700, 600_000))
                appends.append(
                    Append(partition_for(pid.encode(), PARTITIONS), b"", claim(rid, pid, ts, lease))
                )
                if rng.random() < 0.4:
                    kind = rng.choice(("consume", "release"))
                    appends.append(
                        Append(appends[-1].partition, b"", lifecycle(kind, rid, pid, ts + 3))
                    )
            app.log.append(topic, appends)

        appended(1_000, "a")
        app.log.append(topic, [Append(0, b"", BAD)])
        appended(5_000, "b")
        late = pids[0]
        app.log.append(
            topic,
            [Append(partition_for(late.encode(), PARTITIONS), b"", claim("late", late, 1_500))],
        )
    return "late"


def _prefix_copy(source: Path, target: Path, target_db: str) -> int:
    """Each partition's records up to its first event stamped after
    UNTIL_MS, copied into a log of their own and decided there by the live
    writers. Returns how many records were copied."""
    copied = 0
    log = open_log(Settings(data_dir=source), read_only=True)
    try:
        with App(Settings(data_dir=target, db_url=target_db, partitions=PARTITIONS)) as app:
            topic = app.settings.topics.events
            for p in range(PARTITIONS):
                prefix = []
                for record in log.read(topic, p, 0, 100_000):
                    try:
                        if decode_event(record.value).ts_ms > UNTIL_MS:
                            break
                    except EventDecodeError:
                        pass
                    prefix.append(Append(p, record.key, record.value))
                app.log.append(topic, prefix)
                copied += len(prefix)
            catch_up_all(app.writers())
    finally:
        log.close()
    return copied


@contextmanager
def _databases(kind: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'then.db'}", f"sqlite:///{tmp_path / 'prefix.db'}"
        return
    with scratch_database() as then, scratch_database() as prefix:
        yield then, prefix


@pytest.mark.parametrize(("kind", "jobs"), [("sqlite", 1), ("sqlite", 2), ("postgresql", 2)])
def test_a_view_as_of_a_time_is_the_live_view_of_that_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, jobs: int
) -> None:
    context = multiprocessing.get_context("fork")
    monkeypatch.setattr(berth.replay, "_context", lambda: context)
    data = tmp_path / "data"
    late = _write(data)
    with App(Settings(data_dir=data)) as app:  # decided live, outcomes recorded
        total = catch_up_all(app.writers())
    with _databases(kind, tmp_path) as (then_db, prefix_db):
        copied = _prefix_copy(data, tmp_path / "prefix", prefix_db)
        assert 80 < copied < total  # the registrations, the first claims, the bad record
        result = replay(
            Settings(data_dir=data, db_url=then_db), verify=True, jobs=jobs, until_ms=UNTIL_MS
        )
        assert result.records == copied
        assert result.divergence is None
        assert result.verified == result.outcomes > 0
        then, prefix = (make_engine(url) for url in (then_db, prefix_db))
        try:
            as_of = _dump(then, BATCH_DEPENDENT)
            assert as_of == _dump(prefix, BATCH_DEPENDENT)
        finally:
            then.dispose()
            prefix.dispose()
    reservations = {row[0] for row in as_of["reservations"]}
    assert "'a0'" in reservations and not any(r.startswith("'b") for r in reservations)
    assert f"'{late}'" not in reservations  # stamped early, but decided after the clock passed
    assert len(as_of["dead_letters"]) == 1  # decided, moving no clock


def test_replay_until_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    _write(data)
    with App(Settings(data_dir=data)) as app:
        catch_up_all(app.writers())
    view = data / "view.db"
    before = view.read_bytes()
    assert main(["replay", "--data-dir", str(data), "--until-ms", "4500"]) == 2
    assert "the data directory's view must not go back in time" in capsys.readouterr().err
    assert view.read_bytes() == before
    then = f"sqlite:///{tmp_path / 'then.db'}"
    argv = ["replay", "--data-dir", str(data), "--db", then, "--until-ms", "4500", "--verify"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["until_ms"] == 4500 and printed["verified"] is True
    assert 80 < printed["records"] < 1_200
    # into a view that is not empty: refused with the reason, not a traceback
    assert main(argv) == 2
    assert "already holds a view; replay needs an empty one" in capsys.readouterr().err
