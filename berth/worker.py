"""``berth worker``: Berth's long-running roles on Kafka as a faust-streaming app.

Any number of workers join one consumer group on the events and requests
topics; Kafka assigns each its partitions and moves a dead worker's
partitions to the others once its session times out. The events agent
hands the records the group delivers to
:class:`consumers.group_writers.GroupWriters`, which decides them with the
pure core and commits them to the view in one thread, so that the event
loop stays free to heartbeat. Offsets the group commits to Kafka are only a
hint: each writer resumes where the view says it stopped, and a writer the
group replaced is refused by the view (fencing by generation).

The requests agent wakes the scheduler of the request partitions held here
(in a second thread: it waits for the writers' decisions), which resumes
from its answers, recovers unfinished transactions when it starts, and
where it holds request partition 0 also folds the queue depth. With
``tick_every_s`` the worker also ticks the event partitions it writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import faust

from berth.app import App, Settings, tune_gc
from berth.client import Publisher
from consumers.group_writers import GroupWriters
from consumers.partition_writer import PartitionWriter
from consumers.queue_projector import QueueOffsetMoved, QueueProjector
from ledger.log import Record

if TYPE_CHECKING:
    from consumers.scheduler_worker import SchedulerWorker
    from scheduling.config import SchedulerConfig

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_SESSION_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    group: str = ""
    """The consumer group; by default ``berth-`` and the events topic's name."""
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S
    """How long the group waits for a silent worker before its partitions
    go to the others: the bound on a takeover, with the rebalance."""
    idle_wait_s: float = 0.05
    """How often partitions behind the group's consumer look for work."""
    schedule: bool = True
    """Also answer placement requests (the scheduler on the requests topic,
    and the queue projector)."""
    config: str | None = None
    """The scheduler's TOML (default: built in)."""
    tick_every_s: float = 0.0
    """Tick the partitions written here this often (0: never), so that
    quiet partitions' overdue holds expire; ``berth reaper`` does it too."""


def owner_name() -> str:
    """This process, as the view records a partition's owner."""
    return f"{socket.gethostname()}:{os.getpid()}"


def faust_app(settings: Settings, options: WorkerOptions) -> faust.App:
    """The faust app: broker, group and timeouts, nothing of Berth's yet."""
    if not settings.log_url.startswith("kafka://"):
        raise ValueError("berth worker needs a Kafka log: --log kafka://HOST:PORT")
    brokers = settings.log_url.removeprefix("kafka://")
    session = options.session_timeout_s
    return faust.App(
        options.group or f"berth-{settings.topics.events}",
        broker=[f"kafka://{b}" for b in brokers.split(",")],
        broker_session_timeout=session,
        broker_heartbeat_interval=session / 5,
        broker_rebalance_timeout=session,
        # the view is the checkpoint: a partition new to the group is read
        # from its start, and the writer skips what the view already holds
        consumer_auto_offset_reset="earliest",
        # no leader election (nothing runs on one worker only), no tables,
        # no web views
        topic_disable_leader=True,
        web_enabled=False,
        store="memory://",
        # outcomes are sent by the writers, acks=all, before the view commits
        producer_acks=-1,
    )


class Scheduling:
    """The scheduler of the request partitions the group gave this process,
    and the queue projector where those include partition 0. Synchronous:
    the worker runs it in a thread of its own, beside the writers' one,
    whose decisions it waits for."""

    def __init__(self, app: App, config: SchedulerConfig) -> None:
        self.app = app
        self.config = config
        self.partitions: tuple[int, ...] = ()
        self.worker: SchedulerWorker | None = None
        self.queue: QueueProjector | None = None

    def run(self, partitions: tuple[int, ...]) -> int:
        """Hold ``partitions`` (none while a rebalance is under way) and
        answer and fold what waits; how many records that was. A scheduler
        given other partitions starts afresh: it resumes from its answers
        on the placements topic and recovers unfinished transactions."""
        if partitions != self.partitions:
            self.partitions = partitions
            app = self.app
            self.worker = self.queue = None
            if partitions:
                self.worker = app.scheduler_worker(
                    self.config, lambda: None, partitions=list(partitions), own=False
                )
            if 0 in partitions:
                self.queue = self._queue()
        done = self.worker.step() if self.worker is not None else 0
        if self.queue is not None:
            try:
                done += self.queue.step()
            except QueueOffsetMoved as moved:  # one replaced but not yet told
                log.warning("queue projector: %s; reloading it from the view", moved)
                self.queue = self._queue()
        return done

    def _queue(self) -> QueueProjector:
        app = self.app
        return QueueProjector(app.log, app.settings.topics, app.engine, app.view.stall_ms)


class Worker:
    """One process's roles in the group: faust's agents and callbacks on
    one side, the writers' thread and the scheduler's thread on the other."""

    def __init__(self, app: App, options: WorkerOptions, config: SchedulerConfig) -> None:
        self.app = app
        self.options = options
        self.owner = owner_name()
        self.error: Exception | None = None
        settings = app.settings
        # a commit stalled this long holds a takeover back no longer: by then
        # the group has given its partitions away (see projections.view.generations)
        app.view.stall_ms = round(options.session_timeout_s * 1000)
        self.writers = GroupWriters(app.view, self._writer, settings.batch_size)
        self.scheduling = Scheduling(app, config)
        self.requests_held: tuple[int, ...] = ()
        self._writing = ThreadPoolExecutor(1, thread_name_prefix="berth-writers")
        self._scheduling = ThreadPoolExecutor(1, thread_name_prefix="berth-scheduler")
        self._wake: asyncio.Event | None = None
        self._delivered: list[Record] = []
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self.faust = faust_app(settings, options)
        self.events = self._topic(settings.topics.events)
        self.requests = self._topic(settings.topics.requests)
        self.faust.agent(self.events, name="berth.writers")(self._decide)
        self.faust.task(self._writing_loop)
        if options.schedule:
            self.faust.agent(self.requests, name="berth.scheduler")(self._requested)
            self.faust.task(self._answering)
        if options.tick_every_s > 0:
            self.faust.task(self._ticking)
        # (faust's stubs type a receiver's signal argument too narrowly to match)
        self.faust.on_partitions_assigned.connect(cast(Any, self._assigned))
        self.faust.on_partitions_revoked.connect(cast(Any, self._revoked))

    def _topic(self, name: str) -> Any:
        """A topic of Berth's, its records as bytes: the writers decode them."""
        return self.faust.topic(
            name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=self.app.settings.partitions,
        )

    def _writer(self, partition: int) -> PartitionWriter:
        settings = self.app.settings
        return PartitionWriter(
            self.app.log,
            self.app.view,
            partition,
            settings.partitions,
            settings.topics,
            batch_size=settings.batch_size,
            owner=self.owner,
        )

    async def _in(self, thread: Executor, call: Callable[..., T], *args: Any) -> T:
        """Run ``call`` in ``thread``: one at a time, in order. A failure
        stops the worker with status 1, as the projector does: a writer
        whose view or log failed under it starts afresh, from the view."""
        try:
            return await asyncio.get_running_loop().run_in_executor(thread, call, *args)
        except Exception as error:
            if self.error is None:
                log.exception("worker %s: stopping: %s", self.owner, error)
                self.error = error
                os.kill(os.getpid(), signal.SIGTERM)  # faust's worker stops on it, cleanly
            raise

    @staticmethod
    def _partitions(tps: Iterable[Any], topic: Any) -> list[int]:
        return sorted(tp.partition for tp in tps if tp.topic == topic.get_topic_name())

    # -- the writers ---------------------------------------------------------

    async def _decide(self, stream: Any) -> None:
        """Hand what the group's consumer delivers to the writing loop at
        once: while the writers commit one batch, the next ones gather, and
        go in as one (few commits when busy, little delay when quiet)."""
        async for events in stream.take_events(self.app.settings.batch_size, within=0.01):
            self._delivered.extend(
                Record(e.message.partition, e.message.offset, e.message.key or b"", e.message.value)
                for e in events
            )
            self._arrived.set()
            if len(self._delivered) >= _MOST_DELIVERED:
                self._room.clear()
                await self._room.wait()

    async def _writing_loop(self) -> None:
        """The writers' work, in order: what was delivered, else the log
        for partitions the consumer has not delivered in order, a few
        batches at a time between heartbeats."""
        while True:
            if self._delivered:
                records, self._delivered = self._delivered, []
                self._room.set()
                await self._in(self._writing, self.writers.write, records)
            elif self.writers.behind:
                await self._in(self._writing, self.writers.catch_up)
            else:
                self._arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), self.options.idle_wait_s)

    # -- the scheduler -------------------------------------------------------

    async def _requested(self, stream: Any) -> None:
        """New requests wake the scheduler, which reads them from the log
        from where its answers stop (its checkpoint is the placements topic)."""
        async for _ in stream.take_events(500, within=0.01):
            self._wake_scheduler()

    def _wake_scheduler(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _answering(self) -> None:
        self._wake = asyncio.Event()
        while True:
            self._wake.clear()
            if await self._in(self._scheduling, self.scheduling.run, self.requests_held):
                continue
            # queued batches wait for releases: look again now and then
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), _SCHEDULER_IDLE_S)

    # -- the reaper's ticks ----------------------------------------------------

    async def _ticking(self) -> None:
        """Ticks to the event partitions this worker writes, so that their
        overdue holds expire even when they are quiet."""
        publisher = Publisher(self.app.log, self.app.settings.topics)
        while True:
            await asyncio.sleep(self.options.tick_every_s)
            held = sorted(self.writers.writers)
            if held:
                await self._in(self._scheduling, publisher.tick, held)

    # -- the group -------------------------------------------------------------

    async def _assigned(self, sender: Any, *args: Any, **_: Any) -> None:
        partitions = self._partitions(args[0], self.events)
        taken = await self._in(self._writing, self.writers.assign, partitions)
        log.info("worker %s: holds partitions %s, took over %s", self.owner, partitions, taken)
        if self.options.schedule:
            self.requests_held = tuple(self._partitions(args[0], self.requests))
            self._wake_scheduler()

    async def _revoked(self, sender: Any, *args: Any, **_: Any) -> None:
        # the scheduler lets go at its next step; a step under way finishes
        # (its answers may then be given twice, as by a restarted scheduler)
        self.requests_held = ()
        # kept aside: a partition given back at once keeps its writer
        await self._in(self._writing, self.writers.suspend, self._partitions(args[0], self.events))

    def close(self) -> None:
        self._scheduling.shutdown(wait=True)
        self._writing.shutdown(wait=True)


_MOST_DELIVERED = 20_000
"""Records delivered and not yet written past which the agent waits."""

_SCHEDULER_IDLE_S = 0.5
"""How often an idle scheduler looks for queued batches that fit now."""


def run_worker(settings: Settings, options: WorkerOptions) -> int:
    """Join the group and write the partitions it gives this process until
    SIGTERM or SIGINT; the exit status."""
    from scheduling.config import SchedulerConfig

    config = SchedulerConfig.load(options.config) if options.config else SchedulerConfig.default()
    with App(settings) as app:
        worker = Worker(app, options, config)
        tune_gc()
        try:
            faust.Worker(worker.faust, loglevel="INFO", quiet=True).execute_from_commandline()
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            worker.close()
    return 1 if worker.error is not None else status
