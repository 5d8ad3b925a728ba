"""Berth commands run as real processes beside a test, stopped as a
supervisor stops them (SIGTERM), and required to exit cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from ledger.topics import DEFAULT_TOPICS
from tests.polling import wait_for

_STDERR_SHOWN = 6000  # characters of a failed process's stderr shown


@contextmanager
def berth_running(
    *argv: str, ready: Callable[[], bool] | None = None, what: str = "it to start"
) -> Iterator[subprocess.Popen[bytes]]:
    """``berth ARGV...`` running until the block ends; ``ready`` (if given)
    holds before the block starts."""
    process = subprocess.Popen([sys.executable, "-m", "berth.cli", *argv], stderr=subprocess.PIPE)
    passed = False
    try:
        if ready is not None:
            wait_for(ready, what, timeout_s=60)
        yield process
        passed = True
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        if not passed:
            # the block failed: what the process said is the other half of
            # the story (pytest shows it with the failure)
            print(f"--- berth {argv[0]} exited {process.returncode}; its stderr's end:")
            print(err.decode(errors="replace")[-_STDERR_SHOWN:])
    assert process.returncode == 0, err.decode()


def serving(data: Path, partitions: int) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """``berth serve`` on ``data``, once it has created its topics."""
    placements = data / "log" / DEFAULT_TOPICS.placements / "meta.json"
    return berth_running(
        "serve",
        "--data-dir",
        str(data),
        "--partitions",
        str(partitions),
        ready=placements.exists,
        what="serve to create its topics",
    )
