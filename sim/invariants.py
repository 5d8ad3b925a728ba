"""The invariants, checked after every step of a run and once more at its end.

Each check raises :class:`Violation` naming the invariant; the run prints the
seed and step that reproduce it. The writers' states are checked against a
shadow: the same pure projector fed every record of the log exactly once,
in order, by the checker itself.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable

import numpy as np
from sqlalchemy import select, text

from consumers.partition_writer import PartitionWriter
from consumers.policies import DEFAULT
from consumers.server_groups import read_rules
from consumers.snapshot_source import snapshot_from_view
from consumers.state_snapshot import rules_of, snapshot_of
from ledger.log import CorruptLog, Record, Tail
from projections.batch import decide
from projections.state import CONSUMED, PartitionState
from projections.view.tables import partition_offsets
from scheduling.model import RESOURCE_ARRAYS, Snapshot
from schemas.outcomes import Kind, Outcome
from sim.system import System
from sim.workload import Workload

OVER_CAPACITY = "no provider over capacity (writers)"
VIEW_OVER_CAPACITY = "no provider over capacity (view)"
USAGE_COUNTED = "usage equals the sum of the active reservations"
ALL_OR_NOTHING = "every batch all or nothing"
IDENTIFIERS = "no identifier held by two live reservations"
ACKNOWLEDGED = "every acknowledged append present"
APPLIED_ONCE = "no record applied twice to the view"
REPLAY = "replay --verify equality"
LIVENESS = "every request answered once the faults stop"
DAMAGE = "storage damage detected, never an acknowledged record lost"
ANTI_AFFINITY = "no two instances of an anti-affinity group on one provider"
SERVER_GROUPS = "a server group's hard rule holds across requests"
LEASES = "no hold outlives its lease"
UNHANDLED = "no component fails on what the system may do to it"
POLICY = "every answer names the policy its project was given"
SNAPSHOT = "the snapshot made from the writers' states is the one read from the view"

INVARIANTS = (
    OVER_CAPACITY,
    VIEW_OVER_CAPACITY,
    USAGE_COUNTED,
    ALL_OR_NOTHING,
    IDENTIFIERS,
    ACKNOWLEDGED,
    APPLIED_ONCE,
    REPLAY,
    LIVENESS,
    DAMAGE,
    ANTI_AFFINITY,
    SERVER_GROUPS,
    LEASES,
    UNHANDLED,
    POLICY,
    SNAPSHOT,
)


def snapshot_difference(made: Snapshot, read: Snapshot) -> str | None:
    """The first way ``made`` differs from ``read``, if it does."""
    for mine, theirs in zip(made.providers, read.providers, strict=False):
        if mine != theirs:
            return f"provider {theirs.provider_id}: made {mine}, read {theirs}"
    if len(made.providers) != len(read.providers):
        return f"{len(made.providers)} providers made, {len(read.providers)} read"
    if made.classes != read.classes or made.aggregates != read.aggregates:
        made_of, read_of = (made.classes, made.aggregates), (read.classes, read.aggregates)
        return f"classes and aggregates: made {made_of}, read {read_of}"
    for name in RESOURCE_ARRAYS:
        if not np.array_equal(getattr(made, name), getattr(read, name)):
            return f"the {name} arrays differ"
    return None


_GENERATION = re.compile(r"\.\d+(g[\d-]+s\d+)(?:\.p\d+)?$")


class Violation(Exception):
    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


class Checker:
    def __init__(self, system: System, workload: Workload) -> None:
        self.system = system
        self.workload = workload
        count = system.partitions
        self.shadows = [PartitionState(partition=p, partitions=count) for p in range(count)]
        self.shadow_next = [0] * count
        self.shadow_digests: dict[int, tuple[int, tuple[object, ...]]] = {}
        self.outcomes = Tail(system.log, system.topics.outcomes, from_start=True)
        self.placements = Tail(system.log, system.topics.placements, from_start=True)
        self.policy_log = Tail(system.log, system.topics.policies, from_start=True)
        self.policy_versions: dict[str, int] = {}
        """Policy name -> the offset of the record that set it, as the log says."""
        self.given: dict[str, str] = {}
        """Project -> the policy it was given."""
        self.first_answers: set[str] = set()
        self.polled: dict[str, int] = {}
        """Topic -> the log's appends to it when the checker's tail of it
        last read to its end."""
        self.kinds: dict[str, list[str]] = defaultdict(list)
        """Reservation id -> the kinds of its outcomes, in log order."""
        self.failed_batches: set[str] = set()
        self.crashed_generations: set[str] = set()
        self.checks = 0
        self.seen: dict[int, tuple[PartitionWriter, int]] = {}
        """Partition -> (writer, offset) last checked: a writer that has
        neither moved on nor been replaced has nothing new to check."""

    # -- after every step -------------------------------------------------------

    def after_step(self) -> None:
        self.checks += 1
        for writer in list(self.system.writers.writers.values()):
            if writer.halted is not None:
                continue
            p = writer.partition
            last = self.seen.get(p)
            if last is not None and last[0] is writer and last[1] == writer.next_offset:
                continue
            self.seen[p] = (writer, writer.next_offset)
            self._within_capacity(writer.state)
            self._identifiers(writer.state)
            self._rules_and_leases(writer.state)
            if writer.next_offset > self.shadow_next[p]:
                self._advance_shadow(p, writer.next_offset)
            if writer.next_offset == self.shadow_next[p]:
                self._same_as_shadow(writer.state, p)
        self._answers()

    def _advance_shadow(self, partition: int, end: int) -> None:
        log, topic = self.system.log, self.system.topics.events
        shadow = self.shadows[partition]
        while self.shadow_next[partition] < end:
            offset = self.shadow_next[partition]
            records = log.read(topic, partition, offset, end - offset)
            decide(shadow, records)
            self.shadow_next[partition] = records[-1].offset + 1
        shadow.touched.clear()
        shadow.reshaped.clear()
        shadow.pools_touched.clear()
        shadow.aggregates_touched.clear()

    def _same_as_shadow(self, state: PartitionState, partition: int) -> None:
        """A record applied twice (or skipped) leaves the writer's state
        unlike the shadow's, which saw every record exactly once. The
        shadow changes only as it advances: its digest is kept per offset."""
        at = self.shadow_next[partition]
        kept = self.shadow_digests.get(partition)
        if kept is None or kept[0] != at:
            kept = self.shadow_digests[partition] = (at, _digest(self.shadows[partition]))
        mine, theirs = _digest(state), kept[1]
        if mine != theirs:
            raise Violation(
                APPLIED_ONCE,
                f"partition {state.partition}: the writer's state differs from every record "
                f"applied once: {_first_difference(mine, theirs)}",
            )

    def _within_capacity(self, state: PartitionState) -> None:
        counted: dict[str, list[int]] = {}
        for reservation in state.reservations.values():
            for provider, amounts in reservation.items:
                used = counted.setdefault(provider.provider_id, [0] * len(provider.layout.classes))
                for rc, amount in amounts:
                    used[provider.layout.index[rc]] += amount
        for pid, provider in state.providers.items():
            layout = provider.layout
            counts = counted.get(pid, [0] * len(layout.classes))
            for i, limits in enumerate(layout.limits):
                amount = provider.held[i] + provider.consumed[i]
                if amount != counts[i]:
                    raise Violation(
                        USAGE_COUNTED,
                        f"{pid} {layout.classes[i]}: counted {amount}, "
                        f"reservations hold {counts[i]}",
                    )
                if amount > limits.capacity:
                    raise Violation(
                        OVER_CAPACITY,
                        f"{pid} {layout.classes[i]}: {amount} used of {limits.capacity}",
                    )

    def _identifiers(self, state: PartitionState) -> None:
        holder: dict[tuple[str, int], str] = {}
        for rid, reservation in state.reservations.items():
            for pool, value in reservation.identifiers:
                key = (pool.pool_id, value)
                if key in holder:
                    raise Violation(IDENTIFIERS, f"{key} held by {holder[key]} and {rid}")
                if pool.free.is_free(value):
                    raise Violation(IDENTIFIERS, f"{key} held by {rid} but free in its pool")
                holder[key] = rid

    def _rules_and_leases(self, state: PartitionState) -> None:
        """Anti-affinity holds on every provider, and server groups' hard
        rules in their partitions; a hold whose lease the partition's clock
        has passed was expired before anything else was decided (holds
        expire first)."""
        groups: set[tuple[str, str]] = set()
        groups_of = self.workload.groups  # the group the request asked for
        for rid, reservation in state.reservations.items():
            if reservation.status != CONSUMED and reservation.expires_at_ms < state.clock_ms:
                raise Violation(
                    LEASES,
                    f"{rid} held until {reservation.expires_at_ms}, "
                    f"partition {state.partition}'s clock at {state.clock_ms}",
                )
            group = groups_of.get(reservation.consumer_id.split(".", 1)[0])
            if group is None:
                continue
            for provider, _ in reservation.items:
                key = (provider.provider_id, group)
                if key in groups:
                    raise Violation(ANTI_AFFINITY, f"group {key[1]} twice on {key[0]}")
                groups.add(key)
        self._server_groups(state)

    @staticmethod
    def _server_groups(state: PartitionState) -> None:
        """The groups created in this partition, counted from the members it
        holds (not from the writer's own tally): an affinity group's on one
        provider, an anti-affinity group's at most its rule on each."""
        hosts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for reservation in state.reservations.values():
            if reservation.membership is not None:
                gid, host = reservation.membership
                hosts[gid][host] += 1
        for gid, counted in hosts.items():
            group = state.groups.get(gid)
            if group is None:
                raise Violation(SERVER_GROUPS, f"members of {gid}, a group deleted or never made")
            if group.policy == "affinity" and len(counted) > 1:
                raise Violation(SERVER_GROUPS, f"affinity group {gid} on {sorted(counted)}")
            most = max(counted.values())
            if group.policy == "anti-affinity" and most > group.max_server_per_host:
                raise Violation(
                    SERVER_GROUPS,
                    f"anti-affinity group {gid}: {most} on one provider, "
                    f"max_server_per_host {group.max_server_per_host}",
                )

    def _answers(self) -> None:
        """A batch answered committed holds every instance it says (at least
        its minimum), each accepted or committed by its writer."""
        self._policies_followed()
        for record in self._read_on(self.outcomes):
            outcome = Outcome.from_json(record.value)
            self.kinds[outcome.subject].append(outcome.kind)
        fresh, self.workload.answered = self.workload.answered, []
        for bid in fresh:
            asked = self.workload.asked[bid]
            answer = asked.answer
            if answer is None or not answer.get("batch"):
                continue
            if not answer["placed"]:
                self.failed_batches.add(bid)
                continue
            instances = answer["instances"]
            if len(instances) < asked.least or len(instances) > asked.instances:
                raise Violation(
                    ALL_OR_NOTHING,
                    f"{bid} ({asked.mode}) committed {len(instances)} of {asked.instances} "
                    f"instances, at least {asked.least} needed",
                )
            for instance in instances:
                for rid in instance["reservation_ids"]:
                    kinds = self.kinds.get(rid, [])
                    if Kind.ACCEPTED not in kinds and Kind.COMMITTED not in kinds:
                        raise Violation(
                            ALL_OR_NOTHING, f"{bid} committed, but {rid} was never held: {kinds}"
                        )

    def _policies_followed(self) -> None:
        """A request's first answer names the policy its project was given
        when it was placed (``NAME@VERSION``; nothing for the scheduler's
        own configuration), or is refused if that policy is not set.

        A scheduler folds the policies at the start of its step and nothing
        appends to them during one, so the checker's own fold of the topic,
        right after the step, is the one the answer was made with."""
        for record in self._read_on(self.policy_log):
            data = json.loads(record.value)
            name = data["name"]
            if data["type"] == "policy_set":
                self.policy_versions[name] = record.offset
            elif data["type"] == "policy_deleted":
                self.policy_versions.pop(name, None)
            elif name is None:
                self.given.pop(data["project_id"], None)
            else:
                self.given[data["project_id"]] = name
        for record in self._read_on(self.placements):
            answer = json.loads(record.value)
            rid = answer["request_id"]
            if rid in self.first_answers:
                continue  # given again, to the same id asked again
            self.first_answers.add(rid)
            asked = self.workload.asked.get(rid)
            if asked is None or (answer.get("batch") and asked.mode != "single"):
                continue  # a batch (placed by the default policy), or not the workload's
            # a single request held as a transaction (a group's member,
            # identifiers) is answered as a batch, by its project's policy too
            named, expected = answer.get("policy", ""), self._policy_of(asked.project_id)
            if expected is None and not answer["placed"] and not named:
                continue  # refused: its project's policy is not set
            if named != expected:
                raise Violation(
                    POLICY,
                    f"{rid} of project {asked.project_id} answered by {named or 'no policy'}, "
                    f"given {expected or 'a policy not set'}",
                )

    def _read_on(self, tail: Tail) -> list[Record]:
        """The records a tail has not handed out yet (none without an
        append to its topic since it last read to the end), up to a damaged
        one: the checker reads that once the operator has restored it (a
        reader of the system meets it first, or the scrubber)."""
        appends = self.system.log.appends.get(tail.topic, 0)
        if self.polled.get(tail.topic) == appends:
            return []
        records: list[Record] = []
        try:
            records.extend(tail.records())
        except CorruptLog:
            return records  # not read to the end: read on at every check until restored
        self.polled[tail.topic] = appends
        return records

    def _policy_of(self, project_id: str) -> str | None:
        name = self.given.get(project_id, DEFAULT)
        version = self.policy_versions.get(name)
        if version is None:
            return "default@configuration" if name == DEFAULT else None
        return f"{name}@{version}"

    # -- when the writers are at the end of the log --------------------------------

    def caught_up(self) -> None:
        """Checks that need every writer at the end of its partition: the
        view within capacity and in step with the writers; a failed batch
        holds nothing (but what a crashed scheduler abandoned, which its
        lease ends)."""
        with self.system.engine.connect() as conn:
            over = conn.execute(
                text(
                    "SELECT provider_id, resource_class, held, consumed, capacity "
                    "FROM inventories WHERE held + consumed > capacity"
                )
            ).first()
            if over is not None:
                raise Violation(VIEW_OVER_CAPACITY, f"{tuple(over)}")
            offsets = dict(
                conn.execute(
                    select(partition_offsets.c.partition, partition_offsets.c.next_offset)
                ).all()
            )
            usage = conn.execute(
                text("SELECT provider_id, resource_class, held, consumed FROM inventories")
            ).all()
        for writer in self.system.writers.writers.values():
            if offsets.get(writer.partition, 0) != writer.next_offset:
                raise Violation(
                    APPLIED_ONCE,
                    f"partition {writer.partition}: view at {offsets.get(writer.partition)}, "
                    f"writer at {writer.next_offset}",
                )
        self._view_usage(usage)
        self._failed_hold_nothing()
        self._snapshot_of_states()

    def _snapshot_of_states(self) -> None:
        """What ``berth explain`` ranks on, made from the writers' states
        (``consumers/state_snapshot.py``), is the snapshot and the server
        groups' rules a scheduler reads from the view they wrote."""
        writers = self.system.writers.writers
        if len(writers) != self.system.partitions:
            return  # a partition without its writer: no state to make it from
        states = [writers[p].state for p in sorted(writers)]
        read = snapshot_from_view(self.system.engine)
        difference = snapshot_difference(snapshot_of(states), read)
        if difference is None and rules_of(states) != read_rules(self.system.engine):
            difference = "the server groups' rules differ"
        if difference is not None:
            raise Violation(SNAPSHOT, difference)

    def _view_usage(self, usage: Iterable[tuple[str, str, int, int]]) -> None:
        expected: dict[tuple[str, str], tuple[int, int]] = {}
        for shadow in self.shadows:
            for pid, provider in shadow.providers.items():
                for i, rc in enumerate(provider.layout.classes):
                    expected[(pid, rc)] = (provider.held[i], provider.consumed[i])
        for pid, rc, held, consumed in usage:
            want = expected.get((pid, rc))
            if want is not None and want != (held, consumed):
                raise Violation(
                    APPLIED_ONCE,
                    f"the view says {pid} {rc} holds {held} and consumes {consumed}; "
                    f"every record applied once: {want}",
                )

    def _failed_hold_nothing(self) -> None:
        if not self.failed_batches:
            return
        for writer in self.system.writers.writers.values():
            for rid, reservation in writer.state.reservations.items():
                bid = reservation.consumer_id.split(".", 1)[0]
                if bid not in self.failed_batches:
                    continue
                generation = _GENERATION.search(rid)
                if generation is not None and generation[1] in self.crashed_generations:
                    continue
                raise Violation(
                    ALL_OR_NOTHING,
                    f"{bid} answered failed, but {rid} is "
                    f"{'consumed' if reservation.status == CONSUMED else 'held'}",
                )

    # -- at the end ------------------------------------------------------------------

    def acknowledged_present(self) -> int:
        """Every acknowledged record reads back as it was appended; how many."""
        log = self.system.log
        checked = 0
        for topic, parts in log.topics.items():
            for p in range(len(parts)):
                stored = {}
                offset = 0
                while records := log.read(topic, p, offset, 5000):
                    offset = records[-1].offset + 1
                    stored.update({r.offset: (r.key, r.value) for r in records})
                for at, key, value in log.acknowledged(topic, p):
                    if stored.get(at) != (key, value):
                        raise Violation(ACKNOWLEDGED, f"{topic} partition {p} record {at}")
                    checked += 1
        return checked


def _digest(state: PartitionState) -> tuple[object, ...]:
    providers = {
        pid: (p.state, tuple(p.held), tuple(p.consumed), p.layout.limits, p.active)
        for pid, p in state.providers.items()
    }
    reservations = {
        rid: (r.status, r.expires_at_ms, r.transaction) for rid, r in state.reservations.items()
    }
    pools = {pid: pool.free.count for pid, pool in state.pools.items()}
    return (state.clock_ms, providers, reservations, pools)


def _first_difference(mine: tuple[object, ...], theirs: tuple[object, ...]) -> str:
    names = ("clock", "providers", "reservations", "pools")
    for name, a, b in zip(names, mine, theirs, strict=True):
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                if a.get(key) != b.get(key):
                    return f"{name} {key}: writer {a.get(key)}, once {b.get(key)}"
        return f"{name}: writer {a}, once {b}"
    return "?"
