"""Rebuild the view from offset 0 and, optionally, verify every decision
against the outcomes recorded on the outcomes topic."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
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
    verified: int
    """Outcomes compared with recorded ones (records the live writer has not yet
    decided have none to compare with)."""
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


def _replay_partitions(
    target: Settings,
    partitions: list[int],
    verify: bool,
    progress: Callable[[int], object] | None,
) -> ReplayResult:
    """Rebuild the given partitions into ``target``'s (migrated) view."""
    records = outcomes = verified = 0
    divergence: Divergence | None = None
    with App(target, migrate=False) as app:
        for writer in app.writers(partitions, publish=False):
            recorded = _recorded(app.log, target.topics.outcomes, writer.partition)
            checking = verify
            while (batch := writer.step()) is not None:
                records += batch.end - batch.start
                if progress is not None:
                    progress(batch.end - batch.start)
                for applied in batch.applied:
                    outcomes += len(applied.outcomes)
                    if not checking:
                        continue
                    for actual in applied.outcomes:
                        expected = next(recorded, None)
                        if expected is None:
                            checking = False  # the rest is not decided live yet
                            break
                        if expected != actual:
                            if divergence is None:
                                divergence = Divergence(
                                    writer.partition, applied.offset, expected, actual
                                )
                            checking = False
                            break
                        verified += 1
            if checking and divergence is None:
                extra = next(recorded, None)
                if extra is not None:
                    divergence = Divergence(writer.partition, extra.offset, extra, None)
    return ReplayResult(records, outcomes, verified, divergence, target.view_url)


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
        target = replace(settings, db_url=f"sqlite:///{fresh}")
    with App(target) as app:
        target = app.settings  # the log's own partition count
        with app.engine.connect() as conn:
            if conn.execute(select(func.count()).select_from(partition_offsets)).scalar_one():
                raise ValueError(
                    f"{target.view_url} already holds a view; replay needs an empty one"
                )
    result = _replay_partitions(target, list(range(target.partitions)), verify, progress)
    if fresh is None:
        return result
    view = settings.data_dir / "view.db"
    for suffix in ("-wal", "-shm"):
        Path(f"{view}{suffix}").unlink(missing_ok=True)
    os.replace(fresh, view)
    return replace(result, view_url=f"sqlite:///{view}")


def total_records(settings: Settings) -> int:
    """How many records the events topic holds (for a progress bar)."""
    from berth.app import open_log

    with open_log(settings) as log:
        count = log.partition_count(settings.topics.events)
        return sum(log.end_offset(settings.topics.events, p) for p in range(count))
