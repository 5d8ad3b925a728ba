"""Acknowledged appends survive SIGKILL at arbitrary moments."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from ledger.embedded import EmbeddedLog
from ledger.log import Append
from tests.contracts.log_contract import read_all
from tests.crash_appender import PARTITIONS, TOPIC, record_digest

_ROOT = Path(__file__).resolve().parents[1]


class _Child:
    """A crash_appender process and the acknowledgements read from its stdout."""

    def __init__(self, data_dir: Path, seed: int, stderr_path: Path) -> None:
        self._stderr_path = stderr_path
        with stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.crash_appender", str(data_dir), str(seed)],
                cwd=_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        assert self.process.stdout is not None
        self._fd = self.process.stdout.fileno()
        self._pending = b""
        self.acks: list[tuple[int, int, str]] = []

    def _pump(self, timeout: float) -> bool:
        """Read what is available; False at end of output."""
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return True
        chunk = os.read(self._fd, 1 << 16)
        if not chunk:
            return False
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        for line in lines:
            partition, offset, digest = line.decode().split()
            self.acks.append((int(partition), int(offset), digest))
        return True

    def wait_for_acks(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acks) < count:
            if time.monotonic() > deadline or not self._pump(0.05):
                raise AssertionError(
                    f"appender stalled at {len(self.acks)} acks "
                    f"(exit {self.process.poll()}): {self._stderr_path.read_text()[-2000:]}"
                )

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        # An incomplete last line is dropped: it promised nothing yet.
        while self._pump(1.0):
            pass
        assert self.process.stdout is not None
        self.process.stdout.close()


def test_acknowledged_records_survive_sigkill(tmp_path: Path) -> None:
    rng = random.Random(20240531)
    data_dir = tmp_path / "data"
    acked: dict[tuple[int, int], str] = {}
    for round_ in range(8):
        child = _Child(data_dir, seed=round_, stderr_path=tmp_path / f"stderr-{round_}")
        try:
            child.wait_for_acks(rng.randint(1, 400))
            time.sleep(rng.uniform(0, 0.03))
        finally:
            child.kill()
        for partition, offset, digest in child.acks:
            assert acked.setdefault((partition, offset), digest) == digest, (
                f"offset {partition}/{offset} acknowledged twice with different records"
            )

    assert acked
    with EmbeddedLog(data_dir) as log:
        for partition in range(PARTITIONS):
            records = read_all(log, TOPIC, partition)
            assert [r.offset for r in records] == list(range(len(records)))
            stored = {r.offset: record_digest(r.key, r.value) for r in records}
            for (p, offset), digest in acked.items():
                if p == partition:
                    assert stored.get(offset) == digest, f"lost or changed {p}/{offset}"
            end = log.end_offset(TOPIC, partition)
            assert end == len(records)
            assert log.append(TOPIC, [Append(partition, b"after", b"crash")]) == [end]
            assert log.read(TOPIC, partition, end, 1)[0].value == b"crash"
