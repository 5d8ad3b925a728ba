"""A wait for the view's commit is woken by the commit, made in another
process, on SQLite (its WAL rings a doorbell) and on PostgreSQL (the commit
NOTIFYs): within a deadline, many times in a row, and without spending CPU
while nothing commits."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine

from projections.view.commits import wait_committed
from projections.view.engine import make_engine
from projections.view.migrate import upgrade
from tests.polling import wait_for

# woken, a wait returns within a few milliseconds of the commit; one late
# round is a busy machine's (the CI runs two test processes), not a missed wake
WAKE_MEDIAN_S = 0.02
WAKE_DEADLINE_S = 0.5
ROUNDS = 30

# a view writer of its own: moves partition 0's offset to each number it is
# given, NOTIFYing and ringing as the view's commits do, and says when it has
# committed
_COMMITTER = """
import sys, time
from sqlalchemy import text
from projections.view.commits import notify_commit, ring_committed
from projections.view.engine import make_engine
engine = make_engine(sys.argv[1], writer=True)
print("ready", flush=True)
for line in sys.stdin:
    with engine.begin() as conn:
        conn.execute(
            text('UPDATE partition_offsets SET next_offset = :n WHERE "partition" = 0'),
            {"n": int(line)},
        )
        notify_commit(conn, 0)
    ring_committed(engine)
    print(time.monotonic(), flush=True)
"""


def _blocked(thread: threading.Thread) -> bool:
    """Whether ``thread`` sleeps in the kernel waiting on a file (a
    doorbell's or the database socket's poll)."""
    wchan = Path(f"/proc/self/task/{thread.native_id}/wchan").read_text()
    return "poll" in wchan or "select" in wchan


@contextmanager
def _committer(url: str) -> Iterator[subprocess.Popen[str]]:
    engine = make_engine(url)
    upgrade(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            'INSERT INTO partition_offsets ("partition", partitions, next_offset, clock_ms) '
            "VALUES (0, 1, 0, 0)"
        )
    engine.dispose()
    process = subprocess.Popen(
        [sys.executable, "-c", _COMMITTER, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        yield process
    finally:
        process.kill()
        process.wait()


def _woken_after_commit(engine: Engine, committer: subprocess.Popen[str], offset: int) -> float:
    """How long after the other process committed ``offset + 1`` a wait for
    it that was already blocked returned."""
    assert committer.stdin is not None and committer.stdout is not None
    woke: list[float] = []

    def wait() -> None:
        if wait_committed(engine, 0, offset, 10.0):
            woke.append(time.monotonic())

    waiter = threading.Thread(target=wait)
    waiter.start()
    # a commit before the wait would end it too, but unwoken
    wait_for(lambda: _blocked(waiter), "the waiter to block")
    committer.stdin.write(f"{offset + 1}\n")
    committer.stdin.flush()
    committed = float(committer.stdout.readline())
    waiter.join(10)
    assert woke, f"offset {offset}: not woken"
    return woke[0] - committed


def test_a_wait_wakes_on_another_process_commit_within_the_deadline(view_url: str) -> None:
    engine = make_engine(view_url)
    with _committer(view_url) as committer:
        late = [_woken_after_commit(engine, committer, offset) for offset in range(ROUNDS)]
    engine.dispose()
    assert max(late) < WAKE_DEADLINE_S, late
    assert sorted(late)[len(late) // 2] < WAKE_MEDIAN_S, late


def test_a_wait_spends_no_cpu_while_nothing_commits(view_url: str) -> None:
    engine = make_engine(view_url)
    with _committer(view_url):
        spent: list[float] = []

        def wait() -> None:
            start = time.thread_time()
            assert not wait_committed(engine, 0, 5, 0.5)
            spent.append(time.thread_time() - start)

        waiter = threading.Thread(target=wait)
        started = time.monotonic()
        waiter.start()
        waiter.join(10)
        assert time.monotonic() - started >= 0.5
        # a poll every few milliseconds would spend tens of milliseconds here
        assert spent and spent[0] < 0.01, spent
    engine.dispose()
