"""What the races of schedulers through real writer processes share: the
view counted, and the racers run side by side to their end."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, func, select

from projections.view.tables import providers, reservations


def described_count(engine: Engine) -> int:
    """Providers whose NUMA cells the view holds."""
    with engine.connect() as conn:
        found = conn.execute(
            select(func.count()).where(providers.c.numa_cells != "[]")
        ).scalar_one()
    return int(found)


def held_count(engine: Engine) -> int:
    """Reservations the view holds as held."""
    with engine.connect() as conn:
        held = conn.execute(
            select(func.count()).where(reservations.c.status == "held")
        ).scalar_one()
    return int(held)


def race(racer: Callable[..., Any], args: list[tuple[Any, ...]], timeout_s: float = 300) -> None:
    """One thread per ``args``, started together, each joined; none may hang."""
    threads = [threading.Thread(target=racer, args=a) for a in args]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    assert not any(t.is_alive() for t in threads), "a scheduler hung"
