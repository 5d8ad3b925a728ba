"""The composition root: turns settings into a log, a view and writers.

Nothing connects at import time; entry points call :func:`open_app`.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from consumers.partition_writer import PartitionWriter
from ledger.log import Log, UnknownTopic
from ledger.topics import DEFAULT_TOPICS, Topics
from projections.view.engine import make_engine, sqlite_url
from projections.view.migrate import upgrade
from projections.view.ownership import ViewOwnership
from projections.view.writer import ViewWriter

if TYPE_CHECKING:  # the scheduler's parts load only in processes that schedule
    from berth.client import Publisher
    from consumers.scheduler_worker import SchedulerWorker
    from consumers.snapshot_source import ChangeFeed
    from scheduling.config import SchedulerConfig

DEFAULT_DATA_DIR = "berth-data"
DEFAULT_PARTITIONS = 8
DEFAULT_BATCH_SIZE = 2000


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the log and the view live. Empty means the embedded default."""

    data_dir: Path = Path(DEFAULT_DATA_DIR)
    log_url: str = ""
    db_url: str = ""
    partitions: int = DEFAULT_PARTITIONS
    batch_size: int = DEFAULT_BATCH_SIZE
    topics: Topics = field(default_factory=lambda: DEFAULT_TOPICS)

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        values: dict[str, object] = {
            "data_dir": Path(os.environ.get("BERTH_DATA_DIR", DEFAULT_DATA_DIR)),
            "log_url": os.environ.get("BERTH_LOG", ""),
            "db_url": os.environ.get("BERTH_DB", ""),
            "partitions": int(os.environ.get("BERTH_PARTITIONS", DEFAULT_PARTITIONS)),
            "batch_size": int(os.environ.get("BERTH_BATCH_SIZE", DEFAULT_BATCH_SIZE)),
        }
        values.update({k: v for k, v in overrides.items() if v not in (None, "")})
        return cls(**values)  # type: ignore[arg-type]

    @property
    def view_url(self) -> str:
        return self.db_url or sqlite_url(str(self.data_dir / "view.db"))


def open_log(settings: Settings, read_only: bool = False, exclusive: bool = False) -> Log:
    """``kafka://host:port[,host:port]`` or, by default, the embedded log.

    Many processes may open one embedded log; an ``exclusive`` one keeps every
    other writable one out while it is open, and ``read_only`` ones take no
    part in that. Both mean nothing to Kafka."""
    url = settings.log_url
    if url.startswith("kafka://"):
        from ledger.kafka import KafkaLog

        return KafkaLog(url.removeprefix("kafka://"))
    if url and not url.startswith("embedded:"):
        raise ValueError(f"unknown log URL {url!r}: use kafka://HOST:PORT or embedded:DIR")
    from ledger.embedded import EmbeddedLog

    directory = url.removeprefix("embedded:") or str(settings.data_dir)
    return EmbeddedLog(directory, read_only=read_only, exclusive=exclusive)


def create_topics(log: Log, settings: Settings) -> None:
    topics = settings.topics
    log.create_topic(topics.events, settings.partitions)
    log.create_topic(topics.outcomes, settings.partitions)
    log.create_topic(topics.dead_letters, 1)
    log.create_topic(topics.requests, settings.partitions)
    log.create_topic(topics.placements, settings.partitions)
    log.create_topic(topics.transactions, settings.partitions)
    log.create_topic(topics.moves, settings.partitions)
    log.create_topic(topics.policies, 1)


def tune_gc() -> None:
    """The writer keeps millions of long-lived objects; freezing them and raising
    the young-generation threshold stops the collector rescanning them."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


class App:
    """A log, a view and the writers of the partitions this process owns."""

    def __init__(self, settings: Settings, migrate: bool = True, exclusive: bool = False) -> None:
        self.settings = settings
        if not settings.log_url and not settings.db_url:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.log = open_log(settings, exclusive=exclusive)
        try:
            existing = self.log.partition_count(settings.topics.events)
        except UnknownTopic:
            existing = None
        if existing is not None and existing != settings.partitions:
            # an existing log fixes the partition count: keys are routed by it
            settings = replace(settings, partitions=existing)
            self.settings = settings
        create_topics(self.log, settings)
        self.engine = make_engine(settings.view_url)
        self.write_engine = make_engine(settings.view_url, writer=True)
        if migrate:
            upgrade(self.write_engine)
        self.view = ViewWriter(self.write_engine)
        self.ownership = ViewOwnership(self.write_engine)

    def _own(self, topic: str, partitions: list[int]) -> None:
        """Make this process the one acting on ``partitions`` of ``topic``:
        through the log where it can tell (embedded), and through the view,
        which every process of a deployment shares (Kafka's included)."""
        self.log.own(topic, partitions)
        self.ownership.own(topic, partitions)

    def confirm_ownership(self) -> None:
        """:class:`~projections.view.ownership.OwnershipLost` if the view's
        server no longer holds this process's partitions for it (the
        embedded log's file locks last as long as the process)."""
        self.ownership.confirm()

    def writers(
        self, partitions: list[int] | None = None, publish: bool = True, linger_s: float = 0.0
    ) -> list[PartitionWriter]:
        """The single writers of the given partitions (all by default); this
        process owns them until the app closes, so a second writer of one of
        them elsewhere is refused (:class:`OwnedElsewhere`). ``linger_s``:
        see :attr:`PartitionWriter.linger_s`."""
        owned = list(range(self.settings.partitions)) if partitions is None else partitions
        self._own(self.settings.topics.events, owned)
        return [
            PartitionWriter(
                self.log,
                self.view,
                p,
                self.settings.partitions,
                self.settings.topics,
                batch_size=self.settings.batch_size,
                publish=publish,
                linger_s=linger_s,
            )
            for p in owned
        ]

    def scheduler_worker(
        self,
        config: SchedulerConfig,
        pump: Callable[[], object],
        publisher: Publisher | None = None,
        partitions: list[int] | None = None,
        own: bool = True,
        view_version: Callable[[], object] | None = None,
        decide: Callable[[], object] | None = None,
        feed: ChangeFeed | None = None,
    ) -> SchedulerWorker:
        """A scheduler worker answering the request partitions given (all by
        default): single requests through a :class:`Scheduler`, batches and
        requests taking identifiers through a :class:`BatchScheduler` and its
        coordinator, both ranking on the view with ``config``'s engine.
        ``pump`` lets writers in this process catch up while it waits. Like
        the writers, it owns its request partitions: two schedulers answering
        one request would place it twice. ``own`` false leaves that to a
        consumer group, which gave this process ``partitions``.
        ``view_version``: where the writers of every partition are, when
        they all run in this process: the view is read again only once
        it moved (see :class:`LiveSnapshot`). ``decide``: what lets those
        writers decide the claims a single request waits for, leaving
        their view commit for later (see :class:`Scheduler`). ``feed``:
        what those writers commit, told from their states, which the
        scheduler's snapshot then need not read back from the view."""
        from berth.client import Publisher
        from consumers.batches import BatchScheduler
        from consumers.coordinator import Coordinator
        from consumers.policies import PolicyBook
        from consumers.scheduler import OutcomeFollower, Scheduler
        from consumers.scheduler_worker import SchedulerWorker
        from consumers.server_groups import LiveRules
        from consumers.snapshot_source import LiveSnapshot

        topics = self.settings.topics
        answered = list(range(self.settings.partitions)) if partitions is None else partitions
        if own:
            self._own(topics.requests, answered)
        publisher = publisher or Publisher(self.log, topics)
        follower = OutcomeFollower(self.log, topics.outcomes)
        # the policies set at run time (berth policy set), config the default
        # until one named default is set
        policies = PolicyBook(self.log, topics, config)
        engine = policies.default().engine

        # re-reads only what changed since the last wave (placements too),
        # and says which offsets it reflects, so each wave counts the
        # claims proposed since
        snapshot = LiveSnapshot(self.engine, placements=True, version=view_version, feed=feed)
        scheduler = Scheduler(
            publisher,
            engine,
            snapshot,
            follower,
            pump=pump,
            max_attempts=config.max_attempts,
            wave=config.wave,
            depth=config.depth,
            policies=policies,
            decide=decide,
        )
        batches = BatchScheduler(
            Coordinator(publisher, self.log, topics, follower, pump=pump),
            engine,
            snapshot,
            publisher.partitions,
            pump=pump,
            max_attempts=config.max_attempts,
            groups=LiveRules(self.engine),
        )
        return SchedulerWorker(
            self.log, topics, scheduler, partitions=partitions, batches=batches, refresh=snapshot
        )

    def close(self) -> None:
        self.ownership.close()
        self.log.close()
        self.engine.dispose()
        self.write_engine.dispose()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
