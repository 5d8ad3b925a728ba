"""The transaction coordinator: two-phase commit over partitions, from the log.

A transaction's claims are grouped into one claim set per partition. Claims
in one partition need no second phase: the set is decided in one record. Over
several partitions, the coordinator

1. records ``begun`` (its participants and deadline) on the transactions topic,
2. appends the sets as pending holds, each with the transaction's deadline and
   priority, and collects the votes from the outcomes topic,
3. records ``decided`` (commit only if enough voted yes and the deadline is
   still ahead), then appends the decision to every partition that holds
   something, and collects the acknowledgements,
4. records ``finished``. A commit that lost a member in between (its hold
   expired or an older transaction wounded it) is compensated: the members it
   committed are released and the transaction is reported aborted, so no batch
   is ever reported, or left, half placed.

A coordinator that dies leaves pending holds that expire at the deadline
(presumed abort). Another coordinator ``recover``\\ s from the transactions
topic: it decides abort for what was never decided, and re-sends and checks
what was. Only for a coordinator that is gone: each ``begun`` record names
the request partitions its coordinator's scheduler answered (its
``scope``), and a coordinator recovers what was begun in a scope that
shares a request partition with its own. Request partitions are owned by
one scheduler at a time and a scheduler's scope never changes, so whoever
began those is gone; a live peer answering other request partitions keeps
its transactions in flight (a coordinator without a scope, answering them
all, recovers everything, as does any coordinator a record without one).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from consumers.scheduler import OutcomeFollower
from ledger.log import Append, Log
from ledger.partitioner import partition_for
from ledger.publisher import Publisher
from ledger.topics import Topics
from schemas.events import ClaimSet, ClaimSpec, Release, TransactionDecision, TransactionRef
from schemas.outcomes import Kind, Outcome, Reason

log = logging.getLogger(__name__)

_VOTES = frozenset({Kind.PREPARED, Kind.ACCEPTED, Kind.REJECTED})
_AFTER_VOTE = frozenset({Kind.COMMITTED, Kind.ABORTED, Kind.EXPIRED, Kind.RELEASED})


@dataclass(frozen=True, slots=True)
class Part:
    """A transaction's claims in one partition, and a key that routes there."""

    partition: int
    key: str
    claims: tuple[ClaimSpec, ...]


@dataclass(frozen=True, slots=True)
class Vote:
    """A member the writers refused, and why."""

    partition: int
    reservation_id: str
    reasons: tuple[Reason, ...]

    def __str__(self) -> str:
        return f"partition {self.partition} voted no on {self.reservation_id}: " + "; ".join(
            str(r) for r in self.reasons
        )


@dataclass(slots=True)
class TxnResult:
    transaction_id: str
    committed: tuple[str, ...]
    """Reservation ids now held (accepted, or prepared and committed)."""
    no_votes: tuple[Vote, ...] = ()
    reason: str = ""
    identifiers: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """Reservation id -> the (pool, identifier) pairs it was given."""

    @property
    def ok(self) -> bool:
        return not self.reason


@dataclass(frozen=True, slots=True)
class Txn:
    """One transaction for :meth:`Coordinator.execute_many`."""

    transaction_id: str
    priority: int
    parts: tuple[Part, ...]
    needed: int
    atomic: bool = True
    prepare_timeout_ms: int = 30_000

    def ref(self, now_ms: int) -> TransactionRef:
        return TransactionRef(
            transaction_id=self.transaction_id,
            priority=self.priority,
            deadline_ms=now_ms + self.prepare_timeout_ms,
        )


@dataclass(frozen=True, slots=True)
class _Decision:
    """A transaction over several partitions, its votes in: commit or abort."""

    ref: TransactionRef
    parts: tuple[Part, ...]
    prepared: list[str]
    commit: bool
    needed: int
    atomic: bool

    def events(self, now_ms: int) -> list[TransactionDecision]:
        """The decision, to every partition that holds something of it."""
        tid = self.ref.transaction_id
        holding = set(self.prepared)
        return [
            TransactionDecision(
                event_id=f"{'commit' if self.commit else 'abort'}-{tid}-{p.partition}",
                ts_ms=now_ms,
                partition_key=p.key,
                transaction_id=tid,
                commit=self.commit,
            )
            for p in self.parts
            if any(c.reservation_id in holding for c in p.claims)
        ]


class Coordinator:
    def __init__(
        self,
        publisher: Publisher,
        log_: Log,
        topics: Topics,
        follower: OutcomeFollower,
        pump: Callable[[], object] = lambda: None,
        decision_timeout_s: float = 30.0,
        poll_interval_s: float = 0.002,
        scope: Sequence[int] | None = None,
    ) -> None:
        self.scope = scope
        """The request partitions this coordinator's scheduler answers (None:
        all of them); see :meth:`recover`."""
        self.publisher = publisher
        self.log = log_
        self.topics = topics
        self.follower = follower
        self.pump = pump
        self.decision_timeout_s = decision_timeout_s
        self.poll_interval_s = poll_interval_s

    def execute(
        self,
        transaction_id: str,
        priority: int,
        parts: Sequence[Part],
        needed: int,
        atomic: bool = True,
        prepare_timeout_ms: int = 30_000,
    ) -> TxnResult:
        """Hold ``parts`` all together (``atomic``) or at least ``needed`` of
        their claims; a failure holds nothing."""
        txn = Txn(transaction_id, priority, tuple(parts), needed, atomic, prepare_timeout_ms)
        return self.execute_many([txn])[0]

    def execute_many(self, txns: Sequence[Txn]) -> list[TxnResult]:
        """Run independent transactions side by side, each decided on its own
        (one's refusal is none of the others'), their steps in lockstep: the
        begun records in one append, every claim set in one publish, one
        wait for all the votes, and so on. A round of N transactions costs
        the log round trips of one, not N times them. Their records on the
        transactions topic share the first one's key (so a partition), each
        transaction's steps in order there."""
        if not txns:
            return []
        key = txns[0].transaction_id
        rids = [c.reservation_id for t in txns for p in t.parts for c in p.claims]
        self.follower.follow(rids)
        try:
            now = self.publisher.clock_ms()
            several = [t for t in txns if len(t.parts) > 1]
            refs = {t.transaction_id: t.ref(now) for t in several}
            self._record_many(
                key,
                [
                    (
                        "begun",
                        t.transaction_id,
                        {
                            "ref": refs[t.transaction_id].model_dump(),
                            "parts": [_part_json(p) for p in t.parts],
                            "outcomes_from": list(self.follower.offsets),
                            "needed": t.needed,
                            "atomic": t.atomic,
                            "key": key,
                            "scope": None if self.scope is None else sorted(self.scope),
                        },
                    )
                    for t in several
                ],
            )
            self.publisher.publish(
                [_claim_set(t, p, now, refs.get(t.transaction_id)) for t in txns for p in t.parts]
            )
            self._await(rids, _VOTES)
            results: dict[str, TxnResult] = {}
            for t in txns:
                if len(t.parts) == 1:
                    results[t.transaction_id] = self._one_partition(t, now)
            decisions = []
            for t in several:
                ref = refs[t.transaction_id]
                t_rids = [c.reservation_id for p in t.parts for c in p.claims]
                prepared = self._prepared(t_rids)
                alive = [rid for rid in prepared if not _AFTER_VOTE & set(self._kinds(rid))]
                commit = (
                    len(alive) >= t.needed
                    and (not t.atomic or len(alive) == len(t_rids))
                    and self.publisher.clock_ms() < ref.deadline_ms
                )
                decisions.append(_Decision(ref, t.parts, prepared, commit, t.needed, t.atomic))
            if decisions:
                for result in self._decide(decisions, key):
                    results[result.transaction_id] = result
            return [results[t.transaction_id] for t in txns]
        finally:
            self.follower.forget(rids)

    def recover(self) -> list[TxnResult]:
        """Finish every transaction a coordinator that is gone began and did
        not finish: one whose scope shares a request partition with this
        one's (that coordinator's scheduler no longer answers it, so it was
        replaced), or either has none. A peer's, begun in a scope disjoint
        from this one's, may be in flight: it is left to that peer."""
        mine = None if self.scope is None else set(self.scope)
        begun: dict[str, dict[str, Any]] = {}
        decided: dict[str, bool] = {}
        for record in self._records():
            tid = record["transaction_id"]
            if record["step"] == "begun":
                begun[tid] = record
            elif record["step"] == "decided":
                decided[tid] = record["commit"]
            else:
                begun.pop(tid, None)
        results = []
        for tid, record in begun.items():
            theirs = record.get("scope")
            if mine is not None and theirs is not None and not mine.intersection(theirs):
                continue  # a live peer's, answering other request partitions
            ref = TransactionRef.model_validate(record["ref"], strict=False)
            parts = tuple(
                Part(
                    p["partition"],
                    p["key"],
                    tuple(ClaimSpec.model_validate(c, strict=False) for c in p["claims"]),
                )
                for p in record["parts"]
            )
            rids = [c.reservation_id for p in parts for c in p.claims]
            # the votes and acknowledgements so far, from where the log stood at begin
            scan = OutcomeFollower(self.log, self.topics.outcomes)
            scan.offsets = list(record["outcomes_from"])
            scan.follow(rids)
            scan.poll()
            self.follower.follow(rids)
            for rid in rids:
                self.follower.history[rid][:0] = scan.history[rid]
            prepared = self._prepared(rids)
            commit = decided.get(tid, False)  # never decided: presumed abort
            log.warning("recovering transaction %s: %s", tid, "commit" if commit else "abort")
            decision = _Decision(ref, parts, prepared, commit, record["needed"], record["atomic"])
            try:
                # its steps where its begun record is (the round's key, or its own id)
                results.extend(self._decide([decision], record.get("key", tid)))
            finally:
                self.follower.forget(rids)
        return results

    # --- the phases ---------------------------------------------------------

    def _one_partition(self, txn: Txn, now: int) -> TxnResult:
        """A transaction of one partition, its claim set decided (the votes
        are in): held, or given back when too few were accepted."""
        (part,) = txn.parts
        rids = [c.reservation_id for c in part.claims]
        accepted = tuple(rid for rid in rids if self._kinds(rid)[0] == Kind.ACCEPTED)
        no = self._no_votes(rids)
        tid = txn.transaction_id
        if len(accepted) >= txn.needed:
            return TxnResult(tid, accepted, no, identifiers=self._identifiers(accepted))
        self.release(part.key, accepted, now)
        return TxnResult(tid, (), no, _refused(no, len(accepted), txn.needed))

    def _decide(self, decisions: Sequence[_Decision], key: str) -> list[TxnResult]:
        """Record the decisions, send each to its partitions, collect the
        acknowledgements, compensate a commit that lost a member, and record
        the transactions finished: each step one append for them all."""
        self._record_many(
            key, [("decided", d.ref.transaction_id, {"commit": d.commit}) for d in decisions]
        )
        now = self.publisher.clock_ms()
        self.publisher.publish([event for d in decisions for event in d.events(now)])
        self._await([rid for d in decisions for rid in d.prepared], _AFTER_VOTE, after_vote=True)
        results = [self._settle(d, now) for d in decisions]
        self._record_many(
            key,
            [
                ("finished", r.transaction_id, {"committed": bool(r.committed), "reason": r.reason})
                for r in results
            ],
        )
        return results

    def _settle(self, d: _Decision, now: int) -> TxnResult:
        tid = d.ref.transaction_id
        rids = [c.reservation_id for p in d.parts for c in p.claims]
        no = self._no_votes(rids)
        committed = tuple(rid for rid in d.prepared if Kind.COMMITTED in self._kinds(rid))
        reason = ""
        if not d.commit:
            reason = _refused(no, len(d.prepared), d.needed) if no else "aborted"
            if not no and now >= d.ref.deadline_ms:
                reason = "aborted: the votes came after the prepare deadline"
        elif len(committed) < d.needed or (d.atomic and len(committed) != len(rids)):
            lost = sorted(set(d.prepared) - set(committed))
            reason = f"commit lost {len(lost)} members (expired or wounded first): {lost[:5]}"
            keys = {c.reservation_id: p.key for p in d.parts for c in p.claims}
            for rid in committed:
                self.release(keys[rid], (rid,), now)
        if reason:
            return TxnResult(tid, (), no, reason)
        return TxnResult(tid, committed, no, identifiers=self._identifiers(committed))

    # --- helpers ------------------------------------------------------------

    def _prepared(self, rids: Sequence[str]) -> list[str]:
        """The members whose vote was yes (they may have lost the hold since)."""
        return [rid for rid in rids if self._kinds(rid)[:1] == [Kind.PREPARED]]

    def _kinds(self, rid: str) -> list[str]:
        return [o.kind for o in self.follower.history.get(rid, ())]

    def _outcomes(self, rid: str) -> list[Outcome]:
        return self.follower.history.get(rid, [])

    def _no_votes(self, rids: Sequence[str]) -> tuple[Vote, ...]:
        votes = []
        for rid in rids:
            for o in self._outcomes(rid):
                if o.kind == Kind.REJECTED or (o.kind == Kind.ABORTED and o.reasons):
                    votes.append(Vote(o.partition, rid, o.reasons))
                    break
        return tuple(votes)

    def _identifiers(self, rids: Sequence[str]) -> dict[str, tuple[tuple[str, str], ...]]:
        given = {}
        for rid in rids:
            for o in self._outcomes(rid):
                if o.identifiers and o.kind in (Kind.ACCEPTED, Kind.PREPARED):
                    given[rid] = o.identifiers
        return given

    def _await(self, rids: Sequence[str], kinds: frozenset[str], after_vote: bool = False) -> None:
        self.follower.wait(
            lambda: all(self._has(rid, kinds, after_vote) for rid in rids),
            self.pump,
            self.decision_timeout_s,
            self.poll_interval_s,
            f"{len(rids)} transaction members",
        )

    def _has(self, rid: str, kinds: frozenset[str], after_vote: bool) -> bool:
        seen = self._kinds(rid)
        if after_vote:
            seen = seen[1:]  # the vote itself is the first outcome
        return any(kind in kinds for kind in seen)

    def release(self, key: str, rids: Sequence[str], now: int | None = None) -> None:
        """Give back reservations this coordinator holds (all in ``key``'s partition)."""
        now = self.publisher.clock_ms() if now is None else now
        if rids:
            self.publisher.publish(
                [
                    Release(
                        event_id=f"release-{rid}", ts_ms=now, partition_key=key, reservation_id=rid
                    )
                    for rid in rids
                ]
            )

    def _record_many(self, key: str, steps: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
        """Append (step, transaction id, details) records, keyed by ``key``,
        in one append."""
        if not steps:
            return
        topic = self.topics.transactions
        raw = key.encode()
        partition = partition_for(raw, self.log.partition_count(topic))
        self.log.append(
            topic,
            [
                Append(
                    partition,
                    raw,
                    json.dumps({"step": step, "transaction_id": tid, **details}).encode(),
                )
                for step, tid, details in steps
            ],
        )

    def _records(self) -> list[dict[str, Any]]:
        topic = self.topics.transactions
        records: list[dict[str, Any]] = []
        for partition in range(self.log.partition_count(topic)):
            offset = 0
            while batch := self.log.read(topic, partition, offset, 5000):
                offset = batch[-1].offset + 1
                records.extend(json.loads(r.value) for r in batch)
        return records


def _claim_set(txn: Txn, part: Part, now_ms: int, ref: TransactionRef | None) -> ClaimSet:
    """A transaction's claims in one partition: decided in one record when it
    is the only part (no ``ref``), else held pending the decision."""
    prefix = "prepare" if ref is not None else "claims"
    suffix = f"-{part.partition}" if ref is not None else ""
    return ClaimSet(
        event_id=f"{prefix}-{txn.transaction_id}{suffix}",
        ts_ms=now_ms,
        partition_key=part.key,
        claims=part.claims,
        atomic=txn.atomic,
        transaction=ref,
    )


def _part_json(part: Part) -> dict[str, Any]:
    claims = [c.model_dump(mode="json", exclude_defaults=True) for c in part.claims]
    return {"partition": part.partition, "key": part.key, "claims": claims}


def _refused(no: Sequence[Vote], got: int, needed: int) -> str:
    head = f"{got} of {needed} needed members could be held"
    if not no:
        return head
    return f"{head}; {no[0]}" + (f" (and {len(no) - 1} more)" if len(no) > 1 else "")
