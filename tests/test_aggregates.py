"""Aggregates as first-class objects: defined with metadata in every
partition, joined and left by providers, their allocation ratios decided
by each writer in its log order, their metadata read live by the engine."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from berth.api import Api
from berth.api.credentials import Credentials, digest
from berth.app import App, Settings
from berth.client import Publisher
from berth.replay import replay
from consumers.partition_writer import catch_up_all
from consumers.snapshot_source import LiveSnapshot, snapshot_from_view
from projections.batch import Applied, Batch
from projections.projector import apply
from projections.view.engine import make_engine
from projections.view.loader import load_state
from projections.view.tables import inventories, metadata
from projections.view.writer import ViewWriter
from scheduling.filters.availability_zone import AvailabilityZoneFilter
from scheduling.filters.base import Context
from scheduling.model import Request
from schemas.events import (
    AggregateDefined,
    AggregateMemberAdded,
    AggregateMemberRemoved,
    Claim,
    Event,
)
from schemas.outcomes import Kind
from tests.builders import aggregates, briefs, claim, fresh_state, inventory, provider, release, run
from tests.conftest import Cli
from tests.contracts.view_contract import _assert_same_state
from tests.http_calls import call, deciding, serving
from tests.processes import berth_running

NOW_MS = 10**12


def define(aid: str, ts: int = 0, **meta: str) -> AggregateDefined:
    return AggregateDefined(
        event_id=f"def-{aid}-{ts}-{sorted(meta.items())}",
        ts_ms=ts,
        partition_key="k",
        aggregate_id=aid,
        metadata=meta,
    )


def join(pid: str, aid: str, ts: int = 0) -> AggregateMemberAdded:
    return AggregateMemberAdded(
        event_id=f"join-{pid}-{aid}-{ts}",
        ts_ms=ts,
        partition_key=pid,
        provider_id=pid,
        aggregate_id=aid,
    )


def leave(pid: str, aid: str, ts: int = 0) -> AggregateMemberRemoved:
    return AggregateMemberRemoved(
        event_id=f"leave-{pid}-{aid}-{ts}",
        ts_ms=ts,
        partition_key=pid,
        provider_id=pid,
        aggregate_id=aid,
    )


def test_an_aggregates_ratio_is_what_the_writer_decides_claims_on() -> None:
    state = fresh_state()
    decided = run(
        [
            *provider("n1", VCPU=4),
            join("n1", "fast"),
            define("fast", cpu_allocation_ratio="2.0"),
            join("n1", "fast"),
            join("n1", "fast"),
            claim("r1", "n1", VCPU=6),
            claim("r2", "n1", VCPU=3),
            define("fast", cpu_allocation_ratio="1.0"),
            claim("r3", "n1", VCPU=1),
            release("r1"),
            leave("n1", "fast"),
            leave("n1", "fast"),
        ],
        state,
    )
    assert [briefs(o) for o in decided[2:]] == [
        "rejected n1 AGGREGATE_NOT_FOUND",
        "applied fast",
        "applied n1",
        "noop n1 ALREADY_MEMBER",
        "accepted r1 until 1000",
        "rejected r2 INSUFFICIENT_CAPACITY@VCPU=3/2",
        # the ratio falls below what n1 holds: applied, and said
        "applied fast INVENTORY_IN_USE@VCPU=6/4",
        "rejected r3 INSUFFICIENT_CAPACITY@VCPU=1/-2",
        "released r1",
        "applied n1",
        "noop n1 NOT_A_MEMBER",
    ]


def test_leaving_or_replacing_aggregates_below_what_is_held_is_refused() -> None:
    state = fresh_state()
    decided = run(
        [
            *provider("n1", VCPU=2),
            define("fast", vcpu_allocation_ratio="4"),
            join("n1", "fast"),
            claim("r1", "n1", VCPU=6),
            leave("n1", "fast"),
            aggregates("n1"),
            inventory("n1", VCPU=1),
            inventory("n1", VCPU=3),
        ],
        state,
    )
    assert [briefs(o) for o in decided[5:]] == [
        "rejected n1 INVENTORY_IN_USE@VCPU=6/2",
        "rejected n1 INVENTORY_IN_USE@VCPU=6/2",
        "rejected n1 INVENTORY_IN_USE@VCPU=6/4",
        "applied n1",
    ]
    assert state.providers["n1"].layout.limits[0].capacity == 12


def test_every_partition_applies_an_aggregate_and_the_engine_reads_it_live(
    tmp_path: Path,
) -> None:
    settings_ = Settings(data_dir=tmp_path / "data", partitions=4)
    with App(settings_) as app:
        live = LiveSnapshot(app.engine)
        edge = Publisher(app.log, app.settings.topics, clock_ms=lambda: NOW_MS)
        pids = [f"n{i}" for i in range(6)]
        edge.publish([e for pid in pids for e in provider(pid, ts=1, VCPU=4)])
        writers = app.writers()
        catch_up_all(writers)
        live()
        where = edge.define_aggregate(
            "az9", {"availability_zone": "az9", "cpu_allocation_ratio": "3"}
        )
        assert sorted(p for p, _ in where) == [0, 1, 2, 3]
        edge.publish([join(pid, "az9", ts=2) for pid in pids[:4]])
        catch_up_all(writers)
        snapshot = live()
        assert snapshot_from_view(app.engine).aggregates == snapshot.aggregates
        with app.engine.connect() as conn:
            capacity = {
                r.provider_id: (r.capacity, r.allocation_ratio)
                for r in conn.execute(select(inventories))
            }
    assert snapshot.aggregates["az9"].metadata["availability_zone"] == "az9"
    assert capacity == {
        **{pid: (12, 1.0) for pid in pids[:4]},
        **{pid: (4, 1.0) for pid in pids[4:]},
    }
    ctx = Context(snapshot, Request("r", {"VCPU": 1}, availability_zone="az9"), snapshot.used)
    zone = AvailabilityZoneFilter()
    passing = [
        p.provider_id for row, p in enumerate(snapshot.providers) if not zone.reject(ctx, row)
    ]
    assert passing == pids[:4]
    result = replay(settings_, verify=True)
    assert result.divergence is None and result.verified == result.outcomes


KINDS = ["inventory", "define", "join", "leave", "claim", "release", "set"]


@st.composite
def logs(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = [*provider("n1", VCPU=4, MEMORY_MB=8), *provider("n2", VCPU=2)]
    ratios = st.sampled_from(["1", "2", "0.5", "4", "x", "-1"])
    for k in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(KINDS))
        pid = draw(st.sampled_from(["n1", "n2", "n9"]))
        aid = draw(st.sampled_from(["a", "b"]))
        if kind == "inventory":
            events.append(inventory(pid, VCPU=draw(st.sampled_from([1, 2, 4, 8]))))
        elif kind == "define":
            keys = draw(st.sets(st.sampled_from(["cpu_allocation_ratio", "vcpu_allocation_ratio"])))
            events.append(define(aid, ts=k, **{key: draw(ratios) for key in keys}))
        elif kind == "join":
            events.append(join(pid, aid, ts=k))
        elif kind == "leave":
            events.append(leave(pid, aid, ts=k))
        elif kind == "set":
            events.append(aggregates(pid, *draw(st.sets(st.sampled_from(["a", "b"])))))
        elif kind == "claim":
            events.append(claim(f"r{k}", pid, lease_ms=10**8, VCPU=draw(st.integers(1, 6))))
        else:
            events.append(release(f"r{draw(st.integers(0, k))}"))
    return events


NOVA = {"VCPU": "cpu_allocation_ratio", "MEMORY_MB": "ram_allocation_ratio"}


def _ratio(
    state_aggregates: dict[str, dict[str, str]], members: frozenset[str], rc: str, own: float
) -> float:
    """Nova's rule, written plainly: the least of the members' values, unless one is bad."""
    keys = {f"{rc.lower()}_allocation_ratio", NOVA.get(rc, "")}
    values = {
        state_aggregates[aid][key]
        for aid in members
        if aid in state_aggregates
        for key in keys
        if key in state_aggregates[aid]
    }
    try:
        parsed = [float(v) for v in values]
    except ValueError:
        return own
    if not parsed or any(not v > 0 for v in parsed):
        return own
    return min(parsed)


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(logs(), st.data())
def test_capacity_follows_the_aggregates_and_no_claim_goes_beyond_it(
    events: list[Event], data: st.DataObject
) -> None:
    state = fresh_state()
    expected = [apply(state, offset, event) for offset, event in enumerate(events)]
    live = fresh_state()
    cut = data.draw(st.integers(1, len(events)), label="cut")
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'view.db'}", writer=True)
        try:
            metadata.create_all(engine)
            for offset, event in enumerate(events):
                outcomes = apply(live, offset, event)
                if any(o.kind == Kind.ACCEPTED for o in outcomes):
                    assert isinstance(event, Claim)
                    for item in event.items:
                        taker = live.providers[item.provider_id]
                        for i, limits in enumerate(taker.layout.limits):
                            assert taker.held[i] + taker.consumed[i] <= limits.capacity
                for pid, provider_ in live.providers.items():
                    for i, limits in enumerate(provider_.layout.limits):
                        own = provider_.own.limits[i].allocation_ratio
                        rc = provider_.layout.classes[i]
                        ratio = _ratio(live.aggregates, provider_.aggregates, rc, own)
                        assert limits.capacity == int((limits.total - limits.reserved) * ratio), pid
            # the view is the checkpoint: commit a prefix, load it, decide the rest
            view = ViewWriter(engine)
            checkpoint = fresh_state()
            batch = Batch(0, 0, cut)
            for offset, event in enumerate(events[:cut]):
                batch.applied.append(Applied(offset, event, apply(checkpoint, offset, event)))
            assert view.commit(checkpoint, batch)
            with engine.connect() as conn:
                loaded, _ = load_state(conn, 0, 1)
            _assert_same_state(loaded, checkpoint)
            rest = [apply(loaded, offset, e) for offset, e in enumerate(events[cut:], cut)]
            assert rest == expected[cut:]
        finally:
            engine.dispose()


def test_the_aggregate_commands(tmp_path: Path, cli: Cli) -> None:
    data = tmp_path / "data"
    with App(Settings(data_dir=data, partitions=2)):
        pass
    where = ["--data-dir", str(data)]
    with berth_running("projector", *where):
        for pid in ("n1", "n2", "n3"):
            assert cli("provider", "register", pid, *where, "--wait")[0] == 0
            assert cli("provider", "inventory", pid, "VCPU=4", *where, "--wait")[0] == 0
        code, out, _ = cli(
            "aggregate", "create", "rack1", "availability_zone=az1", *where, "--wait"
        )
        decided = [json.loads(line) for line in out.splitlines() if '"kind"' in line]
        assert code == 0 and [d["kind"] for d in decided] == ["applied", "applied"]
        code, out, _ = cli("aggregate", "add", "rack1", "n1", "n2", *where, "--wait")
        assert code == 0
        code, _, _ = cli("aggregate", "set", "rack1", "cpu_allocation_ratio=2", *where, "--wait")
        assert code == 0
        code, out, _ = cli("aggregate", "show", "rack1", *where)
        assert json.loads(out) == {
            "aggregate_id": "rack1",
            "metadata": {"availability_zone": "az1", "cpu_allocation_ratio": "2"},
            "members": ["n1", "n2"],
        }
        code, out, _ = cli("explain", "--resources", "VCPU=6", "--availability-zone", "az1", *where)
        assert code == 0 and "choice: n1" in out
        assert "n3: zone 'az1' wanted, provider is in nova (AvailabilityZoneFilter)" in out
        code, _, err = cli("aggregate", "create", "rack1", *where)
        assert code == 2 and "exists already" in err
        code, _, err = cli("aggregate", "add", "rack9", "n1", *where)
        assert code == 2 and "aggregate rack9: no such aggregate" in err
        code, out, _ = cli("aggregate", "remove", "rack1", "n3", *where, "--wait")
        assert code == 1 and '"NOT_A_MEMBER"' in out


def test_the_api_defines_an_aggregate_in_every_partition(tmp_path: Path) -> None:
    tokens = {"admin": "t-admin", "operator": "t-operator", "project:p1": "t-p1"}
    credentials = Credentials({digest(token): role for role, token in tokens.items()})
    with (
        App(Settings(data_dir=tmp_path / "data", partitions=2)) as app,
        deciding(app),
        serving(Api(app, credentials=credentials)) as url,
    ):
        setup = [json.loads(e.model_dump_json()) for e in provider("n1", ts=1, VCPU=4)]
        assert call(url, "/v1/events?wait=30", setup, token="t-operator")[0] == 200
        body = {"metadata": {"availability_zone": "az1", "cpu_allocation_ratio": "2"}}
        status, reply = call(
            url, "/v1/aggregates/rack1?wait=30", body, token="t-operator", method="PUT"
        )
        assert status == 200 and len(reply["appended"]) == 2
        assert {o[0]["kind"] for o in reply["decisions"].values()} == {"applied"}
        joined = json.loads(join("n1", "rack1").model_dump_json())
        assert call(url, "/v1/events?wait=30", joined, token="t-operator")[0] == 200
        # the decision is published before the writer commits it to the view
        deadline = time.monotonic() + 10
        while True:
            status, found = call(url, "/v1/aggregates/rack1", token="t-p1")
            if found.get("members") or time.monotonic() > deadline:
                break
        assert status == 200 and found == {
            "aggregate_id": "rack1",
            "metadata": body["metadata"],
            "members": ["n1"],
        }
        assert call(url, "/v1/aggregates/rack9", token="t-p1")[0] == 404
        status, _ = call(url, "/v1/aggregates/rack1", body, token="t-p1", method="PUT")
        assert status == 403
        status, reply = call(
            url, "/v1/aggregates/r2", {"metadata": {"k": 1}}, token="t-admin", method="PUT"
        )
        assert status == 422 and reply["errors"][0]["pointer"] == "/metadata/k"
        lone = json.loads(define("rack2", ts=1, availability_zone="az2").model_dump_json())
        status, reply = call(url, "/v1/events", lone, token="t-admin")
        assert status == 409 and "defined in every partition" in reply["detail"]
