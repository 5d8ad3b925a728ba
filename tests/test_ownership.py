"""One process per partition, whatever the log: what the embedded log
refuses by file locks, the view refuses for every log (Kafka's included),
by session advisory locks on PostgreSQL and by file locks beside SQLite's
file."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from berth.app import App, Settings
from ledger.log import OwnedElsewhere
from projections.view.engine import make_engine
from projections.view.ownership import OwnershipLost, ViewOwnership, _topic_key
from scheduling.config import SchedulerConfig
from tests.polling import wait_for

_LOCKS = text(
    "SELECT pid, objid FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def _lock_holders(engine: Engine) -> dict[int, set[int]]:
    """Backend pid -> the partitions it holds a lock on, in this test's database."""
    with engine.connect() as conn:
        holders: dict[int, set[int]] = {}
        for pid, partition in conn.execute(_LOCKS):
            holders.setdefault(pid, set()).add(partition)
        return holders


def _terminate(engine: Engine, pid: int) -> None:
    with engine.connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()


def _app(data_dir: Path, view_url: str) -> App:
    """An app on its own embedded log (whose file locks then cannot tell
    it from the others) and the shared view."""
    return App(Settings(data_dir=data_dir, db_url=view_url, partitions=4))


def test_a_second_owner_of_a_partition_is_refused(tmp_path: Path, postgres_url: str) -> None:
    with _app(tmp_path / "a", postgres_url) as first, _app(tmp_path / "b", postgres_url) as second:
        first.writers([0, 1])
        first.writers([1])  # owned here already
        second.writers([2, 3])
        with pytest.raises(OwnedElsewhere, match=r"partition 1 of 'berth\.events' is already"):
            second.writers([1])
        first.scheduler_worker(SchedulerConfig.default(), lambda: None, partitions=[0])
        with pytest.raises(OwnedElsewhere, match=r"partition 0 of 'berth\.requests'"):
            second.scheduler_worker(SchedulerConfig.default(), lambda: None)
        second.scheduler_worker(SchedulerConfig.default(), lambda: None, partitions=[1, 2, 3])
        first.close()
        assert [w.partition for w in second.writers([0, 1])] == [0, 1]


def test_a_sqlite_view_refuses_a_second_owner(tmp_path: Path) -> None:
    view = f"sqlite:///{tmp_path / 'view.db'}"
    with _app(tmp_path / "a", view) as first, _app(tmp_path / "b", view) as second:
        first.writers([0, 1])
        first.writers([1])  # owned here already
        with pytest.raises(OwnedElsewhere, match=r"partition 1 of 'berth\.events' is already"):
            second.writers([1, 2])
        second.writers([2, 3])
        first.scheduler_worker(SchedulerConfig.default(), lambda: None, partitions=[0])
        with pytest.raises(OwnedElsewhere, match=r"partition 0 of 'berth\.requests'"):
            second.scheduler_worker(SchedulerConfig.default(), lambda: None)
        first.close()
        assert [w.partition for w in second.writers([0, 1])] == [0, 1]
    # two views in memory are two databases: no partition of one is the other's
    for ownership in (ViewOwnership(make_engine("sqlite://")) for _ in range(2)):
        ownership.own("t", [0])
        ownership.close()


def test_a_dead_owner_s_partitions_are_free_again(tmp_path: Path, postgres_url: str) -> None:
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys
                from pathlib import Path
                from berth.app import App, Settings
                app = App(Settings(data_dir=Path({str(tmp_path / "a")!r}),
                                   db_url={postgres_url!r}, partitions=4))
                app.writers([2])
                print("owned", flush=True)
                sys.stdin.read()  # held until killed
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline() == b"owned\n"
        with _app(tmp_path / "b", postgres_url) as second:
            with pytest.raises(OwnedElsewhere, match=r"partition 2 of 'berth\.events'"):
                second.writers([2])
            owner.send_signal(signal.SIGKILL)
            owner.wait(timeout=30)

            def owned() -> bool:
                try:
                    second.writers([2])
                except OwnedElsewhere:
                    return False
                return True

            wait_for(owned, "the server to end the killed owner's session")
    finally:
        owner.kill()
        owner.wait(timeout=30)


def test_closing_gives_the_partitions_up_at_once(postgres_url: str) -> None:
    engines = [make_engine(postgres_url), make_engine(postgres_url)]
    first, second = (ViewOwnership(engine) for engine in engines)
    try:
        first.own("t", [0, 1])
        with pytest.raises(OwnedElsewhere, match="partition 1 of 't'"):
            second.own("t", [1])
        second.own("u", [1])  # another topic's partition 1
        first.close()  # its engine, and the engine's pool, still open
        second.own("t", [0, 1])
    finally:
        second.close()
        for engine in engines:
            engine.dispose()


def test_an_owner_whose_session_ended_finds_out(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    ownership, successor = ViewOwnership(engine), ViewOwnership(engine)
    try:
        ownership.confirm()  # owns nothing yet: nothing to lose
        ownership.own("t", [0, 1])
        ownership.confirm()
        ((pid, partitions),) = _lock_holders(engine).items()
        assert partitions == {0, 1}
        _terminate(engine, pid)
        with pytest.raises(OwnershipLost, match=r"lost the PostgreSQL session .*AdminShutdown"):
            ownership.confirm()
        ownership.confirm()  # gave its partitions up: nothing left to lose
        successor.own("t", [0, 1])
        ownership.own("t", [2])  # a new session
        assert sorted(map(sorted, _lock_holders(engine).values())) == [[0, 1], [2]]
    finally:
        ownership.close()
        successor.close()
        engine.dispose()


def test_an_owner_whose_session_lost_its_locks_finds_out(postgres_url: str) -> None:
    """As behind a pooler that hands each statement another server session."""
    engine = make_engine(postgres_url)
    ownership = ViewOwnership(engine)
    try:
        ownership.own("t", [0, 1])
        session = ownership._session
        assert session is not None
        session.execute(text("SELECT pg_advisory_unlock(:t, 1)"), {"t": _topic_key("t")})
        with pytest.raises(OwnershipLost, match=r"it holds 1 of the 2 locks taken"):
            ownership.confirm()
        assert _lock_holders(engine) == {}
    finally:
        ownership.close()
        engine.dispose()


def test_a_projector_that_lost_its_partitions_stops(tmp_path: Path, postgres_url: str) -> None:
    projector = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "berth.cli",
            "projector",
            "--data-dir",
            str(tmp_path / "data"),
            "--db",
            postgres_url,
            "--partitions",
            "2",
            "--ownership-check-s",
            "0.1",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    engine = make_engine(postgres_url)
    try:
        # it takes its partitions one after the other: wait for both
        wait_for(
            lambda: list(_lock_holders(engine).values()) == [{0, 1}],
            "the projector to own its partitions",
        )
        ((pid, _),) = _lock_holders(engine).items()
        _terminate(engine, pid)
        _, err = projector.communicate(timeout=60)
        assert projector.returncode == 1, err
        assert "berth: lost the PostgreSQL session that locks this process's partitions" in err
    finally:
        projector.kill()
        projector.communicate(timeout=30)
        engine.dispose()
