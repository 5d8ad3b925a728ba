"""Fencing by generation: a writer that took a partition over refuses every
later commit of the writer it replaced, in the commit's own transaction."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import event, text

from berth.app import App, Settings
from berth.client import Publisher
from consumers.group_writers import GroupWriters
from consumers.partition_writer import PartitionWriter, catch_up_all, step_all
from ledger.partitioner import partition_for
from projections.view.generations import owners, take_partition
from projections.view.loader import committed_offsets
from projections.view.writer import Fenced, Stalled
from tests.builders import claim, provider
from tests.polling import wait_for
from tests.stopped_commit import StoppedInCommit


def _writer(app: App, owner: str) -> PartitionWriter:
    return PartitionWriter(app.log, app.view, 0, 1, app.settings.topics, owner=owner)


def _publish(app: App, *ids: str) -> None:
    Publisher(app.log, app.settings.topics).publish(
        [claim(rid, "n1", ts=10, VCPU=1) for rid in ids]
    )


def test_a_replaced_writer_cannot_commit(tmp_path: Path, view_url: str) -> None:
    with App(Settings(data_dir=tmp_path, db_url=view_url, partitions=1)) as app:
        Publisher(app.log, app.settings.topics).publish(provider("n1", ts=1, VCPU=4))
        old = _writer(app, "old:1")
        old.catch_up()
        _publish(app, "r1", "r2")
        new = _writer(app, "new:2")
        assert (old.generation, new.generation) == (1, 2)
        with pytest.raises(Fenced, match="generation 2"):
            old.step()
        with app.engine.connect() as conn:
            assert committed_offsets(conn) == {0: 2}  # the provider's records only
        assert new.catch_up() == 2
        with app.engine.connect() as conn:
            assert committed_offsets(conn) == {0: 4}
            assert owners(conn)[0].owner == "new:2"


def test_a_takeover_waits_for_a_commit_in_flight(postgres_url: str, tmp_path: Path) -> None:
    """On PostgreSQL a commit reads its generation with a share lock: a
    takeover's update waits until the commit is done, so the new owner's
    state has it (or, had the takeover come first, the commit is refused)."""
    with App(Settings(data_dir=tmp_path, db_url=postgres_url, partitions=1)) as app:
        take_partition(app.write_engine, 0, "old:1")
        taken = threading.Event()
        with app.write_engine.connect() as commit:
            commit.execute(
                text('SELECT generation FROM partition_owners WHERE "partition" = 0 FOR SHARE')
            )

            def take_over() -> None:
                take_partition(app.write_engine, 0, "new:2")
                taken.set()

            takeover = threading.Thread(target=take_over)
            takeover.start()
            wait_for(lambda: _waiting_on_a_lock(app) > 0, "the takeover to wait for the row")
            assert not taken.is_set()
            commit.commit()
        takeover.join(timeout=10)
        assert taken.is_set()


def test_a_writer_stopped_mid_commit_holds_a_takeover_back_only_its_stall_bound(
    postgres_url: str, tmp_path: Path
) -> None:
    """A writer whose process stops inside its commit (SIGSTOP, a stalled
    machine) holds its partition's owner row: PostgreSQL ends its
    transaction once idle for the stall bound, the takeover goes on, and the
    writer, resumed, is told it stalled; nothing it had not committed is lost."""
    with App(Settings(data_dir=tmp_path, db_url=postgres_url, partitions=1)) as app:
        Publisher(app.log, app.settings.topics).publish(provider("n1", ts=1, VCPU=4))
        app.view.stall_ms = 300
        old = _writer(app, "old:1")
        old.catch_up()
        _publish(app, "r1", "r2")
        stopped = StoppedInCommit(app.write_engine, old.step)
        assert _returns_within(10, lambda: _writer(app, "new:2")), (
            "the takeover waited on the stopped writer"
        )
        assert stopped.resume() == [Stalled]
        new = _writer(app, "new:3")
        assert new.catch_up() == 2
        with app.engine.connect() as conn:
            assert committed_offsets(conn) == {0: 4}


def _waiting_on_a_lock(app: App) -> int:
    with app.engine.connect() as conn:
        query = text(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(conn.execute(query).scalar_one())


def test_group_writers_drop_a_partition_taken_elsewhere(tmp_path: Path, view_url: str) -> None:
    """The worker's side: the commit is refused, the writer dropped, the
    refusal counted, and the other partitions go on."""
    with App(Settings(data_dir=tmp_path, db_url=view_url, partitions=1)) as app:
        Publisher(app.log, app.settings.topics).publish(provider("n1", ts=1, VCPU=4))
        here = GroupWriters(app.view, lambda p: _writer(app, "here:1"))
        assert here.assign([0]) == [0]
        assert not here.catch_up()
        assert here.assign([0]) == [], "a writer kept through a rebalance is kept"
        _publish(app, "r1")
        _writer(app, "there:2")  # another worker takes partition 0 over
        records = app.log.read(app.settings.topics.events, 0, 2, 10)
        here.behind.clear()
        assert here.write(records) == 0
        assert here.fenced == 1
        assert here.writers == {}
        assert here.assign([0]) == [0], "given back, it is taken over afresh"


def _one_each(partitions: int) -> list[str]:
    """A provider id in each partition, in partition order."""
    names: dict[int, str] = {}
    n = 0
    while len(names) < partitions:
        names.setdefault(partition_for(f"n{n}".encode(), partitions), f"n{n}")
        n += 1
    return [names[p] for p in range(partitions)]


def test_a_round_commits_every_partition_in_one_transaction(tmp_path: Path) -> None:
    with App(Settings(data_dir=tmp_path, partitions=3)) as app:
        pids = _one_each(3)
        publisher = Publisher(app.log, app.settings.topics)
        publisher.publish([e for pid in pids for e in provider(pid, ts=1, VCPU=4)])
        writers = app.writers()
        commits: list[object] = []

        def committed(conn: object) -> None:
            commits.append(conn)

        event.listen(app.view.engine, "commit", committed)
        try:
            assert catch_up_all(writers) == 6
        finally:
            event.remove(app.view.engine, "commit", committed)
        assert len(commits) == 1, "one transaction for the three partitions' batches"
        with app.engine.connect() as conn:
            assert committed_offsets(conn) == {0: 2, 1: 2, 2: 2}
        assert [w.next_offset for w in writers] == [2, 2, 2]


def test_a_fenced_partition_in_a_round_stops_only_itself(tmp_path: Path, view_url: str) -> None:
    """The round's transaction is refused for one partition: each batch is
    then committed alone, the others go in, and the refusal is raised."""
    with App(Settings(data_dir=tmp_path, db_url=view_url, partitions=2)) as app:
        pids = _one_each(2)
        publisher = Publisher(app.log, app.settings.topics)
        publisher.publish([e for pid in pids for e in provider(pid, ts=1, VCPU=4)])
        writers = [
            PartitionWriter(app.log, app.view, p, 2, app.settings.topics, owner="old:1")
            for p in range(2)
        ]
        assert catch_up_all(writers) == 4
        publisher.publish([claim(f"r{p}", pid, ts=10, VCPU=1) for p, pid in enumerate(pids)])
        take_partition(app.write_engine, 1, "new:2")
        with pytest.raises(Fenced, match="partition 1"):
            step_all(writers)
        with app.engine.connect() as conn:
            assert committed_offsets(conn) == {0: 3, 1: 2}
        assert [w.next_offset for w in writers] == [3, 2]


def test_a_commit_stopped_mid_pipeline_holds_a_takeover_back_only_its_stall_bound(
    postgres_url: str, tmp_path: Path
) -> None:
    """A writer stopped while psycopg pipelines its commit's statements
    leaves its session waiting for the rest of them: active, not idle, so
    PostgreSQL's idle bound never ends it. The takeover ends it once it has
    waited the stall bound, and the writer's later commit is fenced."""
    with App(Settings(data_dir=tmp_path, db_url=postgres_url, partitions=1)) as app:
        Publisher(app.log, app.settings.topics).publish(provider("n1", ts=1, VCPU=4))
        old = _writer(app, "old:1")
        old.catch_up()
        _publish(app, "r1")
        holder = psycopg.connect(postgres_url.replace("+psycopg", ""))
        try:
            # what a commit does first (see writer.Planned), then statements
            # sent without the Sync that would end the pipeline
            holder.execute(
                'SELECT generation FROM partition_owners WHERE "partition" = 0 FOR SHARE'
            )
            raw = holder.pgconn
            raw.enter_pipeline_mode()
            raw.send_query_params(b"SELECT 1", None)
            raw.send_flush_request()
            raw.flush()
            wait_for(lambda: _state(app, raw.backend_pid) == "active", "the holder active")
            assert _returns_within(30, lambda: take_partition(app.write_engine, 0, "new:2", 300)), (
                "the takeover waited on the stopped pipeline"
            )
            assert _state(app, raw.backend_pid) is None  # its session ended
        finally:
            holder.close()
        with pytest.raises(Fenced, match=r"generation 2|taken over"):
            old.step()


def _state(app: App, pid: int) -> str | None:
    with app.engine.connect() as conn:
        query = text("SELECT state FROM pg_stat_activity WHERE pid = :pid")
        found = conn.execute(query, {"pid": pid}).scalar_one_or_none()
        return None if found is None else str(found)


def test_a_writer_whose_stopped_commit_the_takeover_ended_is_fenced(
    postgres_url: str, tmp_path: Path
) -> None:
    """The takeover ends the session of a writer stopped in its commit past
    the stall bound (here its own idle bound is longer than the takeover's);
    the writer, resumed, finds its connection gone and is told it was
    fenced, not a database error."""
    with App(Settings(data_dir=tmp_path, db_url=postgres_url, partitions=1)) as app:
        Publisher(app.log, app.settings.topics).publish(provider("n1", ts=1, VCPU=4))
        app.view.stall_ms = 60_000
        old = _writer(app, "old:1")
        old.catch_up()
        _publish(app, "r1", "r2")
        stopped = StoppedInCommit(app.write_engine, old.step)
        assert _returns_within(30, lambda: take_partition(app.write_engine, 0, "new:2", 300)), (
            "the takeover waited on the stopped commit"
        )
        assert stopped.resume() == [Fenced]
        assert "taken over while this writer's commit was stopped" in str(stopped.failures[0])
        new = _writer(app, "new:3")
        assert new.catch_up() == 2
        with app.engine.connect() as conn:
            assert committed_offsets(conn) == {0: 4}


def _returns_within(seconds: float, call: Callable[[], object]) -> bool:
    """Whether ``call``, run in a thread, returns within ``seconds``."""
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    return not thread.is_alive()
