"""An idle ``berth serve --api``, a real process with no traffic, uses
next to no CPU: its loops block until a record arrives or a real deadline
passes (an ownership check, uvicorn's once-a-second Date header), rather
than waking on a short period to find nothing.

The bound, from measurements on this 2-core machine (CPU ticks of 10 ms,
utime + stime from /proc/PID/stat, 10 s idle): the loop that woke every
50 ms used 8-10 ticks; the blocking loops use 0-1. A bound of 4 ticks (0.4%
of a core, 0.04 s) fails the first and leaves room for a loaded machine."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from tests.polling import wait_for
from tests.processes import berth_running

IDLE_S = 10.0
MAX_IDLE_CPU_S = 0.04

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/PID/stat"
)


def test_an_idle_serve_uses_next_to_no_cpu(tmp_path: Path) -> None:
    port = _free_port()
    argv = ("serve", "--data-dir", str(tmp_path / "data"), "--api", f"127.0.0.1:{port}")
    with berth_running(*argv, ready=lambda: _listening(port)) as process:
        _settled(process.pid)
        before = _cpu_ticks(process.pid)
        time.sleep(IDLE_S)  # the window measured, not a wait for something to happen
        used_s = (_cpu_ticks(process.pid) - before) / os.sysconf("SC_CLK_TCK")
    assert used_s <= MAX_IDLE_CPU_S, f"{used_s:.2f} s of CPU in {IDLE_S} s idle"


def _settled(pid: int) -> None:
    """Once start-up's work is done (the API's view read ahead, the first
    idle refresh): a whole second without a CPU tick used."""
    last = [_cpu_ticks(pid), time.monotonic()]

    def quiet_for_a_second() -> bool:
        ticks = _cpu_ticks(pid)
        if ticks != last[0]:
            last[:] = [ticks, time.monotonic()]
        return time.monotonic() - last[1] >= 1.0

    wait_for(quiet_for_a_second, "serve to settle after starting", timeout_s=60)


def _cpu_ticks(pid: int) -> int:
    """utime + stime of every thread of the process, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True

