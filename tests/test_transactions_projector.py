"""The projector's pools, claim sets, transactions and consumer release, record by record."""

from __future__ import annotations

import pytest

from projections.state import PartitionState
from schemas.codec import EventDecodeError, validate_event
from tests.builders import brief, briefs, claim, fresh_state, provider, release, run, tick
from tests.txn_builders import claim_set, decide, ids, pool, release_consumer, spec, take


def _state(*events: object) -> PartitionState:
    state = fresh_state()
    run([*provider("n1", VCPU=4), *provider("n2", VCPU=4)], state)
    run(list(events), state)  # type: ignore[arg-type]
    return state


def test_lowest_free_identifier_skips_network_broadcast_and_excluded() -> None:
    state = _state(pool("net", "ipv4", cidr="10.0.0.0/29", excluded=["10.0.0.1"]))
    got = run([take(f"r{i}", "net", ids("net")) for i in range(6)], state)
    given = [o[0].identifiers for o in got[:5]]
    assert given == [(("net", f"10.0.0.{i}"),) for i in range(2, 7)]
    assert brief(got[5][0]) == "rejected r5 POOL_EXHAUSTED=1/0"


def test_a_named_identifier_is_given_once_and_returns_on_release() -> None:
    state = _state(pool("vni", "vni"))
    got = run(
        [
            take("a", "vni", ids(("vni", "5000"))),
            take("b", "vni", ids(("vni", "5000"))),
            release("a"),
            take("c", "vni", ids(("vni", "5000"))),
            take("d", "vni", ids(("vni", "0"))),
        ],
        state,
    )
    assert got[0][0].identifiers == (("vni", "5000"),)
    assert [r.code.name for r in got[1][0].reasons] == ["IDENTIFIER_TAKEN"]
    assert got[2][0].identifiers == (("vni", "5000"),)  # given back
    assert got[3][0].kind == "accepted"
    assert [r.code.name for r in got[4][0].reasons] == ["IDENTIFIER_NOT_IN_POOL"]
    assert len(state.pools["vni"].free) == 16_777_215 - 1


def test_named_and_lowest_free_in_one_claim_do_not_collide() -> None:
    state = _state(pool("vlan", "vlan", first=10, last=12))
    (out,) = run([take("a", "vlan", ids("vlan", ("vlan", "10")))], state)
    assert out[0].identifiers == (("vlan", "10"), ("vlan", "11"))


def test_an_expired_hold_gives_its_identifier_back() -> None:
    state = _state(pool("s", "set", members=["red", "green"]))
    run([take("a", "s", ids("s"), lease_ms=10)], state)
    (out,) = run([tick(100)], state)
    assert brief(out[0]) == "expired a until 10"
    assert out[0].identifiers == (("s", "green"),)  # sorted members: green < red
    assert len(state.pools["s"].free) == 2


def test_a_pool_in_use_cannot_be_redefined() -> None:
    state = _state(pool("r", "range", first=1, last=3))
    run([take("a", "r", ids("r"))], state)
    (out,) = run([pool("r", "range", first=1, last=9)], state)
    assert [r.code.name for r in out[0].reasons] == ["POOL_IN_USE"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "ipv4"}, "needs cidr"),
        ({"kind": "ipv4", "cidr": "10.0.0.1/24"}, "host bits set"),
        ({"kind": "ipv6", "cidr": "10.0.0.0/24"}, "not an ipv6 network"),
        ({"kind": "ipv6", "cidr": "fd00::/48"}, "at most a /64"),
        ({"kind": "vlan", "first": 0}, "within 1..4094"),
        ({"kind": "range", "first": 5}, "needs first and last"),
        ({"kind": "set"}, "at least one member"),
        ({"kind": "vni", "excluded": ["x"]}, "not in the pool"),
    ],
)
def test_a_bad_pool_definition_is_refused_at_the_edge(
    fields: dict[str, object], message: str
) -> None:
    data = {
        "type": "pool_defined",
        "event_id": "e",
        "ts_ms": 0,
        "partition_key": "p",
        "pool_id": "p",
    }
    with pytest.raises(EventDecodeError, match=message):
        validate_event({**data, **fields})


def test_an_atomic_set_holds_all_or_none() -> None:
    state = _state()
    (ok,) = run(
        [claim_set("n1", spec("a", {"n1": {"VCPU": 2}}), spec("b", {"n2": {"VCPU": 2}}))], state
    )
    assert briefs(ok) == "accepted a until 1000 | accepted b until 1000"
    (bad,) = run(
        [claim_set("n1", spec("c", {"n1": {"VCPU": 1}}), spec("d", {"n2": {"VCPU": 3}}))], state
    )
    assert briefs(bad) == (
        "rejected c BATCH_MEMBER_REJECTED | rejected d INSUFFICIENT_CAPACITY@VCPU=3/2"
    )
    assert state.providers["n1"].held == [2]  # c's hold was undone
    assert "c" not in state.finished  # an undone member may be claimed again


def test_a_non_atomic_set_decides_each_member() -> None:
    state = _state()
    (out,) = run(
        [
            claim_set(
                "n1",
                spec("a", {"n1": {"VCPU": 3}}),
                spec("b", {"n1": {"VCPU": 3}}),
                spec("c", {"n1": {"VCPU": 1}}),
                atomic=False,
            )
        ],
        state,
    )
    assert [o.kind for o in out] == ["accepted", "rejected", "accepted"]


def test_prepared_holds_count_until_commit_then_get_their_lease() -> None:
    state = _state()
    (prep,) = run(
        [claim_set("n1", spec("a", {"n1": {"VCPU": 4}}), txn="t1", deadline=500, ts=100)], state
    )
    assert brief(prep[0]) == "prepared a until 500"
    assert brief(run([claim("x", "n1", VCPU=1, ts=110)], state)[0][0]).startswith("rejected x")
    assert brief(run([claim("y", "n1", VCPU=1, ts=110)], state)[0][0]).startswith("rejected")
    (committed,) = run([decide("t1", True, ts=200)], state)
    assert brief(committed[0]) == "committed a until 1200"
    assert not state.transactions
    (again,) = run([decide("t1", True, ts=210)], state)
    assert brief(again[0]) == "noop t1 NO_PENDING_CLAIMS"


def test_abort_gives_back_and_the_deadline_presumes_abort() -> None:
    state = _state(pool("ip", "ipv4", cidr="10.1.0.0/30"))
    run([claim_set("ip", spec("a", identifiers=ids("ip")), txn="t1", deadline=50)], state)
    (aborted,) = run([decide("t1", False, ts=10)], state)
    assert aborted[0].kind == "aborted" and aborted[0].identifiers == (("ip", "10.1.0.1"),)
    run([claim_set("ip", spec("b", identifiers=ids("ip")), txn="t2", deadline=50, ts=20)], state)
    (late,) = run([decide("t2", True, ts=51)], state)
    assert briefs(late) == "expired b until 50 | noop t2 NO_PENDING_CLAIMS"
    assert len(state.pools["ip"].free) == 2
    (too_late,) = run(
        [claim_set("ip", spec("c", identifiers=ids("ip")), txn="t3", deadline=40)], state
    )
    assert [r.code.name for r in too_late[0].reasons] == ["TRANSACTION_DEADLINE_PASSED"]


def test_a_pending_hold_cannot_be_consumed_or_renewed() -> None:
    from tests.builders import consume, renew

    state = _state()
    run([claim_set("n1", spec("a", {"n1": {"VCPU": 1}}), txn="t1")], state)
    outs = run([consume("a"), renew("a")], state)
    assert [r.code.name for o in outs for r in o[0].reasons] == ["NOT_HELD", "NOT_HELD"]


def test_an_older_transaction_wounds_a_younger_pending_one() -> None:
    state = _state()
    run([claim_set("n1", spec("young", {"n1": {"VCPU": 3}}), txn="t-young", priority=20)], state)
    (out,) = run(
        [claim_set("n1", spec("old", {"n1": {"VCPU": 3}}), txn="t-old", priority=10)], state
    )
    assert [(o.kind, o.subject) for o in out] == [("aborted", "young"), ("prepared", "old")]
    assert out[0].reasons[0].code.name == "WOUNDED"
    # a younger one never wounds an older one
    (out,) = run(
        [claim_set("n1", spec("later", {"n1": {"VCPU": 3}}), txn="t-later", priority=30)], state
    )
    assert [o.kind for o in out] == ["rejected"]
    assert "old" in state.reservations


def test_a_transaction_never_wounds_itself() -> None:
    """Not even when a later set of it carries a smaller priority: its pending
    holds stay, and no hold is reported prepared after it was aborted."""
    state = _state()
    run([claim_set("n1", spec("a", {"n1": {"VCPU": 4}}), txn="t1", priority=5)], state)
    (out,) = run(
        [
            claim_set(
                "n1",
                spec("b", {"n1": {"VCPU": 1}}),
                spec("c", {"n1": {"VCPU": 1}}),
                atomic=False,
                txn="t1",
                priority=2,
            )
        ],
        state,
    )
    assert [(o.kind, o.subject) for o in out] == [("rejected", "b"), ("rejected", "c")]
    assert state.transactions["t1"].reservation_ids == ["a"]


def test_committed_holds_are_never_wounded() -> None:
    state = _state()
    run(
        [
            claim_set("n1", spec("young", {"n1": {"VCPU": 3}}), txn="ty", priority=20),
            decide("ty", True),
        ],
        state,
    )
    (out,) = run([claim_set("n1", spec("old", {"n1": {"VCPU": 3}}), txn="to", priority=10)], state)
    assert [o.kind for o in out] == ["rejected"]


def test_release_consumer_releases_everything_it_holds_here() -> None:
    state = _state(pool("vni", "vni"))
    run(
        [
            claim("a", "n1", VCPU=1, consumer="vm1"),
            claim("b", "n2", VCPU=1, consumer="vm1"),
            take("c", "vni", ids("vni"), consumer="vm1"),
            claim("d", "n1", VCPU=1, consumer="vm2"),
        ],
        state,
    )
    (out,) = run([release_consumer("vm1")], state)
    assert [(o.kind, o.subject) for o in out] == [("released", s) for s in "abc"]
    assert out[2].identifiers == (("vni", "1"),)
    assert set(state.reservations) == {"d"}
    (none,) = run([release_consumer("vm1")], state)
    assert none[0].kind == "noop"
