"""Throughput of the log backends.

Run ``python -m bench.ledger [--kafka HOST:PORT|auto] [--dir DIR] [--records N]``.
Progress goes to stderr; the last stdout line is one JSON object of figures.
``--kafka auto`` starts the tansu broker shipped with the test dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ledger.embedded import EmbeddedLog
from ledger.log import Append, Log

_VALUE = b"v" * 290  # with a ~10-byte key, ~300-byte records
_BATCH = 1000
_READ_CHUNK = 5000


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _batch(start: int, partition: int = 0) -> list[Append]:
    return [Append(partition, f"k{i:09}".encode(), _VALUE) for i in range(start, start + _BATCH)]


class _CountingFsync:
    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
        os.fsync(fd)


def _append_rate(log: Log, topic: str, records: int) -> float:
    """Records/s appending ``records`` in batches of ``_BATCH`` to one partition."""
    started = time.perf_counter()
    for start in range(0, records, _BATCH):
        log.append(topic, _batch(start))
    return records / (time.perf_counter() - started)


def _read_rate(log: Log, topic: str, records: int) -> float:
    """Records/s replaying a partition of ``records`` records from offset 0."""
    started = time.perf_counter()
    offset = 0
    while offset < records:
        batch = log.read(topic, 0, offset, _READ_CHUNK)
        if not batch:
            raise RuntimeError(f"replay stopped at {offset} of {records}")
        offset += len(batch)
    return records / (time.perf_counter() - started)


def _group_commit(data_dir: Path, threads: int, seconds: float) -> dict[str, float]:
    fsync = _CountingFsync()
    with EmbeddedLog(data_dir / "group", fsync=fsync) as log:
        log.create_topic("small", 1)
        before = fsync.calls
        stop = time.monotonic() + seconds
        counts = [0] * threads

        def writer(n: int) -> None:
            record = [Append(0, f"w{n}".encode(), _VALUE)]
            while time.monotonic() < stop:
                log.append("small", record)
                counts[n] += 1

        started = time.perf_counter()
        workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - started
        appends = sum(counts)
        fsyncs = fsync.calls - before
    single = _single_thread_small_appends(data_dir, seconds / 2)
    return {
        "threads": threads,
        "appends_per_s": round(appends / elapsed),
        "appends_per_fsync": round(appends / max(fsyncs, 1), 2),
        "single_thread_appends_per_s": round(single),
    }


def _single_thread_small_appends(data_dir: Path, seconds: float) -> float:
    with EmbeddedLog(data_dir / "single") as log:
        log.create_topic("small", 1)
        record = [Append(0, b"w", _VALUE)]
        count = 0
        started = time.perf_counter()
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            log.append("small", record)
            count += 1
        return count / (time.perf_counter() - started)


def _timed(label: str, action: Callable[[], float]) -> float:
    _progress(f"{label} ...")
    value = action()
    _progress(f"{label}: {value:,.0f} records/s")
    return round(value)


def bench_embedded(data_dir: Path, records: int, append_records: int) -> dict[str, object]:
    figures: dict[str, object] = {"record_bytes": 10 + len(_VALUE), "batch": _BATCH}
    with EmbeddedLog(data_dir / "embedded") as log:
        log.create_topic("bench", 1)
        figures["append_records_per_s"] = _timed(
            f"embedded append, {append_records:,} records in batches of {_BATCH}",
            lambda: _append_rate(log, "bench", append_records),
        )
        _progress(f"filling to {records:,} records for the replay")
        for start in range(append_records, records, _BATCH):
            log.append("bench", _batch(start)[: records - start])
    started = time.perf_counter()
    with EmbeddedLog(data_dir / "embedded") as log:
        figures["reopen_s"] = round(time.perf_counter() - started, 3)
        _progress(f"reopen (index scan of {records:,} records): {figures['reopen_s']} s")
        read_rate = _timed(
            f"embedded replay of {records:,} records",
            lambda: _read_rate(log, "bench", records),
        )
        figures["read_records_per_s"] = read_rate
        figures["replay_s"] = round(records / read_rate, 3)
    _progress("group commit, 4 threads of single-record appends ...")
    figures["group_commit"] = _group_commit(data_dir, threads=4, seconds=4.0)
    _progress(f"group commit: {figures['group_commit']}")
    return figures


def bench_kafka(bootstrap: str, records: int) -> dict[str, object]:
    from ledger.kafka import KafkaLog

    topic = f"bench-{uuid.uuid4().hex[:8]}"
    with KafkaLog(bootstrap, client_id="berth-bench") as log:
        log.create_topic(topic, 1)
        produce = _timed(
            f"kafka produce, {records:,} records in batches of {_BATCH}",
            lambda: _append_rate(log, topic, records),
        )
    with KafkaLog(bootstrap, client_id="berth-bench") as log:
        read = _timed(
            f"kafka replay of {records:,} records", lambda: _read_rate(log, topic, records)
        )
    return {
        "bootstrap": bootstrap,
        "records": records,
        "produce_records_per_s": produce,
        "read_records_per_s": read,
    }


@contextmanager
def _kafka(target: str | None) -> Iterator[str | None]:
    if target != "auto":
        yield target
        return
    try:
        from tests.kafka_broker import running_tansu
    except ImportError as exc:
        raise SystemExit(f"--kafka auto needs the source tree's tests package: {exc}") from exc

    _progress("starting tansu")
    with running_tansu() as bootstrap:
        yield bootstrap


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger", description=__doc__)
    parser.add_argument("--kafka", metavar="HOST:PORT|auto", help="also measure a Kafka broker")
    parser.add_argument(
        "--dir", type=Path, help="where the embedded log goes (default: a temp dir)"
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="replay size")
    parser.add_argument("--append-records", type=int, default=200_000)
    parser.add_argument("--kafka-records", type=int, default=50_000)
    args = parser.parse_args(argv)

    results: dict[str, object] = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="berth-bench-", dir=args.dir) as tmp:
        results["embedded"] = bench_embedded(
            Path(tmp), args.records, min(args.append_records, args.records)
        )
    with _kafka(args.kafka) as bootstrap:
        if bootstrap is not None:
            results["kafka"] = bench_kafka(bootstrap, args.kafka_records)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
