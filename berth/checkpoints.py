"""Checkpoints of the view: its writers' states saved at known
per-partition offsets, so that ``berth explain --request`` decides the log
up to an answer's offsets on the states of the newest checkpoint at or
before them (in memory: :func:`berth.audit.states_as_of`) instead of from
offset 0.

A checkpoint is two files in ``DATA_DIR/checkpoints/``: ``view-N.states``,
each partition's writer state as of the offsets the view had committed
(pickled, its active reservations a list per field: see
:func:`projections.state.reservation_columns`), and ``view-N.json``,
its manifest, written last: the offset each partition had applied, N
their sum, the states' size and SHA-256, and where in each partition of
the events topic that offset's record starts with the chain value it
follows (the embedded log's,
:meth:`ledger.log.Log.mark`): explain checks the log's records from there
on, against that value, rather than every record of the partitions from
offset 0 (the records before are the states', checked by their SHA-256).
States without a manifest are an interrupted checkpoint, never read. One
whose manifest does not parse, or whose states no longer match it, is
skipped with a warning naming it: explain then uses an older one or
replays from offset 0, never wrong states. (A checkpoint from before also
kept a copy of the view, ``view-N.db``, which nothing reads now.)

``berth serve`` and ``berth projector`` take one every so many records
their view applied (``--checkpoint-every``, in a process of their own),
``berth checkpoint`` takes one now. A new checkpoint's states are the
previous checkpoint's with the records since decided on them in memory, up
to the offsets the view has committed; the first's are loaded from a copy
of the view (one read transaction: one commit's state, while the writers
go on), as a restarting writer loads them. At most ``--checkpoint-keep``
are kept: the newest and the oldest always, and of the rest those that
leave the log's history evenly covered (a checkpoint goes when the gap it
would leave between its neighbours is the smallest), so an answer from any
time is decided from states at most about ``records / keep`` records
before it.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import io
import json
import logging
import os
import pickle
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from berth.app import Settings, open_log
from berth.replay import decide_until
from ledger.log import Log
from projections.claims import FINGERPRINTS
from projections.pools import IntervalPool
from projections.state import (
    PartitionState,
    Reservation,
    ReservationColumns,
    ServerGroup,
    reservation_columns,
    reservations_of,
)
from projections.view.engine import make_engine
from projections.view.loader import load_state
from projections.view.tables import partition_offsets
from scheduling.model import Snapshot

log = logging.getLogger(__name__)

DIRECTORY = "checkpoints"
DEFAULT_EVERY = 50_000
"""Records the view applies between two automatic checkpoints."""
DEFAULT_KEEP = 40
"""Checkpoints kept (see :meth:`Checkpoints.prune`): a checkpoint is its
states alone, a few tens of MB for a million-record log."""


class CheckpointError(ValueError):
    """A view that cannot be checkpointed (not SQLite), said once."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One checkpoint and what its manifest says of it."""

    path: Path
    offsets: dict[int, int]
    """Partition -> the next offset it would apply: every record below it is
    decided in its states."""
    size: int
    """Of its states (of its copy of the view, in one from before)."""
    sha256: str
    """Of its copy of the view, in one from before ("" now: none is kept)."""
    taken_ms: int
    states_sha256: str
    """Of ``view-N.states``: each partition's writer state, pickled (in one
    from before, then the view read as a live snapshot)."""
    marks: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)
    """Partition -> where its record at the checkpoint's offset starts in the
    events topic and the chain value it follows (:meth:`Log.mark`), for the
    partitions whose log said (none in a manifest from before them)."""
    fingerprints: str = ""
    """Which claim fingerprint its states hold (:data:`FINGERPRINTS`): states
    with another ("" before manifests said: per-process ``hash()`` values)
    would judge a late duplicate a reused id, so they are passed over."""

    @property
    def records(self) -> int:
        return sum(self.offsets.values())

    def within(self, until: Mapping[int, int]) -> bool:
        """Whether every partition's offset is at or before ``until``'s."""
        return all(offset <= until.get(p, 0) for p, offset in self.offsets.items())

    def manifest(self) -> dict[str, object]:
        return {
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
            "size": self.size,
            "sha256": self.sha256,
            "states_sha256": self.states_sha256,
            "taken_ms": self.taken_ms,
            "log_marks": {str(p): list(m) for p, m in sorted(self.marks.items())},
            "fingerprints": self.fingerprints,
        }

    def to_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "records": self.records,
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
            "size": self.size,
            "taken_ms": self.taken_ms,
        }


Saved = tuple[Snapshot | None, dict[int, int], Any]
"""What a live snapshot knows (:meth:`consumers.snapshot_source.LiveSnapshot.saved`):
checkpoints from before this one saved it after their states."""


class Checkpoints:
    """The checkpoints of one data directory's view."""

    disabled = False
    """Set by :meth:`ignored` (a benchmark's full replay, a test's)."""

    def __init__(self, settings: Settings, keep: int = DEFAULT_KEEP) -> None:
        self.settings = settings
        self.directory = settings.data_dir / DIRECTORY
        self.keep = keep

    @staticmethod
    @contextmanager
    def ignored() -> Iterator[None]:
        """Explain as if there were no checkpoints, within the block."""
        Checkpoints.disabled = True
        try:
            yield
        finally:
            Checkpoints.disabled = False

    def view_file(self) -> Path:
        """The SQLite file of the view, or :class:`CheckpointError`."""
        url = self.settings.view_url
        if not url.startswith("sqlite:///"):
            raise CheckpointError(
                "checkpoints copy a SQLite view; this view is not one "
                "(explain replays the log from offset 0)"
            )
        return Path(url.removeprefix("sqlite:///"))

    def take(self) -> Checkpoint | None:
        """Save the writers' states as the view holds them now, then prune;
        the new checkpoint, or None if the newest one already holds exactly
        this."""
        view = self.view_file()
        self.directory.mkdir(parents=True, exist_ok=True)
        offsets = _committed(view)
        newest = self.newest()
        if not offsets or (newest is not None and newest.offsets == offsets):
            return None
        with closing(open_log(self.settings, read_only=True)) as events, collector_paused():
            states = self._states_from_previous(offsets, events)
            if states is None:
                offsets, states = self._states_of_view(view)
            marks = _marks(events, self.settings.topics.events, offsets)
            data = dump_states(states)
        path = self.directory / f"view-{sum(offsets.values()):015d}.states"
        _write_synced(path, data)
        checkpoint = Checkpoint(
            path,
            offsets,
            len(data),
            "",
            int(time.time() * 1000),
            hashlib.sha256(data).hexdigest(),
            marks,
            FINGERPRINTS,
        )
        _write_synced(path.with_suffix(".json"), json.dumps(checkpoint.manifest()).encode())
        self.prune()
        return checkpoint

    def _states_from_previous(
        self, offsets: Mapping[int, int], events: Log
    ) -> list[PartitionState] | None:
        """The writers' states as of ``offsets``: the newest checkpoint's
        before them with the records between decided on them in memory, as
        explain does (what the live writers did, so the states loading them
        from the view would give: replay is exact), for the cost of the
        records since rather than of the whole view (and the log's records
        checked from that checkpoint's marks on). None if there is no
        usable checkpoint before."""
        restored = self.restore_states(offsets)
        if restored is None:
            return None
        checkpoint, states = restored
        if set(checkpoint.offsets) != set(offsets):
            # taken before every partition had committed: the states of
            # the others are not in it, so load them all from the view
            return None
        seed_log(events, self.settings.topics.events, checkpoint)
        for state in states:
            p = state.partition
            decide_until(
                events, self.settings.topics.events, state, checkpoint.offsets[p], offsets[p]
            )
        return states

    def _states_of_view(self, view: Path) -> tuple[dict[int, int], list[PartitionState]]:
        """Each partition's writer state loaded from a copy of the view (one
        read transaction: one commit's state, while the writers go on), as
        a restarting writer loads it; and the offsets they are as of."""
        partial = self.directory / f"partial-{os.getpid()}-{threading.get_ident()}.db"
        partial.unlink(missing_ok=True)
        try:
            with (
                closing(sqlite3.connect(f"file:{view}?mode=ro", uri=True)) as source,
                closing(sqlite3.connect(partial)) as copy,
            ):
                source.backup(copy)  # one step: one read transaction
            offsets = _committed(partial)
            return offsets, _states_of(partial, offsets)
        finally:
            partial.unlink(missing_ok=True)

    def all(self) -> list[Checkpoint]:
        """The checkpoints whose manifests read, oldest first (a manifest
        that does not is named in a warning and skipped)."""
        found = []
        for manifest in sorted(self.directory.glob("view-*.json")):
            try:
                data = json.loads(manifest.read_text())
                found.append(
                    Checkpoint(
                        manifest.with_suffix(".states"),
                        {int(p): int(o) for p, o in data["offsets"].items()},
                        int(data["size"]),
                        str(data["sha256"]),
                        int(data["taken_ms"]),
                        str(data["states_sha256"]),
                        {
                            int(p): (int(position), int(chain))
                            for p, (position, chain) in data.get("log_marks", {}).items()
                        },
                        str(data.get("fingerprints", "")),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
                log.warning(
                    "checkpoint %s ignored: its manifest does not read: %s", manifest, error
                )
        return sorted(found, key=lambda c: c.records)

    def newest(self) -> Checkpoint | None:
        every = self.all()
        return every[-1] if every else None

    def restore_states(
        self, until: Mapping[int, int]
    ) -> tuple[Checkpoint, list[PartitionState]] | None:
        """The newest checkpoint whose offsets are all at or before
        ``until``'s and its writers' states, checked against its manifest,
        without its copy of the view (what explain decides on in memory); a
        damaged or vanished one is named in a warning and the next older
        tried. None when none will do."""
        if Checkpoints.disabled:
            return None
        for checkpoint in reversed(self.all()):
            if not checkpoint.within(until):
                continue
            try:
                states, _ = _read_states(checkpoint, live=False)
            except _Damaged as problem:
                log.warning("checkpoint %s ignored: %s", checkpoint.path, problem)
                continue
            return checkpoint, states
        return None

    def prune(self) -> list[Path]:
        """Keep at most :attr:`keep` checkpoints, evenly spread over the log
        (the newest and oldest always); remove interrupted copies. The files
        removed."""
        removed = [p for p in self.directory.glob("partial-*.db") if _stale(p)]
        every = self.all()
        while len(every) > max(self.keep, 2):
            gaps = [every[i + 1].records - every[i - 1].records for i in range(1, len(every) - 1)]
            gone = every.pop(1 + gaps.index(min(gaps)))
            # the manifest first: without it the rest is never read
            removed += [gone.path.with_suffix(s) for s in (".json", ".db", ".states")]
        for path in removed:
            path.unlink(missing_ok=True)
        return removed


def seed_log(log: Log, topic: str, checkpoint: Checkpoint) -> None:
    """Have ``log`` check the records of ``topic`` from the checkpoint's
    offsets on only, chaining from the values its marks recorded, where it
    has not read them yet (see :meth:`Log.seed`)."""
    for partition, mark in checkpoint.marks.items():
        log.seed(topic, partition, checkpoint.offsets[partition], mark)


def _marks(log: Log, topic: str, offsets: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """What ``log`` says of each partition's record at its offset (see
    :meth:`Log.mark`), for those it says it of."""
    found = {}
    for partition, offset in offsets.items():
        mark = log.mark(topic, partition, offset)
        if mark is not None:
            found[partition] = mark
    return found


def _stale(partial: Path) -> bool:
    """A partial copy whose process is gone (its name carries the pid)."""
    pid = int(partial.stem.split("-")[1])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


class _Damaged(Exception):
    """A checkpoint's file missing or not as its manifest says."""


def _read_states(
    checkpoint: Checkpoint, live: bool = True
) -> tuple[list[PartitionState], Saved | None]:
    """The writers' states of the checkpoint and, if ``live``, its live
    snapshot, checked against its manifest."""
    if checkpoint.fingerprints != FINGERPRINTS:
        raise _Damaged(
            f"its states hold claim fingerprints of another kind "
            f"({checkpoint.fingerprints or 'per-process hash(), from before'}; "
            f"this version uses {FINGERPRINTS}): a late duplicate would be judged a reused id"
        )
    try:
        data = checkpoint.path.with_suffix(".states").read_bytes()
    except FileNotFoundError:
        raise _Damaged("its writers' states are missing") from None
    if hashlib.sha256(data).hexdigest() != checkpoint.states_sha256:
        raise _Damaged("its writers' states do not match its manifest's SHA-256 (damaged)")
    states, saved = load_states(data, live)
    if {s.partition for s in states} != set(checkpoint.offsets) or (
        saved is not None and saved[1] != checkpoint.offsets
    ):
        raise _Damaged("its writers' states are not those of its partitions")
    return states, saved


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off within the block. Loading or
    reading a writer's state makes millions of objects and next to no
    reference cycles: with the collector on, its young collections
    traverse them again and again (reading a checkpoint's states took four
    times as long)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _states_of(copy: Path, offsets: Mapping[int, int]) -> list[PartitionState]:
    """Each partition's writer state as of the copy, as a writer loads it."""
    engine = make_engine(f"sqlite:///{copy}")
    try:
        with engine.connect() as conn:
            partitions = conn.execute(_PARTITIONS).scalar_one()
            states = [load_state(conn, p, partitions)[0] for p in sorted(offsets)]
    finally:
        engine.dispose()
    for state in states:
        # as a writer that loads them does: nothing is pending a write
        state.touched.clear()
        state.reshaped.clear()
    return states


_PARTITIONS = select(func.max(partition_offsets.c.partitions))


def _committed(view: Path) -> dict[int, int]:
    """The offset each partition of ``view`` has applied, as committed."""
    with closing(sqlite3.connect(f"file:{view}?mode=ro", uri=True)) as conn:
        rows = conn.execute('SELECT "partition", next_offset FROM partition_offsets').fetchall()
    return {int(p): int(o) for p, o in rows}


def _write_synced(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all."""
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


_OURS = ("projections", "schemas", "scheduling", "consumers")


class _StatePickler(pickle.Pickler):
    """Pickles writers' states and snapshots. mypyc's own pickling of a
    compiled class makes it with no arguments and then sets its attributes:
    that fails for a frozen dataclass and for a class whose ``__init__``
    takes arguments, so those are made from their constructor's arguments
    here (a dataclass of ours too: faster than pickle's own way for a
    frozen one, which looks its fields up again for every instance)."""

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        if cls is Reservation:
            return cls, (
                obj.reservation_id,
                obj.items,
                obj.status,
                obj.expires_at_ms,
                obj.fingerprint,
                obj.group,
                obj.tags,
                obj.consumer_id,
                obj.identifiers,
                obj.transaction,
                obj.lease_ms,
                obj.project_id,
                obj.membership,
                obj.fits,
            )
        if cls is PartitionState:
            columns = reservation_columns(obj.reservations)
            if columns is not None:
                values = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
                values[_RESERVATIONS] = {}
                return _with_reservations, (cls, tuple(values), columns)
        if cls is ServerGroup:
            return _remade, (cls, (obj.group_id, obj.policy), _slots(obj))
        if cls is IntervalPool:
            return _remade, (cls, (obj.first, obj.last), _slots(obj))
        if dataclasses.is_dataclass(obj) and cls.__module__.startswith(_OURS):
            fields = dataclasses.fields(obj)
            if all(f.init for f in fields):
                return cls, tuple(getattr(obj, f.name) for f in fields)
        return NotImplemented


_RESERVATIONS = [f.name for f in dataclasses.fields(PartitionState)].index("reservations")


def _with_reservations(
    cls: type[PartitionState], fields: tuple[Any, ...], columns: ReservationColumns
) -> PartitionState:
    """A state pickled with its reservations as columns (see
    :func:`reservation_columns`)."""
    state = cls(*fields)
    state.reservations = reservations_of(columns)
    return state


def _slots(obj: Any) -> dict[str, Any]:
    """The attributes of a class with slots, compiled (mypyc lists them in
    ``__mypyc_attrs__``) or not."""
    cls = type(obj)
    names = getattr(cls, "__mypyc_attrs__", None) or cls.__slots__
    return {name: getattr(obj, name) for name in names if name != "__dict__"}


def _remade(cls: type, args: tuple[Any, ...], attributes: dict[str, Any]) -> Any:
    """An instance made by its constructor, its attributes then set as they were."""
    obj = cls(*args)
    for name, value in attributes.items():
        setattr(obj, name, value)
    return obj


def dump_states(states: list[PartitionState], live: Saved | None = None) -> bytes:
    """The writers' states, then the live snapshot: two pickles one after
    the other, so that a reader of the states alone (explain) stops after
    the first."""
    buffer = io.BytesIO()
    _StatePickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(states)
    _StatePickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(live)
    return buffer.getvalue()


def load_states(data: bytes, live: bool = True) -> tuple[list[PartitionState], Saved | None]:
    """What :func:`dump_states` wrote (or, from before, one pickle of both);
    the live snapshot only if ``live``, else None."""
    buffer = io.BytesIO(data)
    first = pickle.load(buffer)
    if isinstance(first, tuple):  # (states, live) in one pickle
        return first[0], first[1] if live else None
    return first, pickle.load(buffer) if live else None


class Checkpointer:
    """Takes a checkpoint every ``every`` records the view applies, off the
    writers' path: a thread looks at the view's offsets every ``poll_s``
    and, once they have moved on by ``every``, runs ``berth checkpoint`` in
    a process of its own (deciding the records since the last one, or
    loading the states from the view, takes seconds of CPU, which a thread
    would take from the writers)."""

    def __init__(self, settings: Settings, every: int, keep: int, poll_s: float = 5.0) -> None:
        self.settings = settings
        self.every = every
        self.keep = keep
        self.poll_s = poll_s
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="checkpointer", daemon=True)

    def start(self) -> Checkpointer:
        try:
            Checkpoints(self.settings).view_file()
        except CheckpointError as error:
            log.warning("no automatic checkpoints: %s", error)
            return self
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()

    def _run(self) -> None:
        checkpoints = Checkpoints(self.settings, self.keep)
        newest = checkpoints.newest()
        last = newest.records if newest is not None else 0
        while not self.stopping.wait(self.poll_s):
            applied = _applied(checkpoints.view_file())
            if applied - last < self.every:
                continue
            command = [sys.executable, "-m", "berth.cli", "checkpoint", "--keep", str(self.keep)]
            settings = self.settings
            command += ["--data-dir", str(settings.data_dir), "--db", settings.db_url]
            command += ["--log", settings.log_url]  # the records since the last one
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                log.warning("berth checkpoint failed: %s", done.stderr.strip()[-2000:])
            last = applied  # tried: the next one after as many records more


def _applied(view: Path) -> int:
    """Records the view has applied, all partitions together."""
    with closing(sqlite3.connect(f"file:{view}?mode=ro", uri=True)) as conn:
        row = conn.execute("SELECT COALESCE(SUM(next_offset), 0) FROM partition_offsets").fetchone()
        return int(row[0])
