"""Batch placement: plan every instance of a batch, then hold them together.

The plan runs on one snapshot with virtual consumption, so each instance sees
what the earlier ones took. Its claims go to the coordinator as one
transaction; a rejection (a stale view, a lost race, a wound from an older
batch) re-plans with the refusing providers excluded, up to ``max_attempts``.
The batch's arrival time is its transaction priority on every attempt, so the
older of two conflicting batches wins and they cannot livelock.

``queue`` batches that do not fit wait here, by priority then arrival, and
are tried again, head first, when the scheduler looks at its queue, if
something that could change the answer happened since the head last found
no room (see :class:`_NoRoom`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from consumers.coordinator import Coordinator, Part, Txn, TxnResult, Vote
from consumers.policies import Policy
from consumers.scheduler import OutcomeFollower, Versioned, engine_request
from consumers.server_groups import GroupRule, RuleSource, group_refusal
from ledger.partitioner import partition_for
from scheduling.engine import Engine, Placement, demand_row
from scheduling.fit import claim_fit, fits_topology
from scheduling.model import IntArray, Request, Snapshot
from schemas.events import ClaimItem, ClaimSpec, IdentifierItem
from schemas.outcomes import Code
from schemas.requests import BatchRequest, PlacementRequest
from schemas.topology import TopologyFit

log = logging.getLogger(__name__)

_NOT_THE_PROVIDER = frozenset({Code.BATCH_MEMBER_REJECTED, Code.WOUNDED})
"""Refusals that say nothing against the provider itself."""


@dataclass(frozen=True, slots=True)
class Instance:
    """One placed instance of a batch member."""

    member: int
    index: int
    provider_id: str
    reservation_ids: tuple[str, ...]
    identifiers: tuple[tuple[str, str], ...] = ()
    keys: tuple[str, ...] = ()
    """A partition key of each reservation (its provider or pool), to address
    consumes and releases to it."""


@dataclass(slots=True)
class BatchResult:
    """The scheduler's answer to a batch: committed, failed, or queued."""

    batch_id: str
    status: str
    instances: tuple[Instance, ...] = ()
    attempts: int = 0
    reason: str = ""
    no_votes: tuple[str, ...] = ()
    """Which partition refused which member, and why."""
    unplaced: dict[str, list[str]] = field(default_factory=dict)
    """Member -> the engine's explanation of why it could not be placed."""
    waiting: dict[str, int] = field(default_factory=dict)
    """For a queued batch: resource shape -> instances waiting (the queue
    depth projection counts these)."""
    priority: int = 0
    offsets: dict[int, int] = field(default_factory=dict)
    """How far into each partition the view its last plan ranked on had
    applied the log (with a versioned snapshot source), for ``explain``."""
    policy: str = ""
    """The policy that placed a lone request (``name@version``); a batch of
    several is placed by the default."""

    @property
    def placed(self) -> bool:
        return self.status == "committed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.batch_id,
            "batch": True,
            "status": self.status,
            "placed": self.placed,
            "reservations": [
                [rid, i.provider_id] for i in self.instances for rid in i.reservation_ids[:1]
            ],
            "instances": [
                {
                    "member": i.member,
                    "index": i.index,
                    "provider_id": i.provider_id,
                    "reservation_ids": list(i.reservation_ids),
                    "identifiers": [list(pair) for pair in i.identifiers],
                    "keys": list(i.keys),
                }
                for i in self.instances
            ],
            "attempts": self.attempts,
            "reason": self.reason,
            "trace": [],
            "no_votes": list(self.no_votes),
            "unplaced": self.unplaced,
            **({"waiting": self.waiting, "priority": self.priority} if self.waiting else {}),
            **({"offsets": {str(p): o for p, o in self.offsets.items()}} if self.offsets else {}),
            **({"policy": self.policy} if self.policy else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchResult:
        return cls(
            batch_id=data["request_id"],
            status=data["status"],
            instances=tuple(
                Instance(
                    i["member"],
                    i["index"],
                    i["provider_id"],
                    tuple(i["reservation_ids"]),
                    tuple((p, v) for p, v in i["identifiers"]),
                    tuple(i.get("keys", ())),
                )
                for i in data["instances"]
            ),
            attempts=data["attempts"],
            reason=data["reason"],
            no_votes=tuple(data["no_votes"]),
            unplaced=data["unplaced"],
            waiting=data.get("waiting", {}),
            priority=data.get("priority", 0),
            offsets={int(p): o for p, o in data.get("offsets", {}).items()},
            policy=data.get("policy", ""),
        )


@dataclass(slots=True)
class _Planned:
    instances: list[tuple[int, int, str]]
    """(member, index, provider id) per instance placed."""
    unplaced: dict[int, Placement]
    groups: Mapping[str, GroupRule] = field(default_factory=dict)
    """The server groups the log created, as the plan saw them."""
    offsets: Mapping[int, int] | None = None
    """What the plan's snapshot reflected, when its source says."""
    alone: bool = False
    """A member whose hints only more room can satisfy found no room even
    on its own (before the other members' virtual consumption)."""
    fits: dict[tuple[int, int], TopologyFit] = field(default_factory=dict)
    """(member, index) -> the NUMA cells, CPUs, pages and devices its claim takes."""


@dataclass(frozen=True, slots=True)
class _NoRoom:
    """A queued batch that found no room, on its first attempt (nothing
    excluded), on the snapshot that reflected ``offsets``, with ``engine``.

    The engine is a function of the snapshot: the same batch on a snapshot
    that differs only by records deciding nothing fails again. With
    ``alone``, a member that fits nowhere by itself fails again also on one
    that differs only by room taken (claims, prepares, consumes, renewals):
    only a record that may make room (a release, an expiry, an abort, an
    inventory, provider, aggregate or pool change) can change the answer.
    Otherwise the members' picks may fall differently once room is taken
    elsewhere, so any change can. So the head is tried again only once the
    follower has seen such a record beyond ``offsets`` (it then stays
    eligible until a snapshot reflecting it was tried), or the engine
    changed (a new policy)."""

    offsets: Mapping[int, int]
    engine: Engine
    alone: bool

    def worth_trying(self, engine: Engine, follower: OutcomeFollower) -> bool:
        if engine is not self.engine:
            return True
        follower.poll()
        marks = follower.made_room if self.alone else follower.changed
        return any(mark > self.offsets.get(p, 0) for p, mark in marks.items())


@dataclass(slots=True)
class _Board:
    """A snapshot planned on, with the usage of what was planned on it so far."""

    snapshot: Snapshot
    used: IntArray
    working: Snapshot
    offsets: dict[int, int] | None
    """What the snapshot reflected, when its source says."""
    fits: dict[str, list[TopologyFit]] = field(default_factory=dict)
    """Provider id -> the fits planned on it so far."""


@dataclass(slots=True)
class _Alone:
    """A one-member batch placed among others (``place_alone``): its tries."""

    batch: BatchRequest
    tried: dict[int, set[str]]
    attempts: int = 0
    votes: tuple[Vote, ...] = ()
    reason: str = ""
    plan: _Planned = field(default_factory=lambda: _Planned([], {}))
    """The last attempt's plan, and its instances' reservation ids."""
    rids: dict[tuple[int, int], list[tuple[str, str]]] = field(default_factory=dict)
    policy: Policy | None = None
    """The policy that places it (None: the default)."""


class BatchScheduler:
    def __init__(
        self,
        coordinator: Coordinator,
        engine: Engine,
        snapshot: Callable[[], Snapshot],
        partitions: int,
        pump: Callable[[], object] = lambda: None,
        clock_ms: Callable[[], int] | None = None,
        max_attempts: int = 3,
        generation: str = "",
        groups: RuleSource | None = None,
    ) -> None:
        """``groups``: the server groups' rules; a member of one claims its
        membership in the group's partition in the same transaction as its
        compute, so the group's writer checks the policy."""
        self.groups = groups
        self.coordinator = coordinator
        self.engine = engine
        self.snapshot = snapshot
        self._versioned = snapshot if isinstance(snapshot, Versioned) else None
        self.partitions = partitions
        self.pump = pump
        self.clock_ms = clock_ms or coordinator.publisher.clock_ms
        self.max_attempts = max_attempts
        self.generation = generation
        self.queue: list[tuple[int, int, BatchRequest]] = []
        """(-priority, arrival, batch), kept sorted: the head is tried first."""
        self._arrivals = 0
        self._tried: dict[str, int] = {}
        """Queued batch id -> the attempts made so far: a queued batch tried
        again numbers its transactions on, never reusing a reservation id
        (a writer would take a reused one for a duplicate, and the view
        refuses it in another partition)."""
        self._no_room: dict[str, _NoRoom] = {}
        """Queued batch id -> where it last found no room, if it knows."""
        # asked once: isinstance on a runtime-checkable Protocol costs microseconds
        self._versioned = snapshot if isinstance(snapshot, Versioned) else None

    # --- the public face ----------------------------------------------------

    def place(self, batch: BatchRequest) -> BatchResult:
        """Place a batch now; a ``queue`` batch that does not fit is queued
        (one whose server group hint names nothing is refused, never queued)."""
        refused = self._group_refusal(batch)
        if refused:
            return BatchResult(batch.batch_id, "failed", reason=refused)
        result = self._attempt(batch)
        if result.status != "failed" or batch.mode != "queue" or self._expired(batch):
            self._no_room.pop(batch.batch_id, None)
        else:
            self._tried[batch.batch_id] = self._tried.get(batch.batch_id, 0) + result.attempts
            self.enqueue(batch)
            result.status = "queued"
            result.priority = batch.priority
            for member in batch.members:
                shape = shape_key(member.resources)
                result.waiting[shape] = result.waiting.get(shape, 0) + member.num_instances
        return result

    def place_alone(
        self, batches: Sequence[BatchRequest], policies: Sequence[Policy | None] = ()
    ) -> list[BatchResult]:
        """Place independent one-member batches (the scheduler worker's
        requests that join a server group or take identifiers) side by side,
        each held or refused on its own, as :meth:`place` would: in rounds,
        each round planned on one snapshot (each plan counting the ones
        before it) and its transactions run together by the coordinator,
        so a round costs the log round trips of one transaction. A round
        takes one request per server group (the next waits for the round
        after, to plan on where its group's members went); a request refused
        by a writer is planned again in the next round, without the
        providers that refused it, up to ``max_attempts``. A queued batch,
        or one of several members, is placed by :meth:`place`. ``policies``:
        the policy that places each lone request (None: the default)."""
        results: dict[str, BatchResult] = {}
        waiting: list[_Alone] = []
        chosen = list(policies) or [None] * len(batches)
        for batch, policy in zip(batches, chosen, strict=True):
            if batch.mode == "queue" or len(batch.members) != 1:
                results[batch.batch_id] = self.place(batch)
            else:
                waiting.append(_Alone(batch, {0: set()}, policy=policy))
        while waiting:
            waiting = self._round(waiting, results)
        for batch, policy in zip(batches, chosen, strict=True):
            if policy is not None:
                results[batch.batch_id].policy = policy.label
        return [results[b.batch_id] for b in batches]

    def _round(self, waiting: list[_Alone], results: dict[str, BatchResult]) -> list[_Alone]:
        """Plan and hold one round; those left for the next, in their order."""
        grouped = any(a.batch.members[0].group_id is not None for a in waiting)
        rules = self._rules() if grouped else {}
        board = self._board()
        busy: set[str] = set()
        later: list[_Alone] = []
        trying: list[tuple[_Alone, Txn]] = []
        for alone in waiting:
            batch = alone.batch
            gid = batch.members[0].group_id
            refused = self._group_refusal(batch, rules)
            if refused:
                results[batch.batch_id] = BatchResult(
                    batch.batch_id, "failed", attempts=alone.attempts + 1, reason=refused
                )
            elif gid is not None and gid in busy:
                later.append(alone)  # after this round's member of its group
            else:
                txn = self._planned_txn(alone, rules, board)
                if txn is None:
                    results[batch.batch_id] = self._unplaceable(
                        batch, alone.plan, alone.attempts, alone.votes
                    )
                    continue
                if gid is not None:
                    busy.add(gid)
                trying.append((alone, txn))
        held = self.coordinator.execute_many([txn for _, txn in trying])
        for (alone, _), result in zip(trying, held, strict=True):
            done = self._held(alone, result)
            if done is None:
                later.append(alone)
            else:
                results[alone.batch.batch_id] = done
        order = {id(a): n for n, a in enumerate(waiting)}
        return sorted(later, key=lambda a: order[id(a)])

    def _planned_txn(
        self, alone: _Alone, rules: Mapping[str, GroupRule], board: _Board
    ) -> Txn | None:
        """Plan ``alone``'s next attempt on ``board``: its transaction, or
        None when too few instances can be placed."""
        batch = alone.batch
        low, high = batch.bounds
        engine = None if alone.policy is None else alone.policy.engine
        alone.plan = self._plan(batch, alone.tried, high, rules, board, engine)
        alone.attempts += 1
        if len(alone.plan.instances) < low:
            return None
        tid = f"{batch.batch_id}.{alone.attempts}{self.generation}"
        parts, alone.rids = self._parts(batch, alone.plan, tid)
        atomic = batch.mode != "at_least"
        needed = sum(map(len, alone.rids.values())) if atomic else low
        return Txn(tid, batch.ts_ms, tuple(parts), needed, atomic, batch.prepare_timeout_ms)

    def _held(self, alone: _Alone, result: TxnResult) -> BatchResult | None:
        """``alone``'s answer once its transaction ran; None to try again."""
        batch, plan = alone.batch, alone.plan
        done = self._settle(batch, plan, alone.rids, result, batch.bounds[0])
        if done is not None:
            done.attempts = alone.attempts
            done.offsets = dict(plan.offsets or {})
            return done
        alone.votes, alone.reason = result.no_votes, result.reason
        _exclude(alone.tried, result.no_votes)
        limit = self.max_attempts if alone.policy is None else alone.policy.config.max_attempts
        if alone.attempts < limit:
            return None
        return BatchResult(
            batch.batch_id,
            "failed",
            attempts=alone.attempts,
            reason=f"not held after {alone.attempts} attempts; last: {alone.reason}",
            no_votes=tuple(str(v) for v in alone.votes),
            offsets=dict(plan.offsets or {}),
        )

    def enqueue(self, batch: BatchRequest) -> None:
        self._arrivals += 1
        self.queue.append((-batch.priority, self._arrivals, batch))
        self.queue.sort(key=lambda entry: entry[:2])

    def drain_queue(self) -> list[BatchResult]:
        """Try the queued batches in order, stopping at the first that still
        does not fit (so a later batch never overtakes an earlier one); expire
        those past their deadline. The finished ones' results."""
        finished = []
        if self.queue:
            # the writers decide what is appended first: the gate below reads
            # their decisions, and a release not yet decided would hold the head
            self.pump()
        while self.queue:
            _, _, batch = self.queue[0]
            bid = batch.batch_id
            refused = self._group_refusal(batch)  # its group deleted while it waited
            if self._expired(batch) or refused:
                self._dequeue(bid)
                finished.append(
                    BatchResult(bid, "failed", reason=refused or "queue deadline passed")
                )
                continue
            no_room = self._no_room.get(bid)
            if no_room is not None and not no_room.worth_trying(
                self.engine, self.coordinator.follower
            ):
                break  # nothing happened that could make room for it
            result = self._attempt(batch)
            if result.status != "committed":
                self._tried[bid] = self._tried.get(bid, 0) + result.attempts
                break
            self._dequeue(bid)
            finished.append(result)
        return finished

    def _dequeue(self, batch_id: str) -> None:
        self.queue.pop(0)
        self._tried.pop(batch_id, None)
        self._no_room.pop(batch_id, None)

    def queued(self) -> list[BatchRequest]:
        return [batch for _, _, batch in self.queue]

    # --- one placement ------------------------------------------------------

    def _expired(self, batch: BatchRequest) -> bool:
        return self.clock_ms() > batch.ts_ms + batch.queue_timeout_ms

    def _attempt(self, batch: BatchRequest) -> BatchResult:
        low, high = batch.bounds
        tried: dict[int, set[str]] = {m: set() for m in range(len(batch.members))}
        votes: tuple[Vote, ...] = ()
        reason = ""
        before = self._tried.get(batch.batch_id, 0)
        self._no_room.pop(batch.batch_id, None)
        for attempt in range(1, self.max_attempts + 1):
            # the rules the plan follows: a group deleted since the last
            # attempt refuses the batch rather than leaving its members outside it
            grouped = any(m.group_id is not None for m in batch.members)
            rules = self._rules() if grouped else {}
            refused = self._group_refusal(batch, rules)
            if refused:
                return BatchResult(batch.batch_id, "failed", attempts=attempt, reason=refused)
            planned = self._plan(batch, tried, high, rules)
            if len(planned.instances) < low:
                if attempt == 1 and batch.mode == "queue" and planned.offsets is not None:
                    no_room = _NoRoom(planned.offsets, self.engine, planned.alone)
                    self._no_room[batch.batch_id] = no_room
                return self._unplaceable(batch, planned, attempt, votes)
            txn = f"{batch.batch_id}.{before + attempt}{self.generation}"
            parts, rids = self._parts(batch, planned, txn)
            needed = sum(map(len, rids.values())) if batch.mode != "at_least" else low
            result = self.coordinator.execute(
                txn,
                batch.ts_ms,
                parts,
                needed=needed,
                atomic=batch.mode != "at_least",
                prepare_timeout_ms=batch.prepare_timeout_ms,
            )
            votes = result.no_votes
            done = self._settle(batch, planned, rids, result, low)
            if done is not None:
                done.attempts = attempt
                done.offsets = dict(planned.offsets or {})
                return done
            reason = result.reason
            _exclude(tried, votes)
        return BatchResult(
            batch.batch_id,
            "failed",
            attempts=self.max_attempts,
            reason=f"not held after {self.max_attempts} attempts; last: {reason}",
            no_votes=tuple(str(v) for v in votes),
            offsets=dict(planned.offsets or {}),
        )

    def _rules(self) -> Mapping[str, GroupRule]:
        return self.groups() if self.groups is not None else {}

    def _group_refusal(
        self, batch: BatchRequest, rules: Mapping[str, GroupRule] | None = None
    ) -> str:
        """Why a member's server group hint cannot be placed ("": none does)."""
        if not any(m.group_id is not None for m in batch.members):
            return ""
        if rules is None:
            rules = self._rules()
        for m, member in enumerate(batch.members):
            if member.group_id is not None:
                refused = group_refusal(member, rules.get(member.group_id))
                if refused:
                    return f"{_label(batch, m)}: {refused}"
        return ""

    def _board(self) -> _Board:
        """A fresh snapshot of the view (the writers caught up first) to plan on."""
        self.pump()
        snapshot = self.snapshot()
        used = snapshot.used.copy()
        offsets = None if self._versioned is None else dict(self._versioned.offsets())
        return _Board(snapshot, used, snapshot.with_used(used, ()), offsets)

    def _plan(
        self,
        batch: BatchRequest,
        tried: dict[int, set[str]],
        most: int,
        rules: Mapping[str, GroupRule],
        board: _Board | None = None,
        engine: Engine | None = None,
    ) -> _Planned:
        """Plan ``batch`` on ``board`` (a fresh one by default), whose usage
        then counts what the plan placed, with ``engine`` (by default the
        default policy's)."""
        engine = engine or self.engine
        if board is None:
            board = self._board()
        snapshot, used, working = board.snapshot, board.used, board.working
        rows = snapshot.row_of
        planned = _Planned([], {}, rules, board.offsets)
        explain = batch.explain
        for m, member in enumerate(batch.members):
            room = most - len(planned.instances)
            wanted = min(member.num_instances, room)
            if wanted <= 0:
                break
            group = planned.groups.get(member.group_id) if member.group_id else None
            request = engine_request(member, wanted, frozenset(tried[m]), group)
            placement = engine.place(working, request, explain=explain or member.explain)
            if not placement.placed:
                planned.unplaced[m] = placement
                if batch.mode == "queue" and not planned.alone and _only_room_helps(member):
                    # on the snapshot itself, without the members before it
                    planned.alone = not planned.instances or not (
                        engine.place(snapshot, request).placed
                    )
                if batch.mode != "at_least" or not placement.providers:
                    continue  # all or nothing: plan the rest only to explain them
            demand = demand_row(snapshot, member.resources)
            fitting = fits_topology(engine)
            for i, pid in enumerate(placement.providers):
                if fitting:
                    fit = self._fit(board, rows[pid], request, pid, engine)
                    if fit is not None:
                        planned.fits[(m, i)] = fit
                planned.instances.append((m, i, pid))
                used[rows[pid]] += demand
            # changed in place: the twin says where, for the engine's index
            working = working.with_used(used, [rows[pid] for pid in placement.providers])
        board.working = working
        return planned

    def _fit(
        self, board: _Board, row: int, request: Request, pid: str, engine: Engine
    ) -> TopologyFit | None:
        """What the instance takes of the provider's cells and devices, on
        top of what the board's earlier plans took there; if that leaves too
        little, the fit on the snapshot alone, for the writer to judge (a
        claim it refuses is retried elsewhere)."""
        found = claim_fit(engine, board.snapshot, row, request, board.fits.get(pid, ()))
        if isinstance(found, str):
            found = claim_fit(engine, board.snapshot, row, request)
        if isinstance(found, str):  # the filters passed it on this snapshot
            raise AssertionError(f"{pid}: {found}")
        if found is not None:
            board.fits.setdefault(pid, []).append(found)
        return found

    def _parts(
        self, batch: BatchRequest, planned: _Planned, txn: str
    ) -> tuple[list[Part], dict[tuple[int, int], list[tuple[str, str]]]]:
        """The claims of every planned instance, one set per partition; and each
        instance's reservation ids, with a key of each one's partition."""
        by_partition: dict[int, tuple[str, list[ClaimSpec]]] = {}
        rids: dict[tuple[int, int], list[tuple[str, str]]] = {}
        for m, i, pid in planned.instances:
            member = batch.members[m]
            consumer = f"{batch.batch_id}.{m}.{i}"
            home = partition_for(pid.encode(), self.partitions)
            elsewhere: dict[int, list[IdentifierItem]] = {}
            local: list[IdentifierItem] = []
            for item in member.identifiers:
                where = partition_for(item.pool_id.encode(), self.partitions)
                (local if where == home else elsewhere.setdefault(where, [])).append(item)
            group = planned.groups.get(member.group_id) if member.group_id else None
            joins = None if group is None else group.partition
            if joins is not None and joins != home:
                elsewhere.setdefault(joins, [])
            spec = _spec(
                member,
                f"{consumer}.{txn}",
                consumer,
                pid,
                tuple(local),
                group,
                home,
                fit=planned.fits.get((m, i)),
            )
            specs = [(home, pid, spec)]
            for where, items in sorted(elsewhere.items()):
                rid = f"{consumer}.{txn}.p{where}"
                key = items[0].pool_id if items else member.group_id or ""
                spec = _spec(member, rid, consumer, None, tuple(items), group, where, pid)
                specs.append((where, key, spec))
            for where, key, spec in specs:
                by_partition.setdefault(where, (key, []))[1].append(spec)
                rids.setdefault((m, i), []).append((spec.reservation_id, key))
        parts = [
            Part(partition, key, tuple(specs))
            for partition, (key, specs) in sorted(by_partition.items())
        ]
        return parts, rids

    def _settle(
        self,
        batch: BatchRequest,
        planned: _Planned,
        rids: dict[tuple[int, int], list[tuple[str, str]]],
        result: TxnResult,
        low: int,
    ) -> BatchResult | None:
        """The batch's result if this attempt decided it; None to try again."""
        held = set(result.committed)
        instances = []
        partial: list[tuple[str, str]] = []
        for m, i, pid in planned.instances:
            mine = rids[(m, i)]
            if all(rid in held for rid, _ in mine):
                given = tuple(pair for rid, _ in mine for pair in result.identifiers.get(rid, ()))
                ids, keys = zip(*mine, strict=True)
                instances.append(Instance(m, i, pid, ids, given, keys))
            else:
                partial.extend((rid, key) for rid, key in mine if rid in held)
        if partial:  # at_least: an instance that got only part of its claims holds nothing
            self._release(partial)
        enough = result.ok and len(instances) >= low
        if result.ok and not enough:  # at_least, and too few whole instances
            self._release(
                [
                    pair
                    for inst in instances
                    for pair in zip(inst.reservation_ids, inst.keys, strict=True)
                ]
            )
        if not enough:
            return None
        log.info("batch %s committed: %d instances", batch.batch_id, len(instances))
        return BatchResult(batch.batch_id, "committed", tuple(instances))

    def _release(self, held: list[tuple[str, str]]) -> None:
        """Give back (reservation id, partition key) pairs, one append per key."""
        by_key: dict[str, list[str]] = {}
        for rid, key in held:
            by_key.setdefault(key, []).append(rid)
        for key, mine in by_key.items():
            self.coordinator.release(key, mine)

    def _unplaceable(
        self, batch: BatchRequest, planned: _Planned, attempt: int, votes: tuple[Vote, ...]
    ) -> BatchResult:
        low, _ = batch.bounds
        unplaced = {
            _label(batch, m): (p.trace.lines() if p.trace else [p.reason])
            for m, p in planned.unplaced.items()
        }
        reasons = "; ".join(f"{label}: {lines[0]}" for label, lines in unplaced.items())
        got = len(planned.instances)
        return BatchResult(
            batch.batch_id,
            "failed",
            attempts=attempt,
            reason=f"{got} of {low} needed instances can be placed; {reasons}",
            no_votes=tuple(str(v) for v in votes),
            unplaced=unplaced,
            offsets=dict(planned.offsets or {}),
        )


def _exclude(tried: dict[int, set[str]], votes: Sequence[Vote]) -> None:
    """Keep every member off the providers that refused it for a reason of
    their own (not a wound, nor a fellow member's refusal)."""
    for vote in votes:
        if not _NOT_THE_PROVIDER & {r.code for r in vote.reasons}:
            for r in vote.reasons:
                if r.provider_id is not None:
                    for m in tried:
                        tried[m].add(r.provider_id)


def shape_key(resources: dict[str, int]) -> str:
    """A resource shape as text, the same for the same amounts in any order:
    ``DISK_GB=20,MEMORY_MB=4096,VCPU=2``."""
    return ",".join(f"{rc}={amount}" for rc, amount in sorted(resources.items()))


def parse_shape(text: str) -> dict[str, int]:
    """``VCPU=4,MEMORY_MB=8192`` as amounts by class, the inverse of
    :func:`shape_key` (:class:`ValueError` for anything else)."""
    pairs = [pair.split("=", 1) for pair in text.split(",")]
    if not all(len(pair) == 2 for pair in pairs):
        raise ValueError(f"resources are CLASS=AMOUNT,...: not {text!r}")
    try:
        return {rc.strip(): int(amount) for rc, amount in pairs}
    except ValueError:
        raise ValueError(f"resources are CLASS=AMOUNT,...: not {text!r}") from None


def _only_room_helps(member: PlacementRequest) -> bool:
    """Whether only more room can let the engine place ``member``: none of
    its hints reads where other instances are (same host, a server group,
    required tags) or compares usage freely (a JSON query, capabilities in
    extra specs), so taking room anywhere never makes a provider pass."""
    return not (
        member.same_host
        or member.group_id is not None
        or member.require_with_tags
        or member.query is not None
        or member.extra_specs
    )


def _label(batch: BatchRequest, member: int) -> str:
    return f"member {member} ({batch.members[member].request_id})"


def _spec(
    member: PlacementRequest,
    rid: str,
    consumer: str,
    provider_id: str | None,
    identifiers: tuple[IdentifierItem, ...],
    server_group: GroupRule | None = None,
    partition: int = -1,
    host: str | None = None,
    fit: TopologyFit | None = None,
) -> ClaimSpec:
    """One claim of an instance in ``partition``: its compute on
    ``provider_id`` (None: identifiers or membership only), and its server
    group's membership on ``host`` if the group lives in that partition."""
    # an ad-hoc anti-affinity group (none was created): the compute's partition's rule
    group = member.group_id if member.group_policy == "anti-affinity" else None
    if server_group is not None:
        group = None
    joins = server_group is not None and server_group.partition == partition
    return ClaimSpec(
        reservation_id=rid,
        consumer_id=consumer,
        project_id=member.project_id,
        items=()
        if provider_id is None
        else (
            ClaimItem(
                provider_id=provider_id,
                resources=dict(member.resources),
                fit=fit,
                guest=None if fit is None else member.guest_asks(),
            ),
        ),
        identifiers=identifiers,
        lease_ms=member.lease_ms,
        anti_affinity_group=group if provider_id is not None else None,
        tags=member.tags if provider_id is not None else frozenset(),
        require_with_tags=member.require_with_tags if provider_id is not None else frozenset(),
        require_without_tags=member.require_without_tags
        if provider_id is not None
        else frozenset(),
        server_group=member.group_id if joins else None,
        group_host=(provider_id or host) if joins else None,
    )
