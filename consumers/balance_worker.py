"""The balancer: plans instance moves on the view and, asked to, claims
their destinations and tells the service that moves instances.

A move's claim holds the instance's resources on the destination under a
new reservation id, for the same consumer and with the same rules as its
current claim, and with the fit the plan chose there (the NUMA cells,
pinned CPUs, huge pages and PCI devices the instance's request asks, kept
with its claim), so the partition's writer checks the move exactly as it
checked the first placement. The proposal goes to ``berth.moves``
(:class:`~schemas.moves.MoveProposed`, keyed by consumer). The service
moving the instance then consumes the new reservation and releases the old
one, or releases the new one if it cannot move the instance.

Run every so often (oVirt balances periodically), a round plans only once
the view holds the claims of the round before: until then the moves in
flight would not show, and the same excess would be relieved twice.

The claims are appended before their proposals: a balancer that dies in
between leaves holds that no proposal names, which expire with their lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine

from consumers.periodic import run_every
from consumers.policies import PolicyBook
from consumers.snapshot_source import balance_inputs
from ledger.log import Append
from ledger.partitioner import partition_for
from ledger.publisher import Publisher
from projections.view.loader import committed_offsets
from scheduling.balance import Balancer, Move, Plan
from scheduling.config import SchedulerConfig
from schemas.events import Claim, ClaimItem
from schemas.moves import MoveProposed

log = logging.getLogger(__name__)


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
        items=(
            ClaimItem(
                provider_id=move.destination,
                resources=dict(instance.resources),
                fit=move.fit,
                guest=None if move.fit is None else instance.guest,
            ),
        ),
        lease_ms=lease_ms,
        anti_affinity_group=instance.anti_affinity_group,
        tags=instance.tags,
        require_with_tags=instance.require_with_tags,
        require_without_tags=instance.require_without_tags,
    )


class BalanceWorker:
    """Plans on ``view`` with ``config``'s balance policy and engine; with
    ``claim``, claims each move (``lease_ms``) through ``publisher`` and
    proposes it on the moves topic."""

    def __init__(
        self,
        view: Engine,
        publisher: Publisher,
        config: SchedulerConfig,
        claim: bool = False,
        lease_ms: int = 0,
        report: Callable[[Plan, list[MoveClaim]], object] = lambda plan, claims: None,
        policies: PolicyBook | None = None,
        max_moves: int | None = None,
    ) -> None:
        """With ``policies``, each round plans by the default policy as of
        that round (a policy set at run time), ``config`` until there is one;
        ``max_moves`` overrides either's."""
        self.view = view
        self.publisher = publisher
        self.config = config
        self.policies = policies
        self.max_moves = max_moves
        self.claim = claim
        self.lease_ms = lease_ms
        self.report = report
        self.awaited: dict[int, int] = {}
        """Partition -> the offset after this balancer's last claim there,
        which the view must reach before the next plan."""
        self.rounds = 0
        """Rounds that planned (not those that waited for the view)."""

    def step(self) -> tuple[Plan, list[MoveClaim]] | None:
        """One round: None while the view lacks the last round's claims."""
        if self.awaited:
            with self.view.connect() as conn:
                offsets = committed_offsets(conn)
            if any(offsets.get(p, 0) < end for p, end in self.awaited.items()):
                log.info("balance: waiting for the writers to apply the last round's claims")
                return None
            self.awaited = {}
        snapshot, instances, leaving = balance_inputs(self.view)
        plan = self._balancer().plan(snapshot, instances, leaving)
        claims = self._claim(plan) if self.claim and plan.moves else []
        self.rounds += 1
        self.report(plan, claims)
        return plan, claims

    def _balancer(self) -> Balancer:
        if self.policies is None:
            return self.config.balancer()
        self.policies.refresh()
        policy = self.policies.default()
        if policy.version is None:  # no default set at run time: the configuration
            return self.config.balancer()
        moves = policy.config.max_moves if self.max_moves is None else self.max_moves
        return Balancer(policy.config.balance, policy.engine, moves)

    def run(self, interval_s: float, stop: threading.Event, rounds: int | None = None) -> None:
        run_every(self.step, interval_s, stop, rounds, time.monotonic, "balance: a round")

    def _claim(self, plan: Plan) -> list[MoveClaim]:
        publisher = self.publisher
        now = publisher.clock_ms()
        # named by the publisher's id maker: a seeded simulation repeats them
        ids = [f"{m.instance.reservation_id}.move-{publisher.new_id()}" for m in plan.moves]
        positions = publisher.publish(
            [move_claim(m, rid, self.lease_ms, now) for m, rid in zip(plan.moves, ids, strict=True)]
        )
        claims = [
            MoveClaim(move, rid, partition, offset)
            for move, rid, (partition, offset) in zip(plan.moves, ids, positions, strict=True)
        ]
        for c in claims:
            self.awaited[c.partition] = max(self.awaited.get(c.partition, 0), c.offset + 1)
        topic = publisher.topics.moves
        partitions = publisher.log.partition_count(topic)
        publisher.log.append(topic, [_proposal(c, now, partitions) for c in claims])
        return claims


def _proposal(claim: MoveClaim, ts_ms: int, partitions: int) -> Append:
    move = claim.move
    key = move.instance.consumer_id.encode()
    proposed = MoveProposed(
        ts_ms=ts_ms,
        reservation_id=move.instance.reservation_id,
        consumer_id=move.instance.consumer_id,
        project_id=move.instance.project_id,
        source=move.source,
        destination=move.destination,
        resources=dict(move.instance.resources),
        why=move.why,
        claim_id=claim.reservation_id,
        claim_partition=claim.partition,
        claim_offset=claim.offset,
        fit=move.fit,
    )
    return Append(partition_for(key, partitions), key, proposed.model_dump_json().encode())
