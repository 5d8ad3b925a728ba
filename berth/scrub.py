"""``berth log verify``: scrub an embedded log and its view.

Every partition file is read to its end with every record's checks (its
checksums and the chain, see :mod:`ledger.frames`); each topic's ``meta.json``
is checked against the files beside it; the view's applied offsets must lie
within the log; and some partitions' decisions are recomputed from their
records and compared with the outcomes recorded on the outcomes topic. The log
keeps no index on disk (a process builds one as it scans), so there is none to
check against the records.

A nightly run recomputes one partition by default, a different one each day
(the day number modulo the partition count), so every partition is
recomputed once every so many nights; ``--recompute all`` does them all.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from berth.app import Settings
from ledger import frames
from ledger.embedded import EmbeddedLog, FileCheck
from ledger.log import CorruptLog, LogError
from ledger.topics import Topics
from projections.batch import decide
from projections.state import PartitionState
from projections.view.engine import make_engine
from projections.view.loader import committed_offsets
from schemas.outcomes import Outcome

_PARTITION_FILE = re.compile(r"p(\d+)\.log")
_DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class Recomputed:
    partition: int
    verified: int
    """Recorded outcomes the recomputed ones matched."""
    divergence: str | None
    stopped_at: str | None = None
    """The damage that stopped the recomputation (reported with the file)."""


@dataclass(slots=True)
class Scrub:
    files: list[FileCheck] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """What is wrong besides damaged records: metadata, the view."""
    recomputed: list[Recomputed] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def sound(self) -> bool:
        return (
            not self.problems
            and all(f.damage is None for f in self.files)
            and all(r.divergence is None for r in self.recomputed)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "sound": self.sound,
            "files": [
                {**asdict(f), "path": str(f.path), "torn_bytes": f.torn_bytes} for f in self.files
            ],
            "records": sum(f.records for f in self.files),
            "bytes": sum(f.file_bytes for f in self.files),
            "problems": self.problems,
            "recomputed": [asdict(r) for r in self.recomputed],
            "elapsed_s": round(self.elapsed_s, 3),
        }


def scrub(
    settings: Settings,
    partition: int | None = None,
    recompute: Sequence[int] | Literal["all"] | None = None,
    progress: Callable[[int], object] | None = None,
    today_ms: int = 0,
) -> Scrub:
    """Check the embedded log under ``settings.data_dir`` and its view.
    ``partition`` limits the check to that partition of every topic;
    ``recompute`` names the events partitions whose decisions are
    recomputed ("all", or None: the one ``today_ms`` picks); ``progress`` is told of
    each file's bytes once it is checked."""
    started = time.perf_counter()
    result = Scrub()
    root = settings.data_dir / "log"
    counts = _check_topics(root, result.problems)
    try:
        log = EmbeddedLog(settings.data_dir, read_only=True)
    except LogError as error:
        result.problems.append(str(error))
        result.elapsed_s = time.perf_counter() - started
        return result
    with log:
        for topic, count in sorted(counts.items()):
            for p in range(count):
                if partition is None or p == partition:
                    check = log.check(topic, p)
                    result.files.append(check)
                    if progress is not None:
                        progress(check.file_bytes)
        events = settings.topics.events
        ends = {p: log.end_offset(events, p) for p in range(counts.get(events, 0))}
        result.problems += _check_view(settings, ends)
        if recompute == "all":
            recompute = list(ends)
        elif recompute is None:
            recompute = [today_ms // _DAY_MS % len(ends)] if ends else []
        for p in recompute:
            if partition is None or p == partition:
                result.recomputed.append(_recompute(log, settings.topics, p, len(ends)))
    result.elapsed_s = time.perf_counter() - started
    return result


def log_bytes(settings: Settings) -> int:
    """The size of every partition file: what a scrub reads."""
    return sum(f.stat().st_size for f in (settings.data_dir / "log").glob("*/p*.log"))


def _check_topics(root: Path, problems: list[str]) -> dict[str, int]:
    """Each topic's partition count from its ``meta.json``, checked against
    the partition files beside it."""
    counts: dict[str, int] = {}
    if not root.is_dir():
        problems.append(f"{root}: no embedded log here")
        return counts
    for directory in sorted(d for d in root.iterdir() if d.is_dir()):
        meta = directory / "meta.json"
        files = {
            int(m.group(1)) for f in directory.iterdir() if (m := _PARTITION_FILE.fullmatch(f.name))
        }
        if not meta.exists():
            if files and any((directory / f"p{n}.log").stat().st_size for n in files):
                problems.append(f"{directory}: records without a meta.json")
            continue  # an unfinished creation, which the log ignores
        try:
            described = json.loads(meta.read_text())
            count, fmt = int(described["partitions"]), int(described.get("format", 1))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            problems.append(f"{meta}: unreadable ({error})")
            continue
        if fmt not in frames.FORMATS:
            problems.append(f"{meta}: unknown record format {fmt}")
            continue
        if missing := sorted(set(range(count)) - files):
            problems.append(f"{directory}: partition files missing: {missing}")
            continue
        if extra := sorted(files - set(range(count))):
            problems.append(f"{directory}: partition files beyond its {count}: {extra}")
        counts[directory.name] = count
    return counts


def _check_view(settings: Settings, ends: dict[int, int]) -> list[str]:
    """The view's applied offsets against the log's ends: never beyond."""
    if not settings.db_url and not (settings.data_dir / "view.db").exists():
        return []  # no view yet: the writers build it from the log
    engine = make_engine(settings.view_url)
    try:
        with engine.connect() as conn:
            applied = committed_offsets(conn)
    finally:
        engine.dispose()
    return [
        f"partition {p}: the view has applied {n} records, the log holds {ends.get(p, 0)}"
        for p, n in sorted(applied.items())
        if n > ends.get(p, 0)
    ]


def _recompute(log: EmbeddedLog, topics: Topics, partition: int, partitions: int) -> Recomputed:
    """Decide the partition's records again, from an empty state, and compare
    each decision with the one recorded on the outcomes topic."""
    from berth.replay import recorded_outcomes

    state = PartitionState(partition=partition, partitions=partitions)
    recorded = recorded_outcomes(log, topics.outcomes, partition)
    verified = 0
    try:
        for records in _batches(log, topics.events, partition):
            for applied in decide(state, records).applied:
                for actual in applied.outcomes:
                    expected = next(recorded, None)
                    if expected is None:  # the rest is not decided live yet
                        return Recomputed(partition, verified, None)
                    if expected != actual:
                        return Recomputed(partition, verified, _diverged(expected, actual))
                    verified += 1
    except CorruptLog as damaged:
        return Recomputed(partition, verified, None, damaged.damage)
    return Recomputed(partition, verified, None)


def _diverged(expected: Outcome, actual: Outcome) -> str:
    return f"offset {expected.offset}: recorded {expected}, recomputed {actual}"


def _batches(log: EmbeddedLog, topic: str, partition: int) -> Iterator[list[Any]]:
    offset = 0
    while records := log.read(topic, partition, offset, 5000):
        offset = records[-1].offset + 1
        yield records


def render(result: Scrub) -> str:
    lines = []
    for f in result.files:
        if f.damage:
            lines.append(f"DAMAGED {f.damage}")
        elif f.torn_bytes:
            lines.append(
                f"torn tail: {f.path}: {f.torn_bytes} bytes after record {f.records - 1}, "
                "an append that never completed (the next append cuts them)"
            )
    lines += [f"PROBLEM {problem}" for problem in result.problems]
    for r in result.recomputed:
        verdict = f"DIVERGED {r.divergence}" if r.divergence else "as recorded"
        if r.stopped_at:
            verdict += ", then stopped at the damage"
        lines.append(f"recomputed partition {r.partition}: {r.verified:,} decisions {verdict}")
    records = sum(f.records for f in result.files)
    size = sum(f.file_bytes for f in result.files)
    lines.append(
        f"{'sound' if result.sound else 'NOT SOUND'}: {len(result.files)} partition files, "
        f"{records:,} records, {size:,} bytes checked in {result.elapsed_s:.1f} s"
    )
    return "\n".join(lines)
