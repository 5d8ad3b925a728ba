"""``berth worker``: the partition writers on Kafka as a faust-streaming app.

Any number of workers join one consumer group on the events topic; Kafka
assigns each its partitions and moves a dead worker's partitions to the
others once its session times out. The agent hands the records the group
delivers to :class:`consumers.group_writers.GroupWriters`, which decides
them with the pure core and commits them to the view in one thread, so that
the event loop stays free to heartbeat. Offsets the group commits to Kafka
are only a hint: each writer resumes where the view says it stopped, and a
writer the group replaced is refused by the view (fencing by generation).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import faust

from berth.app import App, Settings, tune_gc
from consumers.group_writers import GroupWriters
from consumers.partition_writer import PartitionWriter
from ledger.log import Record

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
    catch_up_every_s: float = 0.05
    """How often partitions behind the group's consumer read the log."""


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
        # no leader election (no timer needs one), no tables, no web views
        topic_disable_leader=True,
        web_enabled=False,
        store="memory://",
        # outcomes are sent by the writers, acks=all, before the view commits
        producer_acks=-1,
    )


class Worker:
    """One process's writers in the group: faust's callbacks on one side,
    the writers' thread on the other."""

    def __init__(self, app: App, options: WorkerOptions) -> None:
        self.app = app
        self.options = options
        self.owner = owner_name()
        self.error: Exception | None = None
        settings = app.settings
        self.writers = GroupWriters(app.view, self._writer)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="berth-writers")
        self.faust = faust_app(settings, options)
        self.events = self.faust.topic(
            settings.topics.events,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )
        self.faust.agent(self.events, name="berth.writers")(self._decide)
        self.faust.timer(options.catch_up_every_s)(self._catch_up)
        # (faust's stubs type a receiver's signal argument too narrowly to match)
        self.faust.on_partitions_assigned.connect(cast(Any, self._assigned))
        self.faust.on_partitions_revoked.connect(cast(Any, self._revoked))

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

    async def _in_thread(self, call: Callable[..., T], *args: Any) -> T:
        """Run ``call`` in the writers' thread: one at a time, in order. A
        failure stops the worker with status 1, as the projector does: a
        writer whose view or log failed under it starts afresh, from the view."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, call, *args)
        except Exception as error:
            if self.error is None:
                log.exception("worker %s: stopping: %s", self.owner, error)
                self.error = error
                os.kill(os.getpid(), signal.SIGTERM)  # faust's worker stops on it, cleanly
            raise

    def _partitions(self, tps: Sequence[Any] | set[Any]) -> list[int]:
        return sorted(tp.partition for tp in tps if tp.topic == self.events.get_topic_name())

    async def _decide(self, stream: Any) -> None:
        async for events in stream.take_events(self.app.settings.batch_size, within=0.01):
            records = [
                Record(e.message.partition, e.message.offset, e.message.key or b"", e.message.value)
                for e in events
            ]
            await self._in_thread(self.writers.write, records)

    async def _catch_up(self) -> None:
        behind = bool(self.writers.behind)
        while behind:  # a batch or so per partition at a time, between heartbeats
            behind = await self._in_thread(self.writers.catch_up)

    async def _assigned(self, sender: Any, *args: Any, **_: Any) -> None:
        partitions = self._partitions(args[0])
        taken = await self._in_thread(self.writers.assign, partitions)
        log.info("worker %s: holds partitions %s, took over %s", self.owner, partitions, taken)

    async def _revoked(self, sender: Any, *args: Any, **_: Any) -> None:
        # kept aside: a partition given back at once keeps its writer
        await self._in_thread(self.writers.suspend, self._partitions(args[0]))

    def close(self) -> None:
        self._thread.shutdown(wait=True)


def run_worker(settings: Settings, options: WorkerOptions) -> int:
    """Join the group and write the partitions it gives this process until
    SIGTERM or SIGINT; the exit status."""
    with App(settings) as app:
        worker = Worker(app, options)
        tune_gc()
        try:
            faust.Worker(worker.faust, loglevel="INFO", quiet=True).execute_from_commandline()
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            worker.close()
    return 1 if worker.error is not None else status
