"""Names of Berth's topics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Topics:
    events: str = "berth.events"
    outcomes: str = "berth.outcomes"
    dead_letters: str = "berth.deadletter"


DEFAULT_TOPICS = Topics()
