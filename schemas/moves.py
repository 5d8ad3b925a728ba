"""What ``berth balance --claim`` tells the service that moves instances."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.events import Amount, Identifier, Model, ResourceClass
from schemas.topology import TopologyFit


class MoveProposed(Model):
    """The instance of reservation ``reservation_id`` on ``source`` is to move
    to ``destination``, where ``claim_id`` holds its resources (claimed at
    ``claim_partition`` / ``claim_offset`` of the events topic: its outcome
    says whether the writer accepted it). Once the instance has moved, the
    service consumes ``claim_id`` and releases ``reservation_id``; if it
    cannot move it, it releases ``claim_id`` (or lets its lease run out)."""

    type: Literal["move_proposed"] = "move_proposed"
    schema_version: Literal[1] = 1
    ts_ms: int = Field(ge=0)
    reservation_id: Identifier
    consumer_id: Identifier
    project_id: Identifier
    source: Identifier
    destination: Identifier
    resources: dict[ResourceClass, Amount] = Field(min_length=1, max_length=64)
    why: str
    claim_id: Identifier
    claim_partition: int = Field(ge=0)
    claim_offset: int = Field(ge=0)
    fit: TopologyFit | None = None
    """What ``claim_id`` takes of the destination's NUMA cells and PCI
    devices (the CPUs to pin the instance to there, its pages, its devices)."""
