"""The reaper: ticks every partition on a schedule so abandoned holds expire.

A hold expires at the first record of its partition whose clock is past its
deadline. A busy partition gets such records anyway; a quiet one may see none
for hours, and its abandoned holds would keep their capacity and identifiers.
The reaper appends a tick with its clock to every partition every
``interval_s``, so a hold expires within one interval of its deadline (plus
the writer's lag), however quiet its partition.

Running several reapers at once (one per host, for availability) is harmless.
A tick changes nothing but its partition's clock, and that clock is the
largest producer timestamp the partition has seen, so it never goes back: a
duplicate tick, or one from a reaper whose clock lags, leaves it where it was
and decides nothing. A second reaper can only make a hold expire sooner after
its deadline, never before it, and never twice. The one reaper to avoid is
one whose clock runs fast, as with any producer: it expires holds early.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from consumers.periodic import run_every
from ledger.publisher import Publisher


class Reaper:
    """Appends a tick to each partition (all by default) every ``interval_s``."""

    def __init__(
        self,
        publisher: Publisher,
        interval_s: float,
        partitions: Sequence[int] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, not {interval_s}")
        self.publisher = publisher
        self.interval_s = interval_s
        self.partitions = list(range(publisher.partitions)) if partitions is None else partitions
        self.monotonic = monotonic
        self.rounds = 0
        """Rounds that appended their ticks."""

    def step(self) -> None:
        """One round: a tick with the publisher's clock to every partition, in
        one append."""
        self.publisher.tick(self.partitions)
        self.rounds += 1

    def run(self, stop: threading.Event, rounds: int | None = None) -> None:
        """Tick every ``interval_s`` until ``stop`` is set (or ``rounds`` rounds
        have been tried); a failed round is logged and the next one tried
        (see :func:`run_every`): a reaper that died on one broker hiccup would
        stop expiry everywhere."""
        run_every(
            self.step,
            self.interval_s,
            stop,
            rounds,
            self.monotonic,
            "reaper: a round of ticks",
        )
