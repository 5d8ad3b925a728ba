"""One process per partition with a PostgreSQL view: what the embedded log
refuses by file locks, the view's server refuses for every log (Kafka's
included) by session advisory locks."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from berth.app import App, Settings
from ledger.log import OwnedElsewhere
from placement.config import SchedulerConfig
from projections.view.engine import make_engine
from projections.view.ownership import ViewOwnership
from tests.polling import wait_for


def _app(data_dir: Path, postgres_url: str) -> App:
    """An app on its own embedded log (whose file locks then cannot tell
    it from the others) and the shared PostgreSQL view."""
    return App(Settings(data_dir=data_dir, db_url=postgres_url, partitions=4))


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
