"""Property tests of the projector over random interleavings of events.

Three independent checks, each over a few hundred generated logs (and a guard
that the generator reaches every outcome kind and reason code):

* invariants, checked after every record: the projector's state must agree
  with a model built only from the events and the outcomes it emitted;
* replay: the same log, encoded and decoded again, decides identically;
* a naive reference projector (slow, obviously correct: usage is recomputed by
  summing the active reservations every time) decides every record the same
  way and ends every record with the same decision state.

The partition is partition 0 of 2, so some providers (``n2``) belong elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.partitioner import partition_for
from projections.projector import apply
from projections.state import CONSUMED, HELD, PartitionState
from schemas.codec import decode_event, encode_event
from schemas.events import (
    PLACEMENT_EVENTS,
    AggregateDefined,
    AggregateMemberAdded,
    AggregateMemberRemoved,
    Claim,
    ClaimSet,
    Consume,
    Event,
    Inventory,
    InventorySet,
    MetricsReported,
    PoolDefined,
    ProviderDescribed,
    ProviderRegistered,
    ProviderRetired,
    ProviderStateName,
    ProviderStateSet,
    Release,
    ReleaseConsumer,
    Renew,
    ServerGroupCreated,
    ServerGroupDeleted,
    Tick,
    TransactionDecision,
)
from schemas.outcomes import Code, Kind, Outcome
from tests import builders as b

PARTITION, PARTITIONS = 0, 2
PIDS = ("p0", "p1", "p2", "n2")  # n2 lives in partition 1
CLAIM_PIDS = (*PIDS, "ghost")
RIDS = tuple(f"r{i}" for i in range(12))
CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")
GROUPS = ("g0", "g1")
TAGS = ("a", "b", "c")

assert [partition_for(pid.encode(), PARTITIONS) for pid in PIDS] == [0, 0, 0, 1]

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- generating logs ---------------------------------------------------------
# A log is decoded from bytes hypothesis draws in one go: one fixed-size chunk
# per event, each byte one choice (0 always the plainest). A draw per choice
# would be several times slower; this way shrinking still works (fewer events,
# smaller bytes mean simpler events) and the suite stays fast.

T = TypeVar("T")
CHUNK = 32
"""Bytes per event: more than the biggest event (a three-item claim) consumes."""


class Source:
    """Choices read from a chunk of bytes; past its end every choice is 0."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        value = self.data[self.pos] if self.pos < len(self.data) else 0
        self.pos += 1
        return value

    def pick(self, options: Sequence[T]) -> T:
        return options[self.byte() % len(options)]

    def subset(self, options: Sequence[T]) -> list[T]:
        bits = self.byte()
        return [option for i, option in enumerate(options) if bits >> i & 1]


_PRESENT = {
    "VCPU": (True,) * 15 + (False,),
    "MEMORY_MB": (True, True, False),
    "DISK_GB": (True, False),
}


def decode_inventories(source: Source) -> dict[str, Inventory]:
    classes = [rc for rc in CLASSES if source.pick(_PRESENT[rc])]
    result: dict[str, Inventory] = {}
    for rc in classes:
        total = source.pick((8, 16, 8, 4, 12, 2, 6, 10, 1, 0))
        min_unit = source.pick((1,) * 7 + (2,))
        result[rc] = Inventory(
            total=total,
            reserved=min(total, source.pick((0, 0, 0, 1, 3))),
            allocation_ratio=source.pick((1.0, 1.0, 0.5, 1.5, 2.0, 3.0)),
            min_unit=min_unit,
            max_unit=min_unit + source.pick((1000, 1000, 4)),
            step_size=source.pick((1,) * 7 + (2,)),
        )
    return result


def decode_resources(source: Source) -> dict[str, int]:
    classes = ["VCPU"]
    if source.pick((False, False, False, True)):
        classes = source.subset(CLASSES) or classes
        if source.pick((False,) * 7 + (True,)):
            classes.append("GPU")
    return {rc: source.pick((1, 1, 1, 2, 2, 3, 4, 6)) for rc in classes}


CLAIM_PIDS_WEIGHTED = ("p0", "p1", "p2") * 10 + ("n2", "ghost")
PIDS_WEIGHTED = ("p0", "p1", "p2") * 3 + ("n2",)
NO_TAGS: list[str] = []
OPS = (
    ["claim"] * 16
    + ["multi"] * 4
    + ["duplicate"] * 3
    + ["consume"] * 6
    + ["release"] * 6
    + ["renew"] * 4
    + ["tick"] * 4
    + ["inventory"] * 3
    + ["state"] * 2
    + ["register", "retire"]
    + ["describe", "report", "report"]
)
STATES: tuple[ProviderStateName, ...] = ("enabled",) * 3 + ("disabled", "offline", "evacuating")
DELTAS = (0, 0, 1, 10, 50, 100, 100, 200, 300, 1000, -1, -100, -300)


def decode_log(setup: bytes, chunks: Sequence[bytes]) -> list[Event]:
    """Providers set up (mostly), then one event per chunk: an interleaving of
    everything, with timestamps that sometimes go back."""
    events: list[Event] = []
    claims: list[Claim] = []
    ts = 0
    source = Source(setup)
    for pid in PIDS:
        if source.pick((True,) * 7 + (False,)):
            events.append(b.register(pid, ts=ts))
            events.append(b.inventory(pid, decode_inventories(source), ts=ts))

    for chunk in chunks:
        source = Source(chunk)
        op = source.pick(OPS)
        ts = max(0, ts + source.pick(DELTAS))
        rid = source.pick(RIDS)
        known: bool = source.pick((True, True, True, False))
        if claims and known:
            # mostly an id already claimed (and recently), so consume, release
            # and renew find something
            pool: Sequence[Claim] = source.pick((claims, claims[-3:]))
            rid = source.pick(pool).reservation_id
        event: Event
        if op in ("claim", "multi"):
            if op == "claim":
                items = {source.pick(CLAIM_PIDS_WEIGHTED): decode_resources(source)}
            else:
                pids = dict.fromkeys(source.pick(CLAIM_PIDS_WEIGHTED) for _ in range(3))
                items = {pid: decode_resources(source) for pid in pids}
            new_claim = b.claim_items(
                source.pick((f"r{len(claims)}",) * 3 + (rid,)),
                items,
                ts=ts,
                lease_ms=source.pick((1000, 1000, 1, 100, 300, 5000)),
                group=source.pick((None, None, *GROUPS)),
                tags=source.subset(TAGS),
                with_tags=source.pick((NO_TAGS,) * 5 + (source.subset(TAGS),)),
                without_tags=source.pick((NO_TAGS,) * 5 + (source.subset(TAGS),)),
                consumer=source.pick(("c0", "c1")),
            )
            claims.append(new_claim)
            event = new_claim
        elif op == "duplicate" and claims:
            event = b.with_ts(source.pick(claims), ts)
        elif op == "consume":
            event = b.consume(rid, ts=ts)
        elif op == "release":
            event = b.release(rid, ts=ts)
        elif op == "renew":
            event = b.renew(rid, source.pick((1000, 1, 200)), ts=ts)
        elif op == "inventory":
            event = b.inventory(source.pick(PIDS_WEIGHTED), decode_inventories(source), ts=ts)
        elif op == "state":
            name = source.pick(STATES)
            event = b.set_state(source.pick(PIDS_WEIGHTED), name, ts=ts)
        elif op == "register":
            pid = source.pick(PIDS_WEIGHTED)
            event = b.register(pid, source.pick((pid, f"{pid}-renamed")), ts=ts)
        elif op == "retire" and source.pick((True, False, False)):
            event = b.retire(source.pick(PIDS_WEIGHTED), ts=ts)
        elif op == "describe":
            pid = source.pick((*PIDS_WEIGHTED, "ghost"))
            event = b.describe(pid, availability_zone=source.pick(("az0", "az1")), ts=ts)
        elif op == "report":
            pid = source.pick((*PIDS_WEIGHTED, "ghost"))
            metrics = source.pick((None, {"cpu": float(source.byte())}))
            # a report's time of its own, sometimes older than the last
            event = b.report(
                pid, metrics, ts=max(0, ts - source.pick(DELTAS)), io_ops=source.byte()
            )
        else:
            event = b.tick(ts)
        events.append(event)
    return events


@st.composite
def logs(draw: st.DrawFn) -> list[Event]:
    length = draw(st.integers(1, 60))
    setup = draw(st.binary(min_size=80, max_size=80))
    data = draw(st.binary(min_size=CHUNK * length, max_size=CHUNK * length))
    return decode_log(setup, [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)])


def fresh() -> PartitionState:
    return PartitionState(PARTITION, PARTITIONS)


# --- invariants, from the outcomes only ------------------------------------


@dataclass
class Active:
    items: dict[str, dict[str, int]]
    consumed: bool
    group: str | None


@dataclass
class OutcomeModel:
    """What the outcomes say happened; knows nothing of the projector's state."""

    capacities: dict[str, dict[str, int]] = field(default_factory=dict)
    active: dict[str, Active] = field(default_factory=dict)

    def follow(self, event: Event, outcomes: list[Outcome]) -> None:
        for outcome in outcomes:
            kind, subject = outcome.kind, outcome.subject
            if kind == Kind.ACCEPTED:
                assert isinstance(event, Claim)
                assert subject == event.reservation_id
                assert subject not in self.active, f"{subject} accepted twice while active"
                self.active[subject] = Active(
                    {item.provider_id: dict(item.resources) for item in event.items},
                    False,
                    event.anti_affinity_group,
                )
            elif kind == Kind.CONSUMED:
                assert isinstance(event, Consume)
                assert not self.active[subject].consumed
                self.active[subject].consumed = True
            elif kind == Kind.RELEASED:
                assert isinstance(event, Release)
                del self.active[subject]
            elif kind == Kind.EXPIRED:
                assert not self.active.pop(subject).consumed, "a consumed reservation expired"
            elif kind == Kind.APPLIED:
                if isinstance(event, ProviderRegistered):
                    self.capacities.setdefault(subject, {})
                elif isinstance(event, ProviderRetired):
                    del self.capacities[subject]
                elif isinstance(event, InventorySet):
                    self.capacities[subject] = {
                        rc: int((inv.total - inv.reserved) * inv.allocation_ratio)
                        for rc, inv in event.inventories.items()
                    }

    def check(self, state: PartitionState) -> None:
        assert set(state.providers) == set(self.capacities)
        assert set(state.reservations) == set(self.active)
        for rid, active in self.active.items():
            assert state.reservations[rid].status == (CONSUMED if active.consumed else HELD)
        for pid, capacities in self.capacities.items():
            provider = state.providers[pid]
            assert provider.layout.classes == tuple(sorted(capacities))
            for rc, capacity in capacities.items():
                i = provider.layout.index[rc]
                held = sum(
                    a.items.get(pid, {}).get(rc, 0) for a in self.active.values() if not a.consumed
                )
                consumed = sum(
                    a.items.get(pid, {}).get(rc, 0) for a in self.active.values() if a.consumed
                )
                assert 0 <= held == provider.held[i], (pid, rc)
                assert 0 <= consumed == provider.consumed[i], (pid, rc)
                assert held + consumed <= capacity, (pid, rc)
                assert provider.layout.limits[i].capacity == capacity
            on_provider = [a for a in self.active.values() if pid in a.items]
            groups = [a.group for a in on_provider if a.group is not None]
            assert len(groups) == len(set(groups)), f"anti-affinity broken on {pid}"
            assert provider.active == len(on_provider)
        # no active reservation names a provider that is gone
        for active in self.active.values():
            assert set(active.items) <= set(self.capacities)


@SETTINGS
@given(logs())
def test_invariants_hold_after_every_record(events: list[Event]) -> None:
    state = fresh()
    model = OutcomeModel()
    last_clock = 0
    for offset, event in enumerate(events):
        outcomes = apply(state, offset, event)
        assert [o.seq for o in outcomes] == list(range(len(outcomes)))
        assert all(o.clock_ms == state.clock_ms >= last_clock for o in outcomes)
        last_clock = state.clock_ms
        model.follow(event, outcomes)
        model.check(state)
        # nothing held is overdue once a record has been decided
        assert all(
            r.expires_at_ms >= state.clock_ms
            for r in state.reservations.values()
            if r.status == HELD
        )


# --- replay --------------------------------------------------------------------


@SETTINGS
@given(logs())
def test_replay_of_the_encoded_log_decides_identically(events: list[Event]) -> None:
    first = fresh()
    original = [apply(first, offset, event) for offset, event in enumerate(events)]

    decoded = [decode_event(encode_event(event)) for event in events]
    assert decoded == events
    second = fresh()
    replayed = [apply(second, offset, event) for offset, event in enumerate(decoded)]

    assert replayed == original
    assert second.clock_ms == first.clock_ms
    assert sorted(second.reservations) == sorted(first.reservations)
    for pid, provider in first.providers.items():
        other = second.providers[pid]
        assert (other.layout, other.held, other.consumed) == (
            provider.layout,
            provider.held,
            provider.consumed,
        )


# --- a naive reference projector ----------------------------------------------

Decided = tuple[
    str, str, tuple[tuple[Code, str | None, str | None, int | None, int | None], ...], int | None
]


@dataclass
class RefProvider:
    name: str
    state: str = "enabled"
    inventories: dict[str, Inventory] = field(default_factory=dict)
    zone: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    metrics_at: int | None = None
    io_ops: int = 0


@dataclass
class RefReservation:
    items: dict[str, dict[str, int]]
    consumed: bool
    expires_at: int
    content: object
    group: str | None
    tags: frozenset[str]


def _content(claim: Claim) -> object:
    return (
        claim.consumer_id,
        claim.project_id,
        tuple((item.provider_id, tuple(sorted(item.resources.items()))) for item in claim.items),
        claim.lease_ms,
        claim.anti_affinity_group,
        claim.tags,
        claim.require_with_tags,
        claim.require_without_tags,
    )


@dataclass
class Reference:
    """The rules, written the slow and obvious way."""

    partition: int
    partitions: int
    clock: int = 0
    providers: dict[str, RefProvider] = field(default_factory=dict)
    active: dict[str, RefReservation] = field(default_factory=dict)
    finished: dict[str, object] = field(default_factory=dict)

    def capacity(self, pid: str, rc: str) -> int:
        inv = self.providers[pid].inventories[rc]
        return int((inv.total - inv.reserved) * inv.allocation_ratio)

    def used(self, pid: str, rc: str, consumed: bool) -> int:
        return sum(
            r.items.get(pid, {}).get(rc, 0) for r in self.active.values() if r.consumed == consumed
        )

    def on(self, pid: str) -> list[RefReservation]:
        return [r for r in self.active.values() if pid in r.items]

    def missing(self, pid: str) -> tuple[Code, str | None, None, None, None]:
        if partition_for(pid.encode(), self.partitions) != self.partition:
            return (Code.PROVIDER_WRONG_PARTITION, pid, None, None, None)
        return (Code.PROVIDER_NOT_FOUND, pid, None, None, None)

    def apply(self, event: Event) -> list[Decided]:
        self.clock = max(self.clock, event.ts_ms)
        out: list[Decided] = []
        due = sorted(
            (r.expires_at, rid)
            for rid, r in self.active.items()
            if not r.consumed and r.expires_at < self.clock
        )
        for expires_at, rid in due:
            self.finished[rid] = self.active.pop(rid).content
            out.append((Kind.EXPIRED, rid, (), expires_at))
        out.extend(self.decide(event))
        return out

    def decide(self, event: Event) -> list[Decided]:
        if isinstance(event, Claim):
            return [self.claim(event)]
        if isinstance(event, Consume | Release | Renew):
            return [self.reservation_event(event)]
        if isinstance(event, Tick):
            return []
        if isinstance(event, ClaimSet | TransactionDecision | PoolDefined | ReleaseConsumer):
            raise NotImplementedError("this reference models single claims only")
        if isinstance(event, AggregateDefined | AggregateMemberAdded | AggregateMemberRemoved):
            raise NotImplementedError("tests/test_aggregates.py models aggregates")
        if isinstance(event, PLACEMENT_EVENTS):
            raise NotImplementedError("tests/test_placement_model.py models Placement's")
        if isinstance(event, ServerGroupCreated | ServerGroupDeleted):
            raise NotImplementedError("tests/test_server_groups.py models server groups")
        pid = event.provider_id
        if isinstance(event, ProviderDescribed | MetricsReported):
            return [self.described(event)]
        if isinstance(event, ProviderRegistered):
            if pid in self.providers:
                if self.providers[pid].name == event.name:
                    return [
                        (Kind.NOOP, pid, ((Code.ALREADY_REGISTERED, pid, None, None, None),), None)
                    ]
                self.providers[pid].name = event.name
                return [(Kind.APPLIED, pid, (), None)]
            if partition_for(pid.encode(), self.partitions) != self.partition:
                return [(Kind.REJECTED, pid, (self.missing(pid),), None)]
            self.providers[pid] = RefProvider(event.name)
            return [(Kind.APPLIED, pid, (), None)]
        if pid not in self.providers:
            return [(Kind.REJECTED, pid, (self.missing(pid),), None)]
        provider = self.providers[pid]
        if isinstance(event, ProviderRetired):
            if self.on(pid):
                return [
                    (Kind.REJECTED, pid, ((Code.PROVIDER_IN_USE, pid, None, None, None),), None)
                ]
            del self.providers[pid]
        elif isinstance(event, InventorySet):
            reasons = []
            for rc in sorted(provider.inventories):
                used = self.used(pid, rc, False) + self.used(pid, rc, True)
                new = event.inventories.get(rc)
                capacity = int((new.total - new.reserved) * new.allocation_ratio) if new else 0
                if used > capacity:
                    reasons.append((Code.INVENTORY_IN_USE, pid, rc, used, capacity))
            if reasons:
                return [(Kind.REJECTED, pid, tuple(reasons), None)]
            provider.inventories = dict(event.inventories)
        elif isinstance(event, ProviderStateSet):
            provider.state = event.state
        return [(Kind.APPLIED, pid, (), None)]

    def described(self, event: ProviderDescribed | MetricsReported) -> Decided:
        pid = event.provider_id
        ref = self.providers.get(pid)
        if ref is None:
            return (Kind.NOOP, pid, (self.missing(pid),), None)
        if isinstance(event, ProviderDescribed):
            ref.zone = event.availability_zone or ref.zone
            return (Kind.APPLIED, pid, (), None)
        if ref.metrics_at is not None and event.ts_ms < ref.metrics_at:
            return (Kind.NOOP, pid, ((Code.OLDER_REPORT, pid, None, None, None),), None)
        ref.metrics_at = event.ts_ms
        ref.metrics = ref.metrics if event.metrics is None else dict(event.metrics)
        ref.io_ops = ref.io_ops if event.num_io_ops is None else event.num_io_ops
        return (Kind.APPLIED, pid, (), None)

    def claim(self, claim: Claim) -> Decided:
        rid = claim.reservation_id
        if rid in self.active or rid in self.finished:
            known = self.active[rid].content if rid in self.active else self.finished[rid]
            if known == _content(claim):
                return (Kind.NOOP, rid, ((Code.DUPLICATE, None, None, None, None),), None)
            return (
                Kind.REJECTED,
                rid,
                ((Code.RESERVATION_ID_CONFLICT, None, None, None, None),),
                None,
            )
        reasons: list[tuple[Code, str | None, str | None, int | None, int | None]] = []
        for item in claim.items:
            pid = item.provider_id
            if pid not in self.providers:
                reasons.append(self.missing(pid))
                continue
            provider = self.providers[pid]
            if provider.state != "enabled":
                reasons.append((Code.PROVIDER_NOT_ENABLED, pid, None, None, None))
                continue
            fits = True
            for rc, amount in sorted(item.resources.items()):
                inv = provider.inventories.get(rc)
                if inv is None:
                    reasons.append((Code.RESOURCE_CLASS_NOT_PROVIDED, pid, rc, amount, 0))
                    fits = False
                    continue
                free = self.capacity(pid, rc) - self.used(pid, rc, False) - self.used(pid, rc, True)
                code = None
                if amount < inv.min_unit:
                    code = Code.BELOW_MIN_UNIT
                elif amount > inv.max_unit:
                    code = Code.ABOVE_MAX_UNIT
                elif amount % inv.step_size != 0:
                    code = Code.NOT_A_STEP_MULTIPLE
                elif amount > free:
                    code = Code.INSUFFICIENT_CAPACITY
                if code is not None:
                    reasons.append((code, pid, rc, amount, free))
                    fits = False
            if not fits:
                continue
            here = self.on(pid)
            group = claim.anti_affinity_group
            if group is not None and any(r.group == group for r in here):
                reasons.append((Code.ANTI_AFFINITY_CONFLICT, pid, None, None, None))
            present = set().union(*(r.tags for r in here))
            for tag in sorted(claim.require_with_tags):
                if tag not in present:
                    reasons.append((Code.REQUIRED_TAG_ABSENT, pid, None, None, None))
            for tag in sorted(claim.require_without_tags):
                if tag in present:
                    reasons.append((Code.FORBIDDEN_TAG_PRESENT, pid, None, None, None))
        if reasons:
            return (Kind.REJECTED, rid, tuple(reasons), None)
        expires_at = self.clock + claim.lease_ms
        self.active[rid] = RefReservation(
            {item.provider_id: dict(item.resources) for item in claim.items},
            False,
            expires_at,
            _content(claim),
            claim.anti_affinity_group,
            claim.tags,
        )
        return (Kind.ACCEPTED, rid, (), expires_at)

    def reservation_event(self, event: Consume | Release | Renew) -> Decided:
        rid = event.reservation_id
        if rid not in self.active:
            code = Code.ALREADY_FINAL if rid in self.finished else Code.UNKNOWN_RESERVATION
            return (Kind.NOOP, rid, ((code, None, None, None, None),), None)
        reservation = self.active[rid]
        if isinstance(event, Consume):
            if reservation.consumed:
                return (Kind.NOOP, rid, ((Code.ALREADY_CONSUMED, None, None, None, None),), None)
            reservation.consumed = True
            return (Kind.CONSUMED, rid, (), None)
        if isinstance(event, Release):
            self.finished[rid] = self.active.pop(rid).content
            return (Kind.RELEASED, rid, (), None)
        if reservation.consumed:
            return (Kind.NOOP, rid, ((Code.NOT_HELD, None, None, None, None),), None)
        reservation.expires_at = max(reservation.expires_at, self.clock + event.lease_ms)
        return (Kind.RENEWED, rid, (), reservation.expires_at)

    def check(self, state: PartitionState) -> None:
        """The projector's decision state equals the reference's."""
        assert state.clock_ms == self.clock
        assert set(state.providers) == set(self.providers)
        for pid, ref in self.providers.items():
            provider = state.providers[pid]
            assert (provider.name, provider.state) == (ref.name, ref.state)
            assert provider.description.availability_zone == ref.zone
            metrics = provider.metrics
            assert (metrics.values, metrics.at_ms) == (ref.metrics, ref.metrics_at)
            assert metrics.num_io_ops == ref.io_ops
            assert provider.layout.classes == tuple(sorted(ref.inventories))
            for rc in ref.inventories:
                i = provider.layout.index[rc]
                assert provider.layout.limits[i].capacity == self.capacity(pid, rc)
                assert provider.held[i] == self.used(pid, rc, False)
                assert provider.consumed[i] == self.used(pid, rc, True)
                assert provider.free(rc) >= 0
        assert set(state.reservations) == set(self.active)
        for rid, ref_reservation in self.active.items():
            reservation = state.reservations[rid]
            assert reservation.status == (CONSUMED if ref_reservation.consumed else HELD)
            assert reservation.expires_at_ms == ref_reservation.expires_at
            assert reservation.group == ref_reservation.group
            assert reservation.tags == ref_reservation.tags
            assert {p.provider_id: dict(a) for p, a in reservation.items} == ref_reservation.items
        assert set(state.finished) == set(self.finished)


def _decided(outcome: Outcome) -> Decided:
    reasons = tuple(
        (r.code, r.provider_id, r.resource_class, r.requested, r.available) for r in outcome.reasons
    )
    return (outcome.kind, outcome.subject, reasons, outcome.expires_at_ms)


@settings(SETTINGS, max_examples=300)
@given(logs())
def test_projector_matches_the_naive_reference(events: list[Event]) -> None:
    state = fresh()
    reference = Reference(PARTITION, PARTITIONS)
    for offset, event in enumerate(events):
        got = [_decided(outcome) for outcome in apply(state, offset, event)]
        assert got == reference.apply(event), f"record {offset}: {event!r}"
        reference.check(state)


POOL_AND_TRANSACTION_CODES = {
    Code.POOL_NOT_FOUND,
    Code.POOL_WRONG_PARTITION,
    Code.IDENTIFIER_NOT_IN_POOL,
    Code.IDENTIFIER_TAKEN,
    Code.POOL_EXHAUSTED,
    Code.POOL_IN_USE,
    Code.BATCH_MEMBER_REJECTED,
    Code.TRANSACTION_DEADLINE_PASSED,
    Code.WOUNDED,
    Code.NO_PENDING_CLAIMS,
}
"""Reached by the generator of tests/test_transaction_properties.py instead."""

PROJECT_CODES = {Code.PROJECT_MISMATCH}
"""Events published by a project: tests/test_projects.py."""

AGGREGATE_CODES = {Code.AGGREGATE_NOT_FOUND, Code.ALREADY_MEMBER, Code.NOT_A_MEMBER}
"""Reached by tests/test_aggregates.py, whose generator has aggregates change
capacity (the outcome model here reads capacity from inventories alone)."""

PLACEMENT_CODES = {code for code in Code if code.name.startswith("PLACEMENT_")}
"""OpenStack Placement's refusals: tests/test_placement_model.py."""


GROUP_CODES = {
    Code.GROUP_NOT_FOUND,
    Code.AFFINITY_CONFLICT,
    Code.GROUP_EXISTS,
    Code.ALREADY_DEFINED,
    Code.GROUP_OF_ANOTHER_PROJECT,
}
"""Reached by tests/test_server_group_properties.py."""

TOPOLOGY_CODES = {
    Code.NUMA_CELL_NOT_DESCRIBED,
    Code.TOPOLOGY_IN_USE,
    Code.TOPOLOGY_TAKEN,
    Code.TOPOLOGY_NOT_PROVIDED,
}
"""A description's NUMA cells and PCI devices, and the fits claims carry:
tests/test_numa_topology.py and tests/test_numa_claims.py (this generator
describes no topology and its claims carry no fit)."""


def test_the_generator_reaches_the_interesting_cases() -> None:
    """Guard against a generator that silently stops exercising the rules."""
    seen: set[object] = set()

    @settings(SETTINGS, max_examples=200)
    @given(logs())
    def collect(events: list[Event]) -> None:
        state = fresh()
        for offset, event in enumerate(events):
            for outcome in apply(state, offset, event):
                seen.add(outcome.kind)
                seen.update(reason.code for reason in outcome.reasons)

    collect()
    wanted = {
        Kind.ACCEPTED,
        Kind.REJECTED,
        Kind.CONSUMED,
        Kind.RELEASED,
        Kind.EXPIRED,
        Kind.RENEWED,
        Kind.NOOP,
        Kind.APPLIED,
        *(
            set(Code)
            - POOL_AND_TRANSACTION_CODES
            - PROJECT_CODES
            - AGGREGATE_CODES
            - PLACEMENT_CODES
            - GROUP_CODES
            - TOPOLOGY_CODES
        ),
    }
    assert wanted <= seen, sorted(map(str, wanted - seen))
