"""Server groups' partition under random logs: memberships claimed alone and
in transactions (committed, aborted, wounded, expired), released, groups
deleted and created again, cut into random batches. After every record a hard
group's rule holds (affinity: one provider; anti-affinity: at most
``max_server_per_host`` on each); after every commit the state loaded from
the view equals the live one and decides the rest of the log alike."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.placement_gabbits import memory_dir
from projections.batch import Applied, Batch
from projections.projector import apply
from projections.state import PartitionState
from projections.view.engine import make_engine
from projections.view.loader import load_state
from projections.view.tables import metadata
from projections.view.writer import ViewWriter
from schemas.events import (
    Claim,
    ClaimSet,
    ClaimSpec,
    Event,
    Release,
    ReleaseConsumer,
    ServerGroupCreated,
    ServerGroupDeleted,
    Tick,
    TransactionDecision,
    TransactionRef,
)
from schemas.outcomes import Code, Kind
from tests.contracts.view_contract import _assert_same_state

GROUPS = {"aff": ("affinity", None), "anti": ("anti-affinity", 2), "one": ("anti-affinity", None)}
OWNERS = {"aff": "p", "anti": None, "one": "q"}
"""Each group's project (None: shared); members claim for p or q."""
PROJECTS = ["p", "q"]
"""A single claim's project."""
HOSTS = ["h1", "h2", "h3"]
KEY = "k"  # one partition: every group and member lives in it


KINDS = ["claim", "claim", "set", "set", "decide", "release", "drop", "delete", "create", "tick"]


def _spec(rid: str, gid: str, host: str, project: str = "p") -> ClaimSpec:
    return ClaimSpec(
        reservation_id=rid,
        consumer_id=f"c-{rid}",
        project_id=project,
        lease_ms=50,
        server_group=gid,
        group_host=host,
    )


@st.composite
def logs(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = []
    for gid, (policy, most) in GROUPS.items():
        events.append(
            ServerGroupCreated(
                event_id=f"mk-{gid}",
                ts_ms=0,
                partition_key=gid,
                group_id=gid,
                policy=policy,  # type: ignore[arg-type]
                max_server_per_host=most,
                project_id=OWNERS[gid],
            )
        )
    rids: list[str] = []
    txns: list[str] = []
    ts = 0
    for k in range(draw(st.integers(1, 40))):
        ts += draw(st.sampled_from([0, 0, 1, 10, 30]))
        kind = draw(st.sampled_from(KINDS))
        gid = draw(
            st.sampled_from([*sorted(GROUPS), "nope"] if kind == "claim" else sorted(GROUPS))
        )
        eid = f"e{k}"
        if kind == "claim":
            rid = f"r{k}"
            rids.append(rid)
            spec = _spec(rid, gid, draw(st.sampled_from(HOSTS)), draw(st.sampled_from(PROJECTS)))
            events.append(Claim(event_id=eid, ts_ms=ts, partition_key=gid, **spec.__dict__))
        elif kind == "set":
            size = draw(st.integers(1, 3))
            specs = tuple(
                # its group's project: transactions race, none refused for its project
                _spec(f"r{k}.{i}", gid, draw(st.sampled_from(HOSTS)), OWNERS[gid] or "p")
                for i in range(size)
            )
            rids.extend(s.reservation_id for s in specs)
            txn = None
            if draw(st.booleans()):
                txns.append(f"t{k}")
                txn = TransactionRef(
                    transaction_id=f"t{k}",
                    priority=draw(st.integers(0, 5)),
                    deadline_ms=ts + draw(st.sampled_from([5, 100])),
                )
            events.append(
                ClaimSet(
                    event_id=eid,
                    ts_ms=ts,
                    partition_key=gid,
                    claims=specs,
                    atomic=draw(st.booleans()),
                    transaction=txn,
                )
            )
        elif kind == "decide" and txns:
            events.append(
                TransactionDecision(
                    event_id=eid,
                    ts_ms=ts,
                    partition_key=KEY,
                    transaction_id=draw(st.sampled_from(txns)),
                    commit=draw(st.booleans()),
                )
            )
        elif kind == "release" and rids:
            rid = draw(st.sampled_from(rids))
            events.append(Release(event_id=eid, ts_ms=ts, partition_key=KEY, reservation_id=rid))
        elif kind == "drop" and rids:
            consumer = f"c-{draw(st.sampled_from(rids))}"
            events.append(
                ReleaseConsumer(event_id=eid, ts_ms=ts, partition_key=KEY, consumer_id=consumer)
            )
        elif kind == "create":
            policy = draw(st.sampled_from(["affinity", "anti-affinity", "soft-affinity"]))
            most = draw(st.sampled_from([None, 2])) if policy == "anti-affinity" else None
            events.append(
                ServerGroupCreated(
                    event_id=eid,
                    ts_ms=ts,
                    partition_key=gid,
                    group_id=gid,
                    policy=policy,  # type: ignore[arg-type]
                    max_server_per_host=most,
                    project_id=OWNERS[gid],
                )
            )
        elif kind == "delete":
            events.append(
                ServerGroupDeleted(event_id=eid, ts_ms=ts, partition_key=gid, group_id=gid)
            )
            policy, most = GROUPS[gid]
            events.append(
                ServerGroupCreated(
                    event_id=f"{eid}.again",
                    ts_ms=ts,
                    partition_key=gid,
                    group_id=gid,
                    policy=policy,  # type: ignore[arg-type]
                    max_server_per_host=most,
                    project_id=OWNERS[gid],
                )
            )
        else:
            events.append(Tick(event_id=eid, ts_ms=ts, partition_key=KEY))
    return events


def _assert_rules_hold(state: PartitionState) -> None:
    """Every hard group's rule, counted from the active memberships themselves."""
    hosts: dict[str, dict[str, int]] = {gid: {} for gid in state.groups}
    for r in state.reservations.values():
        if r.membership is not None:
            gid, host = r.membership
            assert gid in state.groups, f"{r.reservation_id} is a member of a deleted group"
            owner = state.groups[gid].project_id
            assert owner in (None, r.project_id), f"{r.reservation_id} joined {owner}'s {gid}"
            hosts[gid][host] = hosts[gid].get(host, 0) + 1
    for gid, group in state.groups.items():
        assert group.hosts == hosts[gid]
        assert group.project_id == OWNERS[gid]
        if group.policy == "affinity":
            assert len(hosts[gid]) <= 1, (gid, hosts[gid])
        elif group.policy == "anti-affinity":
            assert all(n <= group.max_server_per_host for n in hosts[gid].values()), hosts[gid]


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(logs(), st.data())
def test_hard_rules_hold_and_the_view_is_an_exact_checkpoint(
    events: list[Event], data: st.DataObject
) -> None:
    # one partition (partitions=1): every key is in it
    fresh = PartitionState(0, 1)
    expected = []
    for offset, event in enumerate(events):
        expected.append(apply(fresh, offset, event))
        _assert_rules_hold(fresh)
    inner = st.integers(1, len(events) - 1)
    cuts = [*sorted(data.draw(st.sets(inner, max_size=6), label="cuts")), len(events)]
    # on tmpfs: a checkpoint's contents are checked here, not its durability
    with tempfile.TemporaryDirectory(dir=memory_dir()) as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'view.db'}", writer=True)
        try:
            metadata.create_all(engine)
            view = ViewWriter(engine)
            live = PartitionState(0, 1)
            start = 0
            for end in cuts:
                batch = Batch(0, start, end)
                for offset in range(start, end):
                    event = events[offset]
                    batch.applied.append(Applied(offset, event, apply(live, offset, event)))
                assert view.commit(live, batch)
                with engine.connect() as conn:
                    loaded, next_offset = load_state(conn, 0, 1)
                assert next_offset == end
                _assert_same_state(loaded, live)
                rest = [apply(loaded, offset, e) for offset, e in enumerate(events[end:], end)]
                assert rest == expected[end:]
                start = end
        finally:
            engine.dispose()


def test_the_generator_reaches_every_group_decision() -> None:
    seen: set[object] = set()

    @settings(max_examples=150, deadline=None, derandomize=True, database=None)
    @given(logs())
    def collect(events: list[Event]) -> None:
        state = PartitionState(0, 1)
        for offset, event in enumerate(events):
            for outcome in apply(state, offset, event):
                seen.add(outcome.kind)
                seen.update(reason.code for reason in outcome.reasons)

    collect()
    wanted = {
        Code.GROUP_NOT_FOUND,
        Code.AFFINITY_CONFLICT,
        Code.ANTI_AFFINITY_CONFLICT,
        Code.GROUP_EXISTS,
        Code.ALREADY_DEFINED,
        Code.GROUP_OF_ANOTHER_PROJECT,
        Code.WOUNDED,
        Kind.PREPARED,
        Kind.COMMITTED,
        Kind.ABORTED,
        Kind.EXPIRED,
        Kind.RELEASED,
    }
    assert wanted <= seen, sorted(map(str, wanted - seen))
