"""Running a step on a fixed schedule, for the workers that act on their own
(the reaper, the balancer) rather than on records."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def run_every(
    step: Callable[[], object],
    interval_s: float,
    stop: threading.Event,
    rounds: int | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    what: str = "a round",
) -> None:
    """Call ``step`` every ``interval_s`` until ``stop`` is set (or ``rounds``
    rounds have been tried). A round that raises is logged and the next one
    tried: a worker that died on one broker hiccup would stop for good.
    Rounds are due on a fixed schedule, so slow rounds do not stretch the
    interval round after round; one that falls behind by more than a round
    starts afresh."""
    tried = 0
    due = monotonic()
    while not stop.is_set():
        try:
            step()
        except Exception:
            log.exception("%s failed; trying again next round", what)
        tried += 1
        if rounds is not None and tried >= rounds:
            return
        due += interval_s
        now = monotonic()
        if due < now:
            due = now
        stop.wait(due - now)
