"""Backup, restore and the deliberate cut: what an operator does when a
partition is damaged (see ``berth log verify``).

A backup copies the view first, with SQLite's online backup (a consistent
snapshot while writers commit), and the log second, each partition file up to
its last durable record at that moment. The view never runs ahead of the log,
and the log only grows, so the copied view's applied offsets are never beyond
the copied log: restored, the writers simply catch up. A manifest records
what was copied; a restore checks the copy (every record, the manifest, the
view against the log) before it puts it in place.

A cut removes a partition's records from an offset on, damage included, when
no backup will do. The cut bytes are kept aside, the cut is recorded in
``log/cuts.jsonl`` before it happens, and the view is rebuilt from the log.
Cutting the events topic also cuts that partition's outcomes of the records
cut, so that a decision recorded for a record that is gone is never taken for
the decision on the new record that takes its offset.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from berth.app import Settings
from berth.scrub import Scrub, scrub
from ledger.embedded import EmbeddedLog
from ledger.log import LogError
from schemas.outcomes import Outcome

_log = logging.getLogger(__name__)

MANIFEST = "backup.json"


class RecoveryError(Exception):
    """A backup, restore or cut that was refused, and why."""


def _embedded_only(settings: Settings, what: str) -> None:
    if settings.log_url or settings.db_url:
        raise RecoveryError(
            f"{what} works on the embedded default (a data directory); on Kafka and "
            "PostgreSQL use their own tools (topic replication, pg_dump)"
        )


def _empty_target(path: Path) -> None:
    if path.exists() and any(path.iterdir()):
        raise RecoveryError(f"{path} is not empty: give a new or empty directory")
    path.mkdir(parents=True, exist_ok=True)


def backup(settings: Settings, dest: Path, now_ms: int) -> dict[str, Any]:
    """A consistent copy of the data directory's log and view in ``dest``,
    taken while writers run; its manifest."""
    _embedded_only(settings, "berth backup")
    _empty_target(dest)
    source_view = settings.data_dir / "view.db"
    copied_view = source_view.exists()
    if copied_view:
        _backup_view(source_view, dest / "view.db")
    files = _backup_log(settings.data_dir, dest)
    manifest = {
        "created_ms": now_ms,
        "view": copied_view,
        "files": files,
        "records": sum(f["records"] for f in files),
    }
    _write_synced(dest / MANIFEST, json.dumps(manifest, indent=1).encode())
    _fsync_tree(dest)
    return manifest


def _backup_view(source: Path, target: Path) -> None:
    """SQLite's online backup: a snapshot as of one transaction."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            dst.close()
    finally:
        src.close()


def _backup_log(data_dir: Path, dest: Path) -> list[dict[str, Any]]:
    """Every partition file up to its last durable record, after the view:
    the copy holds every record the copied view applied."""
    files = []
    with closing(EmbeddedLog(data_dir, read_only=True)) as log:
        for topic, count in log.topics().items():
            target = dest / "log" / topic
            target.mkdir(parents=True)
            for p in range(count):
                check = log.check(topic, p)
                if check.damage is not None:
                    raise RecoveryError(f"not backed up: {check.damage}")
                _copy_prefix(check.path, target / check.path.name, check.intact_bytes)
                files.append(
                    {
                        "topic": topic,
                        "partition": p,
                        "records": check.records,
                        "bytes": check.intact_bytes,
                    }
                )
            # meta.json last, as the log creates a topic: it marks it complete
            shutil.copyfile(data_dir / "log" / topic / "meta.json", target / "meta.json")
    return files


def _copy_prefix(source: Path, target: Path, size: int) -> None:
    with open(source, "rb") as src, open(target, "wb") as dst:
        remaining = size
        while remaining:
            chunk = src.read(min(remaining, 8 << 20))
            if not chunk:
                raise RecoveryError(f"{source} shrank while it was copied")
            dst.write(chunk)
            remaining -= len(chunk)


def restore(source: Path, data_dir: Path) -> Scrub:
    """Check the backup in ``source`` (its manifest, every record, its view
    against its log, one partition's decisions recomputed) and, if sound,
    copy it into the new or empty ``data_dir``. What was appended after the
    backup was taken is not in it."""
    checked = verify_backup(source)
    if not checked.sound:
        raise RecoveryError(f"{source} is not a sound backup: not restored")
    _empty_target(data_dir)
    for path in sorted(source.rglob("*")):
        if path.is_file() and path.name != MANIFEST:
            target = data_dir / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    _fsync_tree(data_dir)
    return checked


def verify_backup(source: Path) -> Scrub:
    """``berth log verify`` on a backup, and its files against its manifest."""
    try:
        manifest = json.loads((source / MANIFEST).read_text())
    except (OSError, ValueError) as error:
        raise RecoveryError(f"{source}: no readable {MANIFEST}: not a backup ({error})") from None
    checked = scrub(Settings(data_dir=source))
    found = {(str(f.path.parent.name), f.path.name): f for f in checked.files}
    for entry in manifest["files"]:
        f = found.get((entry["topic"], f"p{entry['partition']}.log"))
        if f is None or f.records != entry["records"] or f.file_bytes != entry["bytes"]:
            checked.problems.append(
                f"{entry['topic']} partition {entry['partition']}: the backup's manifest "
                f"says {entry['records']} records in {entry['bytes']} bytes, the copy differs"
            )
    return checked


@dataclass(frozen=True, slots=True)
class Cut:
    topic: str
    partition: int
    offset: int
    bytes_cut: int
    aside: str


def cut(settings: Settings, topic: str, partition: int, offset: int, now_ms: int) -> list[Cut]:
    """Remove records ``offset`` onwards of a partition (and, for the events
    topic, their outcomes), recorded before and kept aside. The caller then
    rebuilds the view (:func:`berth.replay.replay`)."""
    _embedded_only(settings, "berth log truncate")
    root = settings.data_dir / "log"
    try:
        log = EmbeddedLog(settings.data_dir, exclusive=True)
    except LogError as error:
        raise RecoveryError(f"{error}: stop every berth process using it first") from None
    with log:
        if topic not in log.topics():
            raise RecoveryError(f"no topic {topic!r} in {root}")
        done = [_cut_one(log, root, topic, partition, offset, now_ms)]
        if topic == settings.topics.events:
            outcomes = settings.topics.outcomes
            first = _first_outcome_at(log, outcomes, partition, offset)
            done.append(_cut_one(log, root, outcomes, partition, first, now_ms))
    return done


def _cut_one(
    log: EmbeddedLog, root: Path, topic: str, partition: int, offset: int, now_ms: int
) -> Cut:
    end = log.end_offset(topic, partition)
    if offset > end:
        raise RecoveryError(
            f"{topic} partition {partition} has {end} readable records: no {offset}"
        )
    aside = root / topic / f"p{partition}.cut-at-{offset}-{now_ms}.bin"
    entry = {
        "at_ms": now_ms,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "readable_records_cut": end - offset,
        "damage": log.damage(topic, partition),
        "aside": aside.name,
    }
    # recorded before it happens: a cut that dies half way is still on record
    with open(root / "cuts.jsonl", "a", encoding="utf-8") as record:
        record.write(json.dumps(entry) + "\n")
        record.flush()
        os.fsync(record.fileno())
    _log.warning("cutting %s partition %d at record %d: %s", topic, partition, offset, entry)
    cut_bytes = log.cut(topic, partition, offset, aside)
    return Cut(topic, partition, offset, cut_bytes, str(aside))


def _first_outcome_at(log: EmbeddedLog, topic: str, partition: int, offset: int) -> int:
    """The position in the outcomes partition of the first outcome of a
    record at ``offset`` or later (outcomes follow their records' order)."""
    position = 0
    while records := log.read(topic, partition, position, 5000):
        for record in records:
            if Outcome.from_json(record.value).offset >= offset:
                return record.offset
        position = records[-1].offset + 1
    return position


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _fsync_tree(root: Path) -> None:
    """Every file and directory under ``root`` on disk."""
    for path in sorted(root.rglob("*"), reverse=True):
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)
