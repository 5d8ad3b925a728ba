"""The view writer's rebuild mode: rows held back until they are final.

A rebuild writes into a file that nothing reads until it is complete, so
it need not keep every row current batch after batch: it writes a
reservation's row once, when the reservation is final (released, expired
or aborted), and providers' usage once, rather than updating both batch
after batch (a twentieth of a rebuild's instructions). What is still held
when a partition's last batch is in is written then (:meth:`HeldBack.write`),
and a batch writes every reservation row held once more than ``at_most``
are (a few hundred bytes each; what is written is updated from then on, as
a live writer does). Claims with identifiers or a transaction are written
as a live writer does.

The rows themselves are made, and held or let go, where they are made:
``reservation_rows.write_reservations`` and ``usage_rows.write_providers``
take what :class:`HeldBack` holds.
"""

from __future__ import annotations

from typing import Any

from projections.state import PartitionState
from projections.view.plan import Plan
from projections.view.reservation_rows import insert_reservations
from projections.view.usage_rows import write_usage


class HeldBack:
    """What a rebuild's writer has not written yet, of one partition."""

    __slots__ = ("at_most", "reservations", "usage")

    def __init__(self, at_most: int) -> None:
        self.at_most = at_most
        self.reservations: dict[str, list[Any]] = {}
        """Rows of active reservations (no identifiers, no transaction), by id."""
        self.usage: dict[str, int] = {}
        """Providers whose usage changed -> end offset of the batch it last did."""

    def write_reservations(self, plan: Plan) -> None:
        """Insert the rows held back, and hold them no longer."""
        insert_reservations(plan, list(self.reservations.values()))
        self.reservations.clear()

    def write(self, plan: Plan, state: PartitionState) -> None:
        """Write all that is held of ``state``'s partition: the rows of the
        reservations still active, and the usage of the providers, each with
        the offset of the batch that last changed it."""
        self.write_reservations(plan)
        write_usage(plan, state, sorted(self.usage.items()))
        self.usage.clear()
