"""A partition of the embedded log indexed from a mark (``Log.seed``, as
``berth explain`` continuing a checkpoint does): the records from the mark
on read as from a full index, each still checked against the chain from
the marked value, so damage after the mark is found at the record a full
scan finds it; a wrong mark, a read before it, a whole-file check or a cut
go back to indexing the file from record 0."""

from __future__ import annotations

import random
from contextlib import closing
from pathlib import Path

import pytest

from ledger import embedded_file, frames
from ledger.embedded import EmbeddedLog
from ledger.log import Append, CorruptLog, Record

_HEADER = frames.header_size(frames.CURRENT_FORMAT)
_RECORDS = 400
_MARKED = 250


def _write(root: Path) -> list[Record]:
    """One partition of ``_RECORDS`` records of varied sizes; what it holds."""
    rng = random.Random(23)
    with closing(EmbeddedLog(root)) as log:
        log.create_topic("t", 1)
        for start in range(0, _RECORDS, 7):
            count = min(7, _RECORDS - start)
            values = [rng.randbytes(rng.choice((0, 5, 60, 200))) for _ in range(count)]
            log.append("t", [Append(0, f"k{start + i}".encode(), v) for i, v in enumerate(values)])
        return _all(log)


def _all(log: EmbeddedLog, start: int = 0) -> list[Record]:
    got: list[Record] = []
    while records := log.read("t", 0, start + len(got), 64):
        got += records
    return got


def _mark(root: Path, offset: int) -> tuple[int, int]:
    with closing(EmbeddedLog(root, read_only=True)) as log:
        mark = log.mark("t", 0, offset)
    assert mark is not None
    return mark


def _flip(root: Path, position: int) -> None:
    path = root / "log" / "t" / "p0.log"
    data = bytearray(path.read_bytes())
    data[position] ^= 0x10
    path.write_bytes(bytes(data))


def _position(records: list[Record], offset: int) -> int:
    return sum(_HEADER + len(r.key) + len(r.value) for r in records[:offset])


def test_records_from_a_mark_read_as_from_a_full_index(tmp_path: Path) -> None:
    stored = _write(tmp_path)
    mark = _mark(tmp_path, _MARKED)
    assert mark[0] == _position(stored, _MARKED)
    with closing(EmbeddedLog(tmp_path, read_only=True)) as log:
        assert log.seed("t", 0, _MARKED, mark)
        assert log.end_offset("t", 0) == _RECORDS
        assert _all(log, _MARKED) == stored[_MARKED:]
        assert log.mark("t", 0, _MARKED + 10) == _mark(tmp_path, _MARKED + 10)
        assert not log.seed("t", 0, _MARKED, mark)  # indexed already
        # a read before the mark indexes the file from its start
        assert _all(log) == stored


def test_appends_after_a_seed_take_the_next_offsets(tmp_path: Path) -> None:
    stored = _write(tmp_path)
    mark = _mark(tmp_path, _MARKED)
    with closing(EmbeddedLog(tmp_path)) as log:
        assert log.seed("t", 0, _MARKED, mark)
        assert log.append("t", [Append(0, b"new", b"one")]) == [_RECORDS]
    with closing(EmbeddedLog(tmp_path, read_only=True)) as log:
        assert _all(log) == [*stored, Record(0, _RECORDS, b"new", b"one")]


def test_damage_after_the_mark_is_found_where_a_full_scan_finds_it(tmp_path: Path) -> None:
    stored = _write(tmp_path)
    mark = _mark(tmp_path, _MARKED)
    damaged = _MARKED + 40
    _flip(tmp_path, _position(stored, damaged) + _HEADER + 1)
    with closing(EmbeddedLog(tmp_path, read_only=True)) as log:
        assert log.seed("t", 0, _MARKED, mark)
        assert log.read("t", 0, _MARKED, 40) == stored[_MARKED:damaged]
        with pytest.raises(CorruptLog, match=f"record {damaged}"):
            log.read("t", 0, damaged, 1)
        assert log.end_offset("t", 0) == damaged
    with (
        closing(EmbeddedLog(tmp_path, read_only=True)) as log,
        pytest.raises(CorruptLog, match=f"record {damaged}"),
    ):
        _all(log)  # read from record 0, the same record is refused


def test_a_wrong_mark_is_not_trusted(tmp_path: Path) -> None:
    stored = _write(tmp_path)
    position, chain = _mark(tmp_path, _MARKED)
    wrong = [(position, chain ^ 1), (position + 1, chain), (position, 0)]
    for mark in wrong:
        with closing(EmbeddedLog(tmp_path, read_only=True)) as log:
            assert log.seed("t", 0, _MARKED, mark)
            # the seeded scan fails at once: the file is indexed from record 0
            assert log.end_offset("t", 0) == _RECORDS
            assert log.damage("t", 0) is None
            assert _all(log, _MARKED) == stored[_MARKED:]
    with closing(EmbeddedLog(tmp_path, read_only=True)) as log:
        # past the file's end: not taken
        assert not log.seed("t", 0, _MARKED, (1 << 40, chain))
        assert _all(log) == stored


def test_damage_before_the_mark_is_not_read_but_a_check_finds_it(tmp_path: Path) -> None:
    stored = _write(tmp_path)
    mark = _mark(tmp_path, _MARKED)
    _flip(tmp_path, _position(stored, 10) + _HEADER + 1)
    with closing(EmbeddedLog(tmp_path, read_only=True)) as log:
        assert log.seed("t", 0, _MARKED, mark)
        assert _all(log, _MARKED) == stored[_MARKED:]  # those records are sound
        # a read before the mark indexes from record 0, and stops at the damage
        assert log.read("t", 0, 0, 64) == stored[:10]
        with pytest.raises(CorruptLog, match="record 10"):
            log.read("t", 0, 10, 1)
    with closing(EmbeddedLog(tmp_path, read_only=True)) as log:
        assert log.seed("t", 0, _MARKED, mark)
        check = log.check("t", 0)
        assert check.damage is not None and "record 10" in check.damage


def test_a_read_indexes_the_file_only_as_far_as_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded_file, "_SCAN_WINDOW", 1024)
    stored = _write(tmp_path)
    mark = _mark(tmp_path, _MARKED)
    with closing(EmbeddedLog(tmp_path, read_only=True)) as log:
        part = log._partition("t", 0)
        assert log.read("t", 0, 0, 20) == stored[:20]
        indexed, _ = part.extent()
        assert 20 <= indexed < _RECORDS // 2
        assert log.holds("t", 0, 100) and part.extent()[0] < _RECORDS // 2
        assert _all(log) == stored
        assert not log.holds("t", 0, _RECORDS + 1)
    with closing(EmbeddedLog(tmp_path, read_only=True)) as log:
        part = log._partition("t", 0)
        assert log.seed("t", 0, _MARKED, mark)
        assert log.holds("t", 0, _MARKED)  # the mark says so: nothing read
        assert part.extent() == (_MARKED, mark[0])
        assert log.read("t", 0, _MARKED, 30) == stored[_MARKED : _MARKED + 30]
        assert part.extent()[0] < _RECORDS
        assert log.end_offset("t", 0) == _RECORDS
