"""What the Placement API does without HTTP: append a Placement event, wait
for its writer's decision and for the view to hold it (read-your-writes),
and read the view. Every method blocks: the app calls them from worker
threads."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from berth.app import App
from berth.client import Decisions, Publisher, PublishError
from berth.placement_api.errors import PlacementError
from ledger.publisher import wall_clock_ms
from projections.view.tables import partition_offsets
from schemas.codec import EventDecodeError, validate_event
from schemas.events import PLACEMENT_KEY
from schemas.outcomes import Code, Kind, Outcome

DECISION_TIMEOUT_S = 30.0
VIEW_POLL_S = 0.002
"""How often a write asks whether the view has committed its decision yet
(the decision is published first; the commit follows within milliseconds)."""


class Refused(Exception):
    """The writer refused the write: its reason, for the route to word."""

    def __init__(self, code: Code, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class PlacementService:
    """Placement's writes and reads on one :class:`App` (its log and view)."""

    def __init__(self, app: App, timeout_s: float = DECISION_TIMEOUT_S) -> None:
        self.app = app
        self.engine = app.engine
        self.topics = app.settings.topics
        self.publisher = Publisher(app.log, self.topics)
        self.partition = self.publisher.partition_of(PLACEMENT_KEY)
        self.timeout_s = timeout_s

    def write(self, fields: Mapping[str, Any]) -> Outcome:
        """Append one Placement event and return the writer's decision once
        the view holds it; :class:`Refused` when the writer refused it."""
        event_id = f"placement-{uuid.uuid4()}"
        data = {
            **fields,
            "event_id": event_id,
            "ts_ms": wall_clock_ms(),
            "partition_key": PLACEMENT_KEY,
        }
        try:
            event = validate_event(data)
        except EventDecodeError as error:
            raise PlacementError(400, f"JSON does not validate: {error}") from None
        decisions = Decisions(self.app.log, self.topics)  # before the append: see Decisions
        try:
            [(partition, offset)] = self.publisher.publish([event])
        except PublishError as error:
            raise PlacementError(400, str(error)) from None
        pending = decisions.wait([event_id], self.timeout_s, partitions={partition})
        if pending:
            raise PlacementError(
                503, f"the write was appended ({partition}, {offset}) but not decided yet"
            )
        own = [o for o in decisions.found[event_id] if o.subject and o.kind != Kind.EXPIRED]
        decision = own[-1]
        self._wait_view(partition, offset)
        if decision.kind == Kind.REJECTED:
            reason = decision.reasons[0]
            raise Refused(reason.code, reason.detail)
        return decision

    def _wait_view(self, partition: int, offset: int) -> None:
        """Until the view has committed the record at ``offset`` (an outcome
        is published before its batch commits)."""
        deadline = time.monotonic() + self.timeout_s
        query = select(partition_offsets.c.next_offset).where(
            partition_offsets.c.partition == partition
        )
        with self.engine.connect() as conn:
            while True:
                committed = conn.execute(query).scalar()
                conn.rollback()  # the next read sees the next commit
                if committed is not None and committed > offset:
                    return
                if time.monotonic() > deadline:
                    raise PlacementError(503, "the write was decided but the view is behind")
                time.sleep(VIEW_POLL_S)
