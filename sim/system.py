"""The real components, composed in one process on the simulated log and
clock the way ``berth.app.App`` composes them on real ones, each able to
crash and start again from what is durable.

The writers are a :class:`~consumers.group_writers.GroupWriters`, the part
of ``berth worker`` that takes what a consumer delivers (duplicates, gaps,
partitions interleaved) and reads the log where the delivery falls short.
Each scheduler is a :class:`~consumers.scheduler_worker.SchedulerWorker`
with its :class:`~consumers.batches.BatchScheduler` and
:class:`~consumers.coordinator.Coordinator`, answering its share of the
requests' partitions and racing the others for the same providers; the
reaper ticks through its own publisher. Nothing here reads the wall clock: every producer's clock is
the simulation's, plus its skew.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import cast

from sqlalchemy import Engine

from berth.app import Settings, create_topics
from consumers.balance_worker import BalanceWorker
from consumers.batches import BatchScheduler
from consumers.coordinator import Coordinator
from consumers.group_writers import GroupWriters
from consumers.partition_writer import PartitionWriter
from consumers.policies import PolicyBook
from consumers.reaper import Reaper
from consumers.scheduler import OutcomeFollower, Scheduler
from consumers.scheduler_worker import SchedulerWorker
from consumers.server_groups import LiveRules
from consumers.snapshot_source import LiveSnapshot
from ledger.publisher import Publisher
from projections.batch import Batch
from projections.state import PartitionState
from projections.view.engine import make_engine, sqlite_url
from projections.view.migrate import upgrade
from projections.view.writer import ViewWriter
from scheduling.config import SchedulerConfig
from sim.log import Crash, SimLog

NEVER_S = 1e9
"""The wall-clock timeouts of the scheduler and coordinator: never reached.
The simulation bounds their waits by steps instead (see ``Run.pump``)."""


class Clock:
    """Simulated time, in ms since the epoch; only the simulation moves it."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def skewed(self, skew_ms: int) -> Callable[[], int]:
        return lambda: self.now_ms + skew_ms


class FaultyView:
    """The view's writer (composed: the compiled class cannot be
    subclassed), whose commit may fail before it commits (the database
    refused) or crash the writer right after it did."""

    def __init__(self, engine: Engine, fault: Callable[[], str | None]) -> None:
        self.inner = ViewWriter(engine)
        self.engine = engine
        self.fault = fault
        self.commits = 0

    @property
    def stall_ms(self) -> int:
        """The inner writer's bound, which a takeover waits at most."""
        return self.inner.stall_ms

    def commit(self, state: PartitionState, batch: Batch, generation: int | None = None) -> bool:
        fault = self.fault()
        if fault == "fail":
            raise Crash("the view's commit failed")
        done = self.inner.commit(state, batch, generation)
        self.commits += 1
        if fault == "crash":
            raise Crash("crashed after the view committed")
        return done


_TEMPLATES: dict[str, Path] = {}


def migrated_view(directory: Path) -> str:
    """A fresh, migrated SQLite view in ``directory``: a copy of one migrated
    once per process (migrations take longer than a short run)."""
    template = _TEMPLATES.get("view")
    if template is None or not template.exists():
        template = Path(tempfile.mkdtemp(prefix="berth-sim-template-")) / "view.db"
        engine = make_engine(sqlite_url(str(template)), writer=True)
        upgrade(engine)
        engine.dispose()
        raw = sqlite3.connect(template)
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raw.close()
        _TEMPLATES["view"] = template
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "view.db"
    shutil.copyfile(template, target)
    return sqlite_url(str(target))


class System:
    """The log, the view and the workers on them."""

    def __init__(
        self,
        directory: Path,
        partitions: int,
        clock: Clock,
        log: SimLog,
        view_fault: Callable[[], str | None],
        pump: Callable[[], object],
        scheduler_skews_ms: tuple[int, ...],
        batch_size: Callable[[], int],
    ) -> None:
        """One scheduler per skew in ``scheduler_skews_ms``."""
        self.settings = Settings(data_dir=directory, partitions=partitions)
        self.topics = self.settings.topics
        self.partitions = partitions
        self.clock = clock
        self.log = log
        create_topics(log, self.settings)
        self.view_url = migrated_view(directory)
        self.engine = make_engine(self.view_url)
        self.write_engine = make_engine(self.view_url, writer=True)
        self.faulty_view = FaultyView(self.write_engine, view_fault)
        # duck-typed: the writers use only its engine and commit
        self.view = cast(ViewWriter, self.faulty_view)
        self.pump = pump
        self.scheduler_skews_ms = scheduler_skews_ms
        self.batch_size = batch_size
        self.config = SchedulerConfig.default()
        self.starts = {"writers": 0, "scheduler": 0}
        self.ids = 0
        self.writers = self._writers()
        count = len(scheduler_skews_ms)
        self.schedulers: list[SchedulerWorker | None] = [None] * count
        self.starting: list[Scheduler | None] = [None] * count

    def new_id(self) -> str:
        self.ids += 1
        return f"sim{self.ids}"

    # -- writers -------------------------------------------------------------

    def _writers(self) -> GroupWriters:
        self.starts["writers"] += 1
        group = GroupWriters(self.view, self.make_writer, batch_size=self.batch_size())
        group.assign(range(self.partitions))
        return group

    def make_writer(self, partition: int) -> PartitionWriter:
        owner = f"writers-{self.starts['writers']}"
        return PartitionWriter(
            self.log,
            self.view,
            partition,
            self.partitions,
            self.topics,
            batch_size=self.batch_size(),
            owner=owner,
        )

    def restart_writers(self) -> None:
        """The writers' process died: a new one takes every partition over."""
        self.writers = self._writers()

    def restart_writer(self, partition: int) -> None:
        """One partition's writer stopped (halted on damage, or crashed): it is
        taken over afresh and reloads its state from the view."""
        self.writers.revoke([partition])
        self.writers.assign(range(self.partitions))

    # -- the scheduler -----------------------------------------------------------

    def publisher(self, skew_ms: int) -> Publisher:
        return Publisher(
            self.log, self.topics, clock_ms=self.clock.skewed(skew_ms), new_id=self.new_id
        )

    def start_scheduler(self, index: int) -> SchedulerWorker:
        """Scheduler ``index``'s process as ``App.scheduler_worker`` makes
        one, answering the requests' partitions ``p`` with ``p % count ==
        index``: it resumes from its answers and finishes the transactions
        a dead one began (both may be interrupted by a crash, and started
        again)."""
        self.starts["scheduler"] += 1
        self.schedulers[index] = None
        publisher = self.publisher(self.scheduler_skews_ms[index])
        follower = OutcomeFollower(self.log, self.topics.outcomes)
        policies = PolicyBook(self.log, self.topics, self.config)
        snapshot = LiveSnapshot(self.engine, placements=True)
        engine = policies.default().engine
        scheduler = Scheduler(
            publisher,
            engine,
            snapshot,
            follower,
            pump=self.pump,
            max_attempts=self.config.max_attempts,
            decision_timeout_s=NEVER_S,
            policies=policies,
        )
        coordinator = Coordinator(
            publisher, self.log, self.topics, follower, pump=self.pump, decision_timeout_s=NEVER_S
        )
        batches = BatchScheduler(
            coordinator,
            engine,
            snapshot,
            publisher.partitions,
            pump=self.pump,
            max_attempts=self.config.max_attempts,
            groups=LiveRules(self.engine),
        )
        # its generation names what a crash while starting abandons
        self.starting[index] = scheduler
        count = len(self.schedulers)
        requests = range(self.log.partition_count(self.topics.requests))
        worker = SchedulerWorker(
            self.log,
            self.topics,
            scheduler,
            partitions=[p for p in requests if p % count == index],
            batches=batches,
            batch_size=8,
        )
        # schedulers started with the log at the same ends would share a
        # generation: each one's own, so that what a crash abandons is its own
        scheduler.generation = batches.generation = f"{scheduler.generation}s{index}"
        self.schedulers[index] = worker
        return worker

    def balancer(self, skew_ms: int) -> BalanceWorker:
        """``berth balance --claim``: even out VCPU use above half of capacity."""
        config = SchedulerConfig.from_mapping(
            {"balance": {"policy": "evenly_distributed", "high_utilization": 50.0}}
        )
        return BalanceWorker(
            self.engine, self.publisher(skew_ms), config, claim=True, lease_ms=30_000
        )

    def reaper(self, skew_ms: int) -> Reaper:
        return Reaper(self.publisher(skew_ms), interval_s=1.0)

    def close(self) -> None:
        self.engine.dispose()
        self.write_engine.dispose()
