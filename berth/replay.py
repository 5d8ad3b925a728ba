"""Rebuild the view from offset 0 and, optionally, verify every decision
against the outcomes recorded on the outcomes topic."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select

from berth.app import App, Settings
from ledger.log import Log
from projections.view.tables import partition_offsets
from schemas.outcomes import Outcome


@dataclass(frozen=True, slots=True)
class Divergence:
    partition: int
    offset: int
    expected: Outcome | None
    actual: Outcome | None

    def __str__(self) -> str:
        return (
            f"partition {self.partition} offset {self.offset}: "
            f"recorded {self.expected}, recomputed {self.actual}"
        )


@dataclass(frozen=True, slots=True)
class ReplayResult:
    records: int
    outcomes: int
    divergence: Divergence | None
    view_url: str


def _recorded(log: Log, topic: str, partition: int) -> Iterator[Outcome]:
    """The outcomes topic of one partition, without the republished duplicates a
    writer that crashed before its view commit leaves behind."""
    offset = 0
    last: tuple[int, int] = (-1, -1)
    while records := log.read(topic, partition, offset, 5000):
        offset = records[-1].offset + 1
        for record in records:
            outcome = Outcome.from_json(record.value)
            position = (outcome.offset, outcome.seq)
            if position > last:
                last = position
                yield outcome


def replay(
    settings: Settings, verify: bool, progress: Callable[[int], object] | None = None
) -> ReplayResult:
    """Rebuild into ``settings.db_url`` (which must be empty), or by default into a
    fresh SQLite file that then replaces the data directory's view."""
    target = settings
    fresh: Path | None = None
    if not settings.db_url:
        fresh = settings.data_dir / "view.replay.db"
        for leftover in (fresh, *(Path(f"{fresh}{s}") for s in ("-wal", "-shm"))):
            leftover.unlink(missing_ok=True)
        target = Settings(
            data_dir=settings.data_dir,
            log_url=settings.log_url,
            db_url=f"sqlite:///{fresh}",
            partitions=settings.partitions,
            batch_size=settings.batch_size,
            topics=settings.topics,
        )
    records = outcomes = 0
    divergence: Divergence | None = None
    with App(target) as app:
        with app.engine.connect() as conn:
            if conn.execute(select(func.count()).select_from(partition_offsets)).scalar_one():
                raise ValueError(
                    f"{target.view_url} already holds a view; replay needs an empty one"
                )
        for writer in app.writers(publish=False):
            recorded = _recorded(app.log, settings.topics.outcomes, writer.partition)
            while (batch := writer.step()) is not None:
                records += batch.end - batch.start
                if progress is not None:
                    progress(batch.end - batch.start)
                for applied in batch.applied:
                    for actual in applied.outcomes:
                        outcomes += 1
                        if verify and divergence is None:
                            expected = next(recorded, None)
                            if expected != actual:
                                divergence = Divergence(
                                    writer.partition, applied.offset, expected, actual
                                )
            if verify and divergence is None:
                extra = next(recorded, None)
                if extra is not None:
                    divergence = Divergence(writer.partition, extra.offset, extra, None)
    if fresh is not None:
        view = settings.data_dir / "view.db"
        for suffix in ("-wal", "-shm"):
            Path(f"{view}{suffix}").unlink(missing_ok=True)
        os.replace(fresh, view)
        return ReplayResult(records, outcomes, divergence, f"sqlite:///{view}")
    return ReplayResult(records, outcomes, divergence, target.view_url)


def total_records(settings: Settings) -> int:
    """How many records the events topic holds (for a progress bar)."""
    from berth.app import open_log

    with open_log(settings) as log:
        count = log.partition_count(settings.topics.events)
        return sum(log.end_offset(settings.topics.events, p) for p in range(count))
