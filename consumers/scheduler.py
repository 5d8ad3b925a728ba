"""The scheduler worker: rank on the view, propose claims, retry on rejection.

The scheduler proposes, the partition's writer disposes: a claim that lost a
race (the view was stale) comes back rejected, and the instance is tried
again on the next candidates, excluding the providers already tried, up to
``max_attempts``. Requests are handled in waves: one snapshot per wave, with
each placement's virtual consumption visible to the next request of the wave.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from consumers.claim_text import claim_text
from consumers.policies import Policy, PolicyBook, PolicyError
from consumers.server_groups import GroupRule
from ledger.log import Log
from ledger.publisher import Encoded, Publisher
from scheduling.engine import Engine, demand_row
from scheduling.fit import claim_fit, fits_topology
from scheduling.model import Hints, IntArray, Request, Snapshot, TagRules
from scheduling.ranking import Ranking
from schemas.events import Claim, ClaimItem, Release
from schemas.guest_topology import SriovPort
from schemas.outcomes import Kind, Outcome
from schemas.requests import PlacementRequest
from schemas.topology import TopologyFit

log = logging.getLogger(__name__)


_DECISIONS = (Kind.ACCEPTED, Kind.REJECTED)
_decode = json.JSONDecoder().decode
"""An outcome's JSON text (UTF-8, as ``Outcome.to_json`` writes it) as a
dict: ``json.loads`` of the bytes would first guess their encoding."""


class DecisionTimeout(Exception):
    """The writers did not decide the proposed claims in time."""


_CHANGED_NOTHING = frozenset({Kind.REJECTED, Kind.NOOP})
_TOOK_ROOM_AT_MOST = frozenset(
    {Kind.ACCEPTED, Kind.PREPARED, Kind.COMMITTED, Kind.CONSUMED, Kind.RENEWED}
)
"""Outcomes that take room or move a hold on: none of them leaves more free."""


class OutcomeFollower:
    """Follows the outcomes topic from its end at creation, keeping the
    decisions on the claims it was asked to watch (``watched``), every
    outcome of the subjects of transactions (``followed``), and, per
    partition of the log, how far records that changed something
    (``changed``) or may have made room (``made_room``: released, expired,
    aborted, applied: inventories, providers, aggregates, pools...) reach."""

    def __init__(self, log_: Log, topic: str) -> None:
        self.log = log_
        self.topic = topic
        partitions = log_.partition_count(topic)
        self.offsets = [log_.end_offset(topic, p) for p in range(partitions)]
        self.decided: dict[str, Outcome] = {}
        self.watched: set[str] = set()
        self.history: dict[str, list[Outcome]] = {}
        """Subject -> its outcomes in log order, for the subjects followed."""
        self.changed: dict[int, int] = {}
        """Partition -> one past the offset of the last record seen deciding a change."""
        self.made_room: dict[int, int] = {}
        """Partition -> one past the offset of the last record seen that may have made room."""
        for partition, end in enumerate(self.offsets):
            # what was decided before this follower started is not seen: as if
            # the last record decided then (and every one before it) made room.
            # A writer publishes a partition's outcomes in its log order, and
            # one that restarts publishes again those its view had not committed
            if end:
                (last,) = self.log.read(self.topic, partition, end - 1, 1)
                outcome = Outcome.from_json(last.value)
                self._mark(outcome.partition, outcome.offset, Kind.APPLIED)

    def _mark(self, partition: int, offset: int, kind: str) -> None:
        if kind in _CHANGED_NOTHING:
            return
        mark = offset + 1
        if mark > self.changed.get(partition, 0):
            self.changed[partition] = mark
        if kind not in _TOOK_ROOM_AT_MOST and mark > self.made_room.get(partition, 0):
            self.made_room[partition] = mark

    def poll(self) -> None:
        watched, history = self.watched, self.history
        for partition, offset in enumerate(self.offsets):
            while records := self.log.read(self.topic, partition, offset, 5000):
                offset = records[-1].offset + 1
                for record in records:
                    # most outcomes are of nothing watched or followed (every
                    # provider's metrics report has one): read as a dict, and
                    # made an Outcome only when kept
                    data = _decode(record.value.decode())
                    subject, kind = data["subject"], data["kind"]
                    seen = history.get(subject)
                    if seen is not None or (kind in _DECISIONS and subject in watched):
                        outcome = Outcome.from_dict(data)
                        if kind in _DECISIONS and subject in watched:
                            self.decided[subject] = outcome
                        if seen is not None:
                            seen.append(outcome)
                    self._mark(data["partition"], data["offset"], kind)
            self.offsets[partition] = offset

    def learn(self, outcomes: Iterable[Outcome]) -> None:
        """Decisions on watched claims told by writers in this process
        before their outcomes are appended (they are appended with the
        answers that report them, in one group commit): kept as if read.
        The rest of what the outcomes say is taken when they are read."""
        watched, decided = self.watched, self.decided
        for outcome in outcomes:
            if outcome.subject in watched and outcome.kind in _DECISIONS:
                decided[outcome.subject] = outcome

    def wait(
        self,
        done: Callable[[], bool],
        pump: Callable[[], object],
        timeout_s: float,
        interval_s: float,
        what: str,
    ) -> None:
        """Poll (letting in-process writers ``pump`` first) until ``done``;
        :class:`DecisionTimeout` naming ``what`` after ``timeout_s``. Between
        polls it waits for the next outcome to arrive, ``interval_s`` at
        most (a pump may have work that no outcome announces)."""
        deadline = time.monotonic() + timeout_s
        while True:
            pump()
            self.poll()
            if done():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise DecisionTimeout(f"{what} undecided")
            self.log.wait({self.topic: dict(enumerate(self.offsets))}, min(interval_s, left))

    def follow(self, subjects: Sequence[str]) -> None:
        for subject in subjects:
            self.history.setdefault(subject, [])

    def forget(self, subjects: Sequence[str]) -> None:
        for subject in subjects:
            self.history.pop(subject, None)


@dataclass(frozen=True, slots=True)
class Scheduled:
    """The final outcome of one request."""

    request_id: str
    placed: bool
    reservations: tuple[tuple[str, str], ...]
    """(reservation id, provider id) per instance placed."""
    attempts: int
    reason: str = ""
    trace: tuple[str, ...] = ()
    policy: str = ""
    """The policy that placed it, ``name@version`` (empty: no policy book)."""
    offsets: Mapping[int, int] = field(default_factory=dict)
    """Partition -> the offset the snapshot of its last attempt reflected
    (records below it applied), when the snapshot says so."""
    candidates: tuple[Mapping[str, Any], ...] = ()
    """A placed request's best candidates on its last attempt, best first,
    each with its weighers' parts, as answers recorded them before
    ``ranked`` (read back from an older log)."""
    ranked: Mapping[str, Any] | None = None
    """The same in the compact form answers record (:mod:`schemas.ranked`),
    as read back."""
    ranking: Ranking | None = field(default=None, compare=False)
    """The same, as the engine left them: encoded only when the answer is
    written (:class:`scheduling.ranking.Ranking`)."""

    def to_dict(self) -> dict[str, Any]:
        data = self._fields()
        if self.ranking is not None:
            data["ranked"] = self.ranking.compact()
        return data

    def encoded(self, source: Sequence[int]) -> bytes:
        """``json.dumps`` of ``to_dict()`` with ``source`` (where the request
        is on the requests topic), as the placements topic records it: the
        ranking's text written once (:meth:`Ranking.to_json`) and set in,
        not made a dict and encoded item by item."""
        data = self._fields()
        data["source"] = list(source)
        text = json.dumps(data)
        if self.ranking is not None:
            text = f'{text[:-1]}, "ranked": {self.ranking.to_json()}}}'
        return text.encode()

    def _fields(self) -> dict[str, Any]:
        """``to_dict()`` without the engine's ranking."""
        data = {
            "request_id": self.request_id,
            "placed": self.placed,
            "reservations": [list(pair) for pair in self.reservations],
            "attempts": self.attempts,
            "reason": self.reason,
            "trace": list(self.trace),
        }
        if self.policy:
            data["policy"] = self.policy
        if self.offsets:
            data["offsets"] = {str(p): o for p, o in self.offsets.items()}
        if self.candidates:
            data["candidates"] = list(self.candidates)
        if self.ranking is None and self.ranked is not None:
            data["ranked"] = self.ranked
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scheduled:
        return cls(
            request_id=data["request_id"],
            placed=data["placed"],
            reservations=tuple((rid, pid) for rid, pid in data["reservations"]),
            attempts=data["attempts"],
            reason=data["reason"],
            trace=tuple(data["trace"]),
            policy=data.get("policy", ""),
            offsets={int(p): o for p, o in data.get("offsets", {}).items()},
            candidates=tuple(data.get("candidates", ())),
            ranked=data.get("ranked"),
        )


@dataclass(slots=True)
class _Pending:
    request: PlacementRequest
    left: list[int]
    tried: set[str] = field(default_factory=set)
    held: list[tuple[str, str]] = field(default_factory=list)
    proposed: dict[str, tuple[int, str]] = field(default_factory=dict)
    attempts: int = 0
    reasons: list[str] = field(default_factory=list)
    offsets: Mapping[int, int] = field(default_factory=dict)
    """What the snapshot of the last attempt reflected."""
    ranking: Ranking | None = None
    result: Scheduled | None = None
    policy: Policy | None = None


@runtime_checkable
class Versioned(Protocol):
    """A snapshot source that says how far into each partition of the log its
    latest snapshot reflects (the view's next offset per partition)."""

    def offsets(self) -> Mapping[int, int]: ...


@dataclass(frozen=True, slots=True)
class _Unseen:
    """A proposed claim the view may not reflect yet."""

    partition: int
    offset: int
    provider_id: str
    resources: Mapping[str, int]
    fit: TopologyFit | None = None


def _demand(
    snapshot: Snapshot,
    resources: Mapping[str, int],
    known: dict[tuple[tuple[str, int], ...], IntArray],
) -> IntArray:
    """``resources`` as a row of the snapshot's classes; a wave's requests
    and its unseen claims share a few shapes, each turned into a row once."""
    shape = tuple(resources.items())
    row = known.get(shape)
    if row is None:
        row = known[shape] = demand_row(snapshot, resources)
    return row


class Scheduler:
    def __init__(
        self,
        publisher: Publisher,
        engine: Engine,
        snapshot: Callable[[], Snapshot],
        follower: OutcomeFollower,
        pump: Callable[[], object] = lambda: None,
        max_attempts: int = 3,
        decision_timeout_s: float = 30.0,
        poll_interval_s: float = 0.005,
        generation: str = "",
        wave: int = 0,
        depth: int = 1,
        policies: PolicyBook | None = None,
        decide: Callable[[], object] | None = None,
    ) -> None:
        """``pump`` lets writers in this process catch up (the view
        committed) before a snapshot is read; ``decide``, if given, is what
        lets them decide while this waits for their decisions: they may
        leave the view's commit of those for the next ``pump``, so that
        the answer is not kept waiting for it (``pump`` by default).

        ``generation`` goes into every reservation id, so a restarted worker
        that schedules a request again makes new claims rather than duplicates
        of the ones it made before (those are abandoned and expire).

        ``wave`` is how many requests are ranked on one snapshot (0: all of a
        call's requests). When ``snapshot`` is :class:`Versioned`, every
        snapshot is completed with the claims proposed after the offsets it
        reflects (decided or not: the view commits after the outcome is
        published), so a wave never counts on capacity an earlier one took,
        and up to ``depth`` waves may be in flight at once, the next ranked
        while the writers decide the previous. That pays when the writers run
        in other processes; beside them in one process, the GIL makes a
        second wave in flight cost more than it saves. Without offsets the
        scheduler cannot tell which of its claims the view holds, so it
        waits for each wave."""
        self.generation = generation
        self.publisher = publisher
        self.engine = engine
        self.snapshot = snapshot
        self.follower = follower
        self.pump = pump
        self.decide = decide or pump
        self.max_attempts = max_attempts
        self.decision_timeout_s = decision_timeout_s
        self.poll_interval_s = poll_interval_s
        self.wave = wave
        # asked once: isinstance on a runtime-checkable Protocol costs microseconds
        self._versioned = snapshot if isinstance(snapshot, Versioned) else None
        self.depth = depth if self._versioned is not None else 1
        self.policies = policies
        """Which policy places each request (None: ``engine`` for all)."""
        self._unseen: dict[str, _Unseen] = {}
        """Reservation id -> a claim proposed that the last snapshot did not
        reflect and the writer has not rejected (with a Versioned source)."""

    def schedule(self, requests: Sequence[PlacementRequest]) -> list[Scheduled]:
        """Place every request (each ends placed or failed with a reason)."""
        pending = [_Pending(r, list(range(r.num_instances))) for r in requests]
        # only a policy assigned to an aggregate needs the view's zones first
        zones = _zones(self.snapshot()) if self.policies and self.policies.aggregates else {}
        for p in pending:
            self._choose_policy(p, zones)
            if p.result is None:
                self._refuse(p)
        ready = deque(p for p in pending if p.result is None)
        flight: list[tuple[list[_Pending], list[str]]] = []
        while ready or flight:
            if ready and len(flight) < self.depth:
                size = min(self.wave or len(ready), len(ready))
                wave = [ready.popleft() for _ in range(size)]
                flight.append((wave, self._propose(wave)))
                continue
            flight = self._land(flight, ready)
        return [p.result for p in pending if p.result is not None]

    def _land(
        self, flight: list[tuple[list[_Pending], list[str]]], ready: deque[_Pending]
    ) -> list[tuple[list[_Pending], list[str]]]:
        """Wait for the oldest wave's decisions, then settle every wave in
        ``flight`` decided by then (the writers may have decided several),
        its unfinished requests put back in ``ready`` to be ranked again
        together; the waves still in flight."""
        if flight[0][1]:
            self._await(flight[0][1])
        decided = self.follower.decided
        still = []
        for wave, proposed in flight:
            if all(rid in decided for rid in proposed):
                ready.extend(p for p in wave if not self._settle(p))
            else:
                still.append((wave, proposed))
        return still

    def policy_for(self, request: PlacementRequest) -> Policy | None:
        """The policy that places ``request`` (None: no policy book, this
        scheduler's engine); :class:`PolicyError` if no policy may."""
        if self.policies is None:
            return None
        aggregates: list[str] = []
        if request.availability_zone and self.policies.aggregates:
            aggregates = _zones(self.snapshot()).get(request.availability_zone, [])
        return self.policies.for_request(request.project_id, request.policy, aggregates)

    def _choose_policy(self, p: _Pending, zones: Mapping[str, list[str]]) -> None:
        if self.policies is None:
            return
        r = p.request
        aggregates = zones.get(r.availability_zone, []) if r.availability_zone else []
        try:
            p.policy = self.policies.for_request(r.project_id, r.policy, aggregates)
        except PolicyError as refused:
            self._fail(p, str(refused), ())

    def _refuse(self, p: _Pending) -> None:
        """Fail a request the engine's filters can give no meaning to (a PCI
        alias its configuration does not define) before placing it."""
        engine = self.engine if p.policy is None else p.policy.engine
        if engine.refusers:
            reason = engine.refuses(_engine_request(p))
            if reason is not None:
                self._fail(p, f"refused: {reason}", ())

    def _propose(self, wave: list[_Pending]) -> list[str]:
        """Rank ``wave`` on one snapshot and publish its claims; their ids."""
        self.pump()  # in one process, let the writers catch up before reading the view
        snapshot = self.snapshot()
        self._index_to(snapshot, wave)
        rows = snapshot.row_of
        used = snapshot.used.copy()
        demands: dict[tuple[tuple[str, int], ...], IntArray] = {}  # by request shape
        # each working twin says which rows it changed, so that the engine's
        # feasibility index (bounded mode) follows it by re-reading those alone
        working = snapshot.with_used(used, self._add_unseen(snapshot, used, demands))
        claims: list[Encoded] = []
        # each claim's reservation id, provider, amounts and fit
        proposed: list[tuple[str, str, Mapping[str, int], TopologyFit | None]] = []
        offsets: dict[int, int] = {} if self._versioned is None else dict(self._versioned.offsets())
        # the fits of this scheduler's claims the snapshot does not show yet
        mine: dict[str, list[TopologyFit]] = {}
        for unseen in self._unseen.values():
            if unseen.fit is not None:
                mine.setdefault(unseen.provider_id, []).append(unseen.fit)
        fitting: dict[int, bool] = {}  # engine -> whether it fits cells and devices, asked once
        for p in wave:
            p.attempts += 1
            p.proposed.clear()
            engine = self.engine if p.policy is None else p.policy.engine
            request = _engine_request(p)
            placement = engine.place(working, request, explain=p.request.explain)
            p.offsets = offsets
            p.ranking = placement.ranking
            if not placement.placed:
                trace = placement.trace.lines() if placement.trace else []
                self._fail(p, placement.reason, tuple(trace))
                continue
            demand = _demand(snapshot, p.request.resources, demands)
            picked = []
            fits = fitting.get(id(engine))
            if fits is None:
                fits = fitting[id(engine)] = fits_topology(engine)
            for instance, pid in zip(p.left, placement.providers, strict=True):
                fit = None
                if fits:
                    found = claim_fit(engine, snapshot, rows[pid], request, mine.get(pid, ()))
                    if isinstance(found, str):
                        # this scheduler's own claims took what it needs: next wave
                        p.tried.add(pid)
                        p.reasons = [f"{pid}: {found}"]
                        continue
                    fit = found
                    if fit is not None:
                        mine.setdefault(pid, []).append(fit)
                rid = f"{p.request.request_id}.{instance}.{p.attempts}{self.generation}"
                p.proposed[rid] = (instance, pid)
                claims.append(self._claim_encoded(p, instance, pid, fit))
                proposed.append((rid, pid, p.request.resources, fit))
                used[rows[pid]] += demand
                picked.append(rows[pid])
            working = working.with_used(used, picked)
        if not claims:
            return []
        where = self.publisher.publish_encoded(claims)
        ids = [rid for rid, _, _, _ in proposed]
        self.follower.watched.update(ids)
        if self._versioned is not None:
            for (rid, pid, amounts, fit), (partition, offset) in zip(proposed, where, strict=True):
                self._unseen[rid] = _Unseen(partition, offset, pid, amounts, fit)
        return ids

    def _claim_encoded(
        self, p: _Pending, instance: int, provider_id: str, fit: TopologyFit | None
    ) -> Encoded:
        """The claim of ``p``'s ``instance`` on ``provider_id`` as the log
        records it: written out directly when it can be, else through its
        model (which refuses an id too long, as the edge would)."""
        if fit is None:
            suffix = f"{p.attempts}{self.generation}"
            text = claim_text(p.request, instance, provider_id, suffix)
            if text is not None:
                return text
        return self.publisher.encoded(_claim(p, instance, provider_id, self.generation, fit))

    def _index_to(self, snapshot: Snapshot, wave: list[_Pending]) -> None:
        """Bring the feasibility index of each engine placing ``wave`` in
        bounded mode to ``snapshot`` before the wave's working twins branch
        off it. The index, left at the last wave's last twin, can follow
        the view's next snapshot (made from the one that wave started
        from, which it remembers), and a twin of a snapshot it is at; but
        not a twin of a snapshot it never saw, once that twin's lineage
        starts afresh from its parent (many rows changed): it would be
        built again, O(providers), each such wave. Marked, the snapshot
        stays known however many picks the wave steps through, so the
        next one, made from it, is followed too."""
        engines = {
            id(e): e for e in (self.engine if p.policy is None else p.policy.engine for p in wave)
        }
        for engine in engines.values():
            if engine.bounded.applies(snapshot.size):
                engine.index(snapshot).mark(snapshot)

    def _add_unseen(
        self,
        snapshot: Snapshot,
        used: IntArray,
        demands: dict[tuple[tuple[str, int], ...], IntArray],
    ) -> list[int]:
        """Count on ``used`` the claims proposed after ``snapshot`` was read;
        forget those it reflects (accepted or not, the view has the answer).
        The rows it counted some on."""
        if not self._unseen or self._versioned is None:
            return []
        seen = self._versioned.offsets()
        rows: list[int] = []
        amounts: list[IntArray] = []
        for rid, claim in list(self._unseen.items()):
            if claim.offset < seen.get(claim.partition, 0):
                del self._unseen[rid]
                continue
            row = snapshot.row_of.get(claim.provider_id)
            if row is not None:
                rows.append(row)
                amounts.append(_demand(snapshot, claim.resources, demands))
        if rows:
            np.add.at(used, np.asarray(rows, dtype=np.int64), np.stack(amounts))
        return rows

    def _await(self, reservation_ids: list[str]) -> None:
        decided = self.follower.decided
        seen = 0  # the first so many are decided (none is forgotten while waiting)

        def done() -> bool:
            nonlocal seen
            while seen < len(reservation_ids) and reservation_ids[seen] in decided:
                seen += 1
            return seen == len(reservation_ids)

        self.follower.wait(
            done,
            self.decide,
            self.decision_timeout_s,
            self.poll_interval_s,
            f"{len(reservation_ids)} claims",
        )

    def _settle(self, p: _Pending) -> bool:
        """Take the writers' decisions; True when the request is finished."""
        if p.result is not None:
            return True
        for rid, (instance, pid) in p.proposed.items():
            outcome = self.follower.decided.pop(rid)
            self.follower.watched.discard(rid)
            if outcome.kind == Kind.ACCEPTED:
                p.held.append((rid, pid))
                p.left.remove(instance)
                log.debug(
                    "placed %s instance %d on %s as %s", p.request.request_id, instance, pid, rid
                )
            else:
                self._unseen.pop(rid, None)
                p.tried.add(pid)
                p.reasons = [str(r) for r in outcome.reasons]
        if not p.left:
            p.result = Scheduled(
                p.request.request_id,
                True,
                tuple(p.held),
                p.attempts,
                policy=_label(p),
                offsets=p.offsets,
                ranking=p.ranking,
            )
            return True
        limit = self.max_attempts if p.policy is None else p.policy.config.max_attempts
        if p.attempts >= limit:
            reason = f"rejected by the writer {p.attempts} times; last: {'; '.join(p.reasons)}"
            self._fail(p, reason, ())
            return True
        return False

    def _fail(self, p: _Pending, reason: str, trace: tuple[str, ...]) -> None:
        """Report the failure and give back what the request already holds."""
        if p.held:
            now = self.publisher.clock_ms()
            self.publisher.publish(
                [
                    Release(
                        event_id=f"release-{rid}", ts_ms=now, partition_key=pid, reservation_id=rid
                    )
                    for rid, pid in p.held
                ]
            )
        log.info("failed %s: %s", p.request.request_id, reason)
        p.result = Scheduled(
            p.request.request_id,
            False,
            (),
            p.attempts,
            reason,
            trace,
            policy=_label(p),
            offsets=p.offsets,
        )


def _zones(snapshot: Snapshot) -> dict[str, list[str]]:
    """Availability zone -> the aggregates that are it (Nova's zones are
    aggregates with ``availability_zone`` metadata)."""
    zones: dict[str, list[str]] = {}
    for aggregate_id, aggregate in snapshot.aggregates.items():
        named = aggregate.metadata.get("availability_zone")
        for zone in named.split(",") if named else ():  # Nova splits metadata on commas
            zones.setdefault(zone.strip(), []).append(aggregate_id)
    return zones


def _label(p: _Pending) -> str:
    return "" if p.policy is None else p.policy.label


def _engine_request(p: _Pending) -> Request:
    return engine_request(p.request, len(p.left), frozenset(p.tried))


def engine_request(
    r: PlacementRequest,
    instances: int,
    tried: frozenset[str],
    group: GroupRule | None = None,
) -> Request:
    """The engine's view of ``instances`` more instances of a request;
    ``group``: its server group's rule, when the group is one the log
    created (its policy then comes from there)."""
    return Request(
        request_id=r.request_id,
        resources=r.resources,
        project_id=r.project_id,
        user_id=r.user_id or "",
        name=r.name,
        num_instances=instances,
        flavor_name=r.flavor_name,
        extra_specs=r.extra_specs,
        image_properties=r.image_properties,
        availability_zone=r.availability_zone,
        required_traits=r.required_traits,
        forbidden_traits=r.forbidden_traits,
        hints=_hints(r),
        group_id=r.group_id,
        group_policy=r.group_policy if group is None else group.policy,
        max_server_per_host=1 if group is None else group.max_server_per_host,
        tags=_tag_rules(r),
        tried_providers=tried,
        reason=r.reason,
        source_provider=r.source_provider,
        sriov_ports=tuple(
            SriovPort(p.physical_network, p.vnic_type, p.numa_affinity_policy)
            for p in r.sriov_ports
        )
        if r.sriov_ports
        else (),
        ts_ms=r.ts_ms,
    )


_NO_HINTS = Hints()
_NO_TAG_RULES = TagRules()


def _hints(r: PlacementRequest) -> Hints:
    """``r``'s hints; the one shared empty set of them when it gives none
    (most requests), not a new one each time the engine is asked."""
    if (
        r.same_host
        or r.different_host
        or r.query is not None
        or r.build_near_host_ip is not None
        or r.cidr is not None
    ):
        return Hints(
            same_host=r.same_host,
            different_host=r.different_host,
            query=r.query,
            build_near_host_ip=r.build_near_host_ip,
            cidr=r.cidr if r.cidr is not None else "/24",
        )
    return _NO_HINTS


def _tag_rules(r: PlacementRequest) -> TagRules:
    """``r``'s tag rules, shared when empty as :func:`_hints` are."""
    if r.require_with_tags or r.require_without_tags or r.prefer_with_tags or r.prefer_without_tags:
        return TagRules(
            require_with=r.require_with_tags,
            require_without=r.require_without_tags,
            prefer_with=r.prefer_with_tags,
            prefer_without=r.prefer_without_tags,
        )
    return _NO_TAG_RULES


def _claim(
    p: _Pending, instance: int, provider_id: str, generation: str, fit: TopologyFit | None = None
) -> Claim:
    r = p.request
    suffix = f"{p.attempts}{generation}"
    # the hard rules the writer can check locally travel in the claim, so a
    # race between schedulers cannot break them
    group = r.group_id if r.group_policy == "anti-affinity" else None
    return Claim(
        event_id=f"claim-{r.request_id}-{instance}-{suffix}",
        ts_ms=r.ts_ms,
        partition_key=provider_id,
        reservation_id=f"{r.request_id}.{instance}.{suffix}",
        consumer_id=f"{r.request_id}.{instance}",
        project_id=r.project_id,
        items=(
            ClaimItem(
                provider_id=provider_id,
                resources=dict(r.resources),
                fit=fit,
                guest=None if fit is None else r.guest_asks(),
            ),
        ),
        lease_ms=r.lease_ms,
        anti_affinity_group=group,
        tags=r.tags,
        require_with_tags=r.require_with_tags,
        require_without_tags=r.require_without_tags,
    )
