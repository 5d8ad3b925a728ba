"""Waiting in tests for something another thread or process does: polling
with a deadline, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Return once ``predicate()`` holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
