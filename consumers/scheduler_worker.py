"""The long-running scheduler: consumes placement requests, publishes results.

Its progress lives in the log: every result names the request's partition
and offset, so a restarted worker reads the placements topic and resumes
after the last request it answered. A request it was working on when it
stopped is scheduled again under a new generation of reservation ids; the
holds the earlier run made are abandoned and expire at their lease.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from consumers.batches import BatchResult, BatchScheduler
from consumers.policies import Policy, PolicyError
from consumers.scheduler import Scheduled, Scheduler
from consumers.server_groups import GroupRule, group_refusal
from ledger.log import Append, Log, Record, Watches
from ledger.topics import Topics
from schemas.requests import BatchRequest, PlacementRequest

log = logging.getLogger(__name__)


class SchedulerWorker:
    """Answers the requests of the given partitions of the requests topic."""

    def __init__(
        self,
        log_: Log,
        topics: Topics,
        scheduler: Scheduler,
        partitions: list[int] | None = None,
        batch_size: int = 200,
        batches: BatchScheduler | None = None,
        refresh: Callable[[], object] | None = None,
    ) -> None:
        """``batches`` places batch requests and requests that take pool
        identifiers (they are transactions); without it they are refused.
        ``refresh`` brings the schedulers' snapshot up to date (a live one
        reads only what changed since): :meth:`idle` calls it."""
        self.log = log_
        self.topics = topics
        count = log_.partition_count(topics.requests)
        self.partitions = list(range(count)) if partitions is None else partitions
        self.batch_size = batch_size
        self.scheduler = scheduler
        self.batches = batches
        self.refresh = refresh
        self.on_answers: Callable[[list[dict[str, Any]]], object] | None = None
        """Told of every answer (as appended, without its ``source``) once
        the log holds it durably: an API in this process hands them to
        its waiting callers (:mod:`berth.api.handoff`)."""
        self.append_answers: Callable[[str, list[Append]], list[int]] | None = None
        """Appends the answers in place of the log's ``append`` (durably),
        returning their offsets: with the outcomes they report, which
        writers in this process hold for them, in one group commit."""
        self.before_idle: Callable[[], object] | None = None
        """Waited on before :meth:`idle` reads the view's changes: the API's
        replies to the answers just given, which then go out first."""
        self.queued_at: dict[str, tuple[int, int]] = {}
        """Queued batch id -> its request's (partition, offset)."""
        self.next_offsets = self._resume()
        self.scheduler.generation = _generation(log_, topics)
        if batches is not None:
            batches.generation = self.scheduler.generation
            # what it begins names these, and it recovers only what was begun
            # for them: a peer answering other partitions may be mid-transaction
            batches.coordinator.scope = self.partitions
            batches.coordinator.recover()
            self._requeue()

    def _resume(self) -> dict[int, int]:
        """Next request offset per partition, and where the answers given so
        far are, from the results already published."""
        self.answered: dict[str, int] = {}
        """Request (or batch) id -> where its final answer is on the
        placements topic (``_position``): what a resubmitted id is answered
        from, read back. Only the position is kept, not the answer with its
        ranked candidates, so memory grows by one small int an id rather
        than by an answer."""
        nexts = {p: 0 for p in self.partitions}
        for p in range(self.log.partition_count(self.topics.placements)):
            offset = 0
            while records := self.log.read(self.topics.placements, p, offset, 5000):
                offset = records[-1].offset + 1
                for record in records:
                    data = json.loads(record.value)
                    source = data.pop("source")
                    rid = data["request_id"]
                    if data.get("status") == "queued":
                        if source[0] in nexts:
                            self.queued_at[rid] = (source[0], source[1])
                    else:
                        self.queued_at.pop(rid, None)
                        # a resubmission's copy after it changes nothing
                        self.answered.setdefault(rid, _position(record.partition, record.offset))
                    if source[0] in nexts:
                        nexts[source[0]] = max(nexts[source[0]], source[1] + 1)
        return nexts

    def _requeue(self) -> None:
        """Queue again the batches that were waiting when the last worker stopped."""
        assert self.batches is not None
        for partition, offset in sorted(self.queued_at.values(), key=lambda s: s[1]):
            (record,) = self.log.read(self.topics.requests, partition, offset, 1)
            self.batches.enqueue(BatchRequest.model_validate_json(record.value))

    def _drain_queue(self) -> int:
        if self.batches is None or not self.batches.queue:
            return 0
        results = self.batches.drain_queue()
        for result in results:
            partition, offset = self.queued_at.pop(result.batch_id)
            self._publish([(partition, [(offset, result)])])
        return len(results)

    def tick(self) -> int:
        """The work no record announces: the queued batches tried again,
        and failed once past their deadline; how many were answered."""
        return self._drain_queue()

    def pending(self) -> bool:
        """Whether :meth:`tick` has work: batches queued."""
        return self.batches is not None and bool(self.batches.queue)

    def _publish(self, results: list[tuple[int, list[tuple[int, _Answer]]]]) -> None:
        """Append the answers to the requests of each partition (partition,
        [(offset, result)]), all in one append."""
        appends = []
        answers = []
        final: list[str | None] = []  # the id of each final answer, None for a queued one
        handed = self.on_answers is not None
        for partition, answered in results:
            for offset, result in answered:
                if isinstance(result, Scheduled):  # a ranking is worked out here, once
                    rid, value = result.request_id, result.encoded((partition, offset))
                    if handed:
                        answers.append(result.to_dict())
                    final.append(rid)
                else:
                    answer = result.to_dict()
                    rid = answer["request_id"]
                    value = json.dumps({**answer, "source": [partition, offset]}).encode()
                    answers.append(answer)
                    queued = isinstance(result, BatchResult) and result.status == "queued"
                    final.append(None if queued else rid)
                appends.append(Append(partition, rid.encode(), value))
        if not appends:
            return
        if self.append_answers is not None:
            offsets = self.append_answers(self.topics.placements, appends)
        else:
            offsets = self.log.append(self.topics.placements, appends)
        for done, append, offset in zip(final, appends, offsets, strict=True):
            if done is not None:  # the first answer stays the one a resubmission gets
                self.answered.setdefault(done, _position(append.partition, offset))
        if self.on_answers is not None:
            self.on_answers(answers)  # durable now

    def _batch(self, partition: int, offset: int, batch: BatchRequest) -> BatchResult:
        if self.batches is None:
            return BatchResult(batch.batch_id, "failed", reason="this worker places no batches")
        result = self.batches.place(batch)
        if result.status == "queued":
            self.queued_at[batch.batch_id] = (partition, offset)
        return result

    def _alone(
        self, batches: list[BatchRequest], policies: list[Policy | None]
    ) -> list[BatchResult]:
        if self.batches is None:
            return [
                BatchResult(b.batch_id, "failed", reason="this worker places no batches")
                for b in batches
            ]
        return self.batches.place_alone(batches, policies)

    def _rules(self) -> Mapping[str, GroupRule]:
        source = None if self.batches is None else self.batches.groups
        return {} if source is None else source()

    def idle(self) -> None:
        """Called when the work that came has been answered and nothing
        waits: read the view's changes now (``refresh``), so that the next
        request does not wait for them to be read (2 ms of a placement's
        round trip on 200 providers)."""
        if self.before_idle is not None:
            self.before_idle()
        if self.refresh is not None:
            self.refresh()

    def watches(self) -> Watches:
        """The next request of each partition this worker answers."""
        return {self.topics.requests: {p: self.next_offsets[p] for p in self.partitions}}

    def step(self) -> int:
        """Answer the next batch of requests of every partition; how many.
        Policy changes appended since the last step apply from this one.
        The requests that are transactions of one request (a server group's
        member, identifiers), of every partition, are held side by side."""
        policies = self.scheduler.policies
        if policies is not None and policies.refresh() and self.batches is not None:
            self.batches.engine = policies.default().engine
        self._drain_queue()
        answered = 0
        read: list[tuple[int, int, _Sorted]] = []
        for partition in self.partitions:
            records = self.log.read(
                self.topics.requests, partition, self.next_offsets[partition], self.batch_size
            )
            if records:
                read.append((partition, records[-1].offset, self._sort(partition, records)))
                answered += len(records)
        transactions = [batch for _, _, s in read for _, batch in s.transactions]
        chosen = [policy for _, _, s in read for policy in s.policies]
        held = iter(self._alone(transactions, chosen) if transactions else ())
        # every partition's single requests placed together (one snapshot, one
        # append of claims a wave), and their answers in one append
        valid = [(s.results, offset, r) for _, _, s in read for offset, r in s.valid]
        scheduled = self.scheduler.schedule([r for _, _, r in valid])
        for (results, offset, _), answer in zip(valid, scheduled, strict=True):
            results.append((offset, answer))
        published = []
        for partition, _, sorted_ in read:
            results = sorted_.results
            results.extend((offset, next(held)) for offset, _ in sorted_.transactions)
            results.sort(key=lambda pair: pair[0])
            published.append((partition, results))
        self._publish(published)
        for partition, last, _ in read:
            self.next_offsets[partition] = last + 1
        return answered

    def _sort(self, partition: int, records: list[Record]) -> _Sorted:
        """A partition's requests: answered already (refused, resubmitted, a
        batch placed), single requests for the scheduler, and transactions."""
        out = _Sorted([], [], [], [])
        rules: Mapping[str, GroupRule] | None = None  # read at the first grouped request
        seen: set[str] = set()
        for record in records:
            try:
                if b'"type":"batch"' in record.value:
                    batch = BatchRequest.model_validate_json(record.value)
                    if batch.batch_id in self.answered or batch.batch_id in self.queued_at:
                        continue  # a resubmitted batch keeps its first answer
                    out.results.append(
                        (record.offset, self._batch(partition, record.offset, batch))
                    )
                    continue
                request = PlacementRequest.model_validate_json(record.value)
            except ValidationError as error:
                reason = f"invalid request: {error.error_count()} errors: " + "; ".join(
                    f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                    for e in error.errors(include_url=False)
                )
                log.warning("requests %d@%d: %s", partition, record.offset, reason)
                out.results.append(
                    (record.offset, Scheduled(f"?{record.offset}", False, (), 0, reason))
                )
                continue
            earlier = self.answered.get(request.request_id)
            if earlier is not None or request.request_id in seen:
                # a resubmitted request gets its first answer, not a second placement
                again = (
                    self._read_answer(earlier)
                    if earlier is not None
                    else Scheduled(
                        request.request_id, False, (), 0, "duplicate request id in one batch"
                    )
                )
                out.results.append((record.offset, again))
                continue
            seen.add(request.request_id)
            if request.group_id is None and not request.identifiers:
                out.valid.append((record.offset, request))
                continue
            try:  # its project's policy places it, whichever way it goes
                policy = self.scheduler.policy_for(request)
            except PolicyError as refused:
                out.results.append((record.offset, self._failed(request, str(refused))))
                continue
            grouped = False
            if request.group_id is not None:
                if rules is None:
                    rules = self._rules()
                rule = rules.get(request.group_id)
                refused_by_group = group_refusal(request, rule)
                if refused_by_group:
                    failed = self._failed(request, refused_by_group, policy)
                    out.results.append((record.offset, failed))
                    continue
                grouped = rule is not None
            # compute with identifiers or a server group's membership: a transaction
            if request.identifiers or grouped:
                alone = BatchRequest(
                    batch_id=request.request_id,
                    ts_ms=request.ts_ms,
                    members=(request,),
                    explain=request.explain,
                )
                out.transactions.append((record.offset, alone))
                out.policies.append(policy)
                continue
            out.valid.append((record.offset, request))
        return out

    def _read_answer(self, position: int) -> _Recorded:
        """The answer at ``position`` (see ``_position``), read back from
        the placements topic, without its ``source``."""
        partition, offset = position >> _OFFSET_BITS, position & _OFFSET_MASK
        (record,) = self.log.read(self.topics.placements, partition, offset, 1)
        data = json.loads(record.value)
        del data["source"]
        return _Recorded(data)

    @staticmethod
    def _failed(request: PlacementRequest, reason: str, policy: Policy | None = None) -> Scheduled:
        label = "" if policy is None else policy.label
        return Scheduled(request.request_id, False, (), 0, reason, policy=label)


@dataclass(frozen=True, slots=True)
class _Recorded:
    """An answer as it was appended, given again to a resubmitted id: the
    same, whatever kind of answer it was."""

    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)


_Answer = Scheduled | BatchResult | _Recorded


@dataclass(slots=True)
class _Sorted:
    """One partition's read batch of requests, sorted by how each is answered."""

    results: list[tuple[int, _Answer]]
    valid: list[tuple[int, PlacementRequest]]
    """Single requests, for the scheduler's waves."""
    transactions: list[tuple[int, BatchRequest]]
    """Requests that are a transaction each, as one-member batches."""
    policies: list[Policy | None]
    """The policy that places each of ``transactions``."""


_OFFSET_BITS = 48
_OFFSET_MASK = (1 << _OFFSET_BITS) - 1


def _position(partition: int, offset: int) -> int:
    """A record's (partition, offset) as one int: one object an answered id
    keeps, not a tuple of two."""
    return partition << _OFFSET_BITS | offset


def _generation(log_: Log, topics: Topics) -> str:
    """A new generation per start: how many records the topics a scheduler
    appends to hold. A run that appended anything (an answer, a claim, a
    transaction's step) moved one of them, so the next start differs from
    it; one that appended nothing left no id to collide with. The placements
    topic alone is not enough: a worker that died after its claims and
    before its answer would give its successor its own generation, whose
    reservation ids its writers then take for duplicates."""
    return "g" + "-".join(
        str(sum(log_.end_offset(topic, p) for p in range(log_.partition_count(topic))))
        for topic in (topics.placements, topics.events, topics.transactions)
    )
