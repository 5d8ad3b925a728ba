"""``berth balance``'s edge: plan on the view, and claim the destinations.

A move's claim holds the instance's resources on the destination under a
new reservation id, for the same consumer and with the same rules as its
current claim, so the partition's writer checks the move exactly as it
checked the first placement. The service moving the instance then consumes
the new reservation and releases the old one (or releases the new one if
the move fails, or lets its lease run out).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import Engine

from berth.client import Publisher, wall_clock_ms
from consumers.snapshot_source import balance_inputs
from placement.balance import Move, Plan
from placement.config import SchedulerConfig
from schemas.events import Claim, ClaimItem


def plan_from_view(engine: Engine, config: SchedulerConfig) -> Plan:
    snapshot, instances = balance_inputs(engine)
    return config.balancer().plan(snapshot, instances)


@dataclass(frozen=True, slots=True)
class MoveClaim:
    move: Move
    reservation_id: str
    partition: int
    offset: int


def move_claim(move: Move, reservation_id: str, lease_ms: int, ts_ms: int) -> Claim:
    instance = move.instance
    return Claim(
        event_id=f"claim-{reservation_id}",
        ts_ms=ts_ms,
        partition_key=move.destination,
        reservation_id=reservation_id,
        consumer_id=instance.consumer_id,
        project_id=instance.project_id,
        items=(ClaimItem(provider_id=move.destination, resources=dict(instance.resources)),),
        lease_ms=lease_ms,
        anti_affinity_group=instance.anti_affinity_group,
        tags=instance.tags,
        require_with_tags=instance.require_with_tags,
        require_without_tags=instance.require_without_tags,
    )


def claim_moves(publisher: Publisher, plan: Plan, lease_ms: int) -> list[MoveClaim]:
    """Publish one claim per move, each under a fresh reservation id."""
    now = wall_clock_ms()
    claims = [
        (move, f"{move.instance.reservation_id}.move-{uuid.uuid4().hex[:12]}")
        for move in plan.moves
    ]
    positions = publisher.publish([move_claim(m, rid, lease_ms, now) for m, rid in claims])
    return [
        MoveClaim(move, rid, partition, offset)
        for (move, rid), (partition, offset) in zip(claims, positions, strict=True)
    ]
