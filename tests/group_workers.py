"""``berth worker`` processes in one consumer group, for the takeover tests:
started, killed (SIGKILL), paused (SIGSTOP) and resumed as an operator's
supervisor or a bad day would, with a steady publisher beside them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine, func, select

from berth.app import App, Settings
from berth.client import Publisher
from projections.view.generations import Owner, owners
from projections.view.loader import committed_offsets
from projections.view.tables import inventories, outcomes, reservations
from tests.builders import claim, provider
from tests.polling import wait_for

SESSION_TIMEOUT_S = 4.0
"""Short, so that a takeover is quick; tansu's join waits about half of it."""


@dataclass
class Group:
    """Worker processes of one deployment, each logging to its own file."""

    settings: Settings
    logs: Path
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, *options: str) -> int:
        """A new worker, with ``berth worker`` ``options`` beside the
        deployment's; its pid."""
        path = self.logs / f"worker-{len(self.processes)}.log"
        with path.open("wb") as out:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "berth.cli",
                    "worker",
                    "--log",
                    self.settings.log_url,
                    "--db",
                    self.settings.db_url,
                    "--partitions",
                    str(self.settings.partitions),
                    "--session-timeout-s",
                    str(SESSION_TIMEOUT_S),
                    *options,
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.processes[process.pid] = process
        return process.pid

    def log_of(self, pid: int) -> str:
        number = list(self.processes).index(pid)
        return (self.logs / f"worker-{number}.log").read_text(errors="replace")

    def signal(self, pid: int, signum: int) -> None:
        os.kill(pid, signum)
        if signum == signal.SIGKILL:
            self.processes[pid].wait(timeout=10)

    def alive(self) -> list[int]:
        return [pid for pid, p in self.processes.items() if p.poll() is None]

    def stop(self) -> dict[int, int]:
        """SIGTERM to every worker still running (resumed first if paused);
        their exit statuses."""
        statuses = {}
        for pid in self.alive():
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGTERM)
        for pid in self.alive():
            try:
                statuses[pid] = self.processes[pid].wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.processes[pid].kill()
                statuses[pid] = self.processes[pid].wait()
        return statuses


@contextmanager
def worker_group(settings: Settings, logs: Path) -> Iterator[Group]:
    group = Group(settings, logs)
    try:
        yield group
    finally:
        group.stop()


def holders(engine: Engine) -> dict[int, Owner]:
    with engine.connect() as conn:
        return owners(conn)


def owner_pid(owner: Owner) -> int:
    return int(owner.owner.rsplit(":", 1)[1])


def wait_for_assignment(engine: Engine, pids: list[int], partitions: int, timeout_s: float) -> None:
    """Until every partition is held, each by one of ``pids``, all of them holding one."""

    def assigned() -> bool:
        held = holders(engine)
        return len(held) == partitions and {owner_pid(o) for o in held.values()} == set(pids)

    wait_for(assigned, f"partitions assigned across workers {pids}", timeout_s)


class Traffic(threading.Thread):
    """Publishes claims in small batches until stopped or ``total`` are out;
    keeps the reservation ids whose publish was acknowledged."""

    def __init__(self, app: App, total: int, per_batch: int = 20, prefix: str = "r") -> None:
        super().__init__(daemon=True)
        self.edge = Publisher(app.log, app.settings.topics)
        self.total, self.per_batch, self.prefix = total, per_batch, prefix
        self.acknowledged: list[str] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            sent = 0
            while sent < self.total and not self.stopping.is_set():
                ids = [f"{self.prefix}{sent + k}" for k in range(self.per_batch)]
                # ts 10: every hold lives until the end of the test (lease 1 s of log time)
                self.edge.publish(
                    [claim(rid, f"n{i % 6}", ts=10, VCPU=1) for i, rid in enumerate(ids, sent)]
                )
                self.acknowledged.extend(ids)
                sent += self.per_batch
                self.stopping.wait(0.02)  # a steady stream, not a burst
        except BaseException as error:  # reported by the test
            self.error = error

    def stop(self) -> list[str]:
        self.stopping.set()
        self.join(timeout=60)
        assert self.error is None, self.error
        return self.acknowledged


def publish_providers(app: App, vcpus: int) -> None:
    Publisher(app.log, app.settings.topics).publish(
        [e for k in range(6) for e in provider(f"n{k}", ts=1, VCPU=vcpus)]
    )


def wait_until_applied(app: App, timeout_s: float) -> None:
    """Until the view holds every record of every partition."""
    topic, count = app.settings.topics.events, app.settings.partitions

    def applied() -> bool:
        ends = [app.log.end_offset(topic, p) for p in range(count)]
        with app.engine.connect() as conn:
            done = committed_offsets(conn)
        return all(done.get(p, 0) == end for p, end in enumerate(ends))

    wait_for(applied, "the view to apply every record", timeout_s)


def applied_offset(app: App, partition: int) -> int:
    with app.engine.connect() as conn:
        return committed_offsets(conn).get(partition, 0)


def check_integrity(app: App, acknowledged: list[str]) -> None:
    """Every acknowledged claim decided exactly once, none lost, no provider
    over its capacity."""
    with app.engine.connect() as conn:
        decided: dict[str, int] = dict(
            conn.execute(
                select(outcomes.c.subject, func.count())
                .where(outcomes.c.kind.in_(["accepted", "rejected"]))
                .group_by(outcomes.c.subject)
            ).all()
        )
        held = dict(
            conn.execute(select(reservations.c.reservation_id, reservations.c.status)).all()
        )
        free = conn.execute(select(func.min(inventories.c.free))).scalar_one()
    missing = [rid for rid in acknowledged if rid not in decided]
    assert not missing, f"{len(missing)} acknowledged claims never decided, e.g. {missing[:5]}"
    twice = {rid: n for rid, n in decided.items() if n != 1}
    assert not twice, f"claims decided more than once: {list(twice.items())[:5]}"
    assert all(held[rid] == "held" for rid in acknowledged if rid in held)
    assert free >= 0, "a provider is over its capacity"


def wall() -> float:
    return time.monotonic()
