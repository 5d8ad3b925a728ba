"""Names of Berth's topics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Topics:
    events: str = "berth.events"
    outcomes: str = "berth.outcomes"
    dead_letters: str = "berth.deadletter"
    requests: str = "berth.requests"
    """Placement requests, keyed by request id, for the scheduler workers."""
    placements: str = "berth.placements"
    """The scheduler's final word on each request: placed or failed."""
    transactions: str = "berth.transactions"
    """The coordinator's record of each transaction: begun, decided, finished."""
    moves: str = "berth.moves"
    """Instance moves ``berth balance --claim`` claimed, keyed by consumer, for
    the service that moves instances."""
    policies: str = "berth.policies"
    """Scheduling policies and which project uses which (one partition)."""


DEFAULT_TOPICS = Topics()
