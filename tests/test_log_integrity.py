"""The embedded log never loses an acknowledged record: damage anywhere in a
partition file is found, named and refused; only an append that never
completed is cut."""

from __future__ import annotations

import random
import shutil
import struct
from array import array
from contextlib import closing
from pathlib import Path

import pytest

from ledger import embedded_file, frames
from ledger.embedded import EmbeddedLog
from ledger.log import Append, CorruptLog, Record

_HEADER = frames.header_size(frames.CURRENT_FORMAT)
_RECORDS = 300


def _write_log(root: Path) -> list[list[Record]]:
    """Two partitions of ``_RECORDS`` records each, appended in batches of
    varied sizes (so the chain crosses many appends); what each holds."""
    rng = random.Random(20)
    stored: list[list[Record]] = [[], []]
    with closing(EmbeddedLog(root)) as log:
        log.create_topic("t", 2)
        serial = 0
        while len(stored[0]) < _RECORDS:
            batch: list[Append] = []
            for _ in range(rng.randint(1, 12)):
                partition = 0 if len(stored[0]) + len(batch) < _RECORDS else 1
                key = f"key-{serial}".encode() if serial % 5 else b""
                value = rng.randbytes(rng.choice((0, 3, 40, 300)))
                batch.append(Append(partition, key, value))
                serial += 1
            for record, offset in zip(batch, log.append("t", batch), strict=True):
                stored[record.partition].append(
                    Record(record.partition, offset, record.key, record.value)
                )
        log.append("t", [Append(1, b"other", b"partition")])
        stored[1].append(Record(1, len(stored[1]), b"other", b"partition"))
    return stored


def _starts(records: list[Record]) -> list[int]:
    """Each record's byte position in its file, and the file's end."""
    positions = [0]
    for record in records:
        positions.append(positions[-1] + _HEADER + len(record.key) + len(record.value))
    return positions


def _read_until_refused(log: EmbeddedLog, partition: int) -> tuple[list[Record], CorruptLog]:
    got: list[Record] = []
    with pytest.raises(CorruptLog) as refused:
        while True:
            records = log.read("t", partition, len(got), 64)
            assert records, "the end of the partition was reached without the damage found"
            got.extend(records)
    return got, refused.value


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[Record]]]:
    root = tmp_path_factory.mktemp("original")
    return root, _write_log(root)


def _copy(original: Path, where: Path) -> Path:
    root = where / "copy"
    shutil.copytree(original, root)
    return root


def _regions(record: Record, start: int) -> dict[str, int]:
    """A byte in each region of a record's frame."""
    regions = {
        "length": start,
        "key length": start + 4,
        "body checksum": start + 8,
        "header checksum": start + 12,
    }
    if record.key:
        regions["key"] = start + _HEADER + len(record.key) // 2
    if record.value:
        regions["value"] = start + _HEADER + len(record.key) + len(record.value) - 1
    return regions


_REGION_NAMES = ("length", "key length", "body checksum", "header checksum", "key", "value")
_SAMPLED = sorted({0, 1, _RECORDS - 2, _RECORDS - 1, *random.Random(7).sample(range(_RECORDS), 14)})


@pytest.mark.parametrize("window", [None, 256], ids=["whole", "windowed"])
@pytest.mark.parametrize("region", _REGION_NAMES)
def test_every_flipped_bit_is_found_and_nothing_acknowledged_is_removed(
    original: tuple[Path, list[list[Record]]],
    tmp_path: Path,
    region: str,
    window: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if window is not None:
        # reads index the file a few records at a time (records longer than
        # the window among them), as they do a file larger than the window
        monkeypatch.setattr(embedded_file, "_SCAN_WINDOW", window)
    source, stored = original
    records = stored[0]
    starts = _starts(records)
    rng = random.Random(region)
    flipped = 0
    for index in _SAMPLED:
        position = _regions(records[index], starts[index]).get(region)
        if position is None:
            continue  # an empty key or value
        root = _copy(source, tmp_path / f"{index}")
        path = root / "log" / "t" / "p0.log"
        data = bytearray(path.read_bytes())
        data[position] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        with closing(EmbeddedLog(root)) as log:
            got, refused = _read_until_refused(log, 0)
            assert got == records[:index]
            assert f"p0.log: record {index} at byte {starts[index]}" in str(refused)
            assert log.damage("t", 0) == str(refused)
            with pytest.raises(CorruptLog, match=r"p0\.log"):
                log.append("t", [Append(0, b"k", b"refused")])
            # the other partition reads and appends as before
            assert log.read("t", 1, 0, 1000) == stored[1]
            assert log.append("t", [Append(1, b"k", b"fine")]) == [len(stored[1])]
            assert log.damage("t", 1) is None
        assert path.read_bytes() == bytes(data)  # nothing cut, nothing written
        shutil.rmtree(root)
        flipped += 1
    assert flipped >= len(_SAMPLED) // 2


def test_every_cut_inside_the_last_record_is_a_torn_tail(
    original: tuple[Path, list[list[Record]]], tmp_path: Path
) -> None:
    source, stored = original
    records = stored[0]
    starts = _starts(records)
    whole = (source / "log" / "t" / "p0.log").read_bytes()
    for cut in range(starts[-2] + 1, starts[-1]):
        root = tmp_path / f"cut{cut}"
        shutil.copytree(source, root)
        (root / "log" / "t" / "p0.log").write_bytes(whole[:cut])
        with closing(EmbeddedLog(root)) as log:
            assert log.read("t", 0, 0, 1000) == records[:-1]
            assert log.damage("t", 0) is None
            assert log.append("t", [Append(0, b"k", b"after")]) == [_RECORDS - 1]
        with closing(EmbeddedLog(root)) as log:
            assert log.read("t", 0, _RECORDS - 1, 10)[0].value == b"after"
        shutil.rmtree(root)


def _rearranged(whole: bytes, starts: list[int], how: str, index: int) -> bytes:
    def record(i: int) -> bytes:
        return whole[starts[i] : starts[i + 1]]

    before, after = whole[: starts[index]], whole[starts[index + 2] :]
    if how == "deleted":
        return before + record(index + 1) + after
    if how == "duplicated":
        return before + record(index) + record(index) + record(index + 1) + after
    return before + record(index + 1) + record(index) + after  # swapped


@pytest.mark.parametrize("how", ["deleted", "duplicated", "swapped"])
@pytest.mark.parametrize("index", [0, 150, _RECORDS - 3])
def test_a_record_deleted_duplicated_or_swapped_breaks_the_chain(
    original: tuple[Path, list[list[Record]]], tmp_path: Path, how: str, index: int
) -> None:
    source, stored = original
    records = stored[0]
    root = _copy(source, tmp_path)
    path = root / "log" / "t" / "p0.log"
    whole = path.read_bytes()
    path.write_bytes(_rearranged(whole, _starts(records), how, index))
    with closing(EmbeddedLog(root)) as log:
        got, refused = _read_until_refused(log, 0)
        found = index + 1 if how == "duplicated" else index
        assert got == records[:found]
        assert f"record {found} at byte" in str(refused)
        assert "header checksum mismatch" in str(refused)


def test_a_file_copied_into_another_partitions_place_is_refused(
    original: tuple[Path, list[list[Record]]], tmp_path: Path
) -> None:
    source, _ = original
    root = _copy(source, tmp_path)
    shutil.copy(root / "log" / "t" / "p0.log", root / "log" / "t" / "p1.log")
    with closing(EmbeddedLog(root)) as log:
        assert log.read("t", 0, 0, 5)  # p0 is where it belongs
        _, refused = _read_until_refused(log, 1)
        assert "p1.log: record 0 at byte 0" in str(refused)


@pytest.mark.parametrize("tail", ["zeros", "header cut short", "unfinished record"])
def test_unfinished_tails_are_cut_and_appends_go_on(
    original: tuple[Path, list[list[Record]]], tmp_path: Path, tail: str
) -> None:
    source, stored = original
    root = _copy(source, tmp_path)
    path = root / "log" / "t" / "p0.log"
    if tail == "zeros":
        extra = bytes(10_000)
    else:
        # the record an append was writing, chained where it would have gone
        last = _starts(stored[0])[-2]
        (chain,) = struct.unpack_from("<I", path.read_bytes(), last + 12)
        framed = bytearray()
        frames.frame(framed, 2, b"key", b"v" * 500)
        frames.seal(framed, array("q", [len(framed)]), _RECORDS, chain)
        extra = bytes(framed[: 9 if tail == "header cut short" else 200])
    with open(path, "ab") as file:
        file.write(extra)
    with closing(EmbeddedLog(root)) as log:
        assert log.read("t", 0, 0, 1000) == stored[0]
        assert log.damage("t", 0) is None
        assert log.append("t", [Append(0, b"k", b"after")]) == [_RECORDS]
    with closing(EmbeddedLog(root)) as log:
        assert log.read("t", 0, _RECORDS, 10)[0].value == b"after"
