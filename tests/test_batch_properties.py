"""A property over random batches through the real ledger: whatever the mix of
batch sizes, pools, modes, releases and coordinators dying mid-transaction,
no provider is over capacity, no identifier is held twice, and every
all-or-nothing batch holds all of its instances or none. Some batches are
planned on a stale view of the empty cluster, so the writers refuse claims and
the atomicity of sets, votes and compensation is what keeps batches whole."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from consumers.snapshot_source import snapshot_from_view
from projections.view.tables import inventories, reservation_identifiers, reservations
from schemas.events import IdentifierItem, Release
from schemas.requests import BatchRequest, PlacementRequest
from tests.test_batches import NOW_MS, Stack, _Crash, _die, stack
from tests.txn_builders import pool

POOLS = {
    "net": pool("net", "ipv4", cidr="10.9.0.0/29", ts=1),
    "vlan": pool("vlan", "vlan", first=100, last=104, ts=1),
}

batches = st.lists(
    st.fixed_dictionaries(
        {
            "instances": st.integers(1, 5),
            "vcpu": st.integers(1, 4),
            "pools": st.lists(st.sampled_from(sorted(POOLS)), max_size=2, unique=True),
            "mode": st.sampled_from(["all_or_nothing", "all_or_nothing", "at_least"]),
            "crash": st.sampled_from([False, False, True]),
            "release_first": st.booleans(),
            "stale": st.booleans(),
        }
    ),
    min_size=1,
    max_size=6,
)


def _check(s: Stack, answers: dict[str, tuple[str, int]]) -> None:
    with s.app.engine.connect() as conn:
        for row in conn.execute(select(inventories)):
            assert row.held + row.consumed <= row.capacity, row
        live = {
            rid: consumer
            for rid, consumer, status in conn.execute(
                select(
                    reservations.c.reservation_id, reservations.c.consumer_id, reservations.c.status
                )
            )
            if status in ("held", "pending", "consumed")
        }
        holders = Counter(
            (pool, value)
            for pool, value, rid in conn.execute(
                select(
                    reservation_identifiers.c.pool_id,
                    reservation_identifiers.c.value,
                    reservation_identifiers.c.reservation_id,
                )
            )
            if rid in live
        )
    assert all(n == 1 for n in holders.values()), holders
    for batch_id, (status, expected) in answers.items():
        mine = [rid for rid, consumer in live.items() if consumer.startswith(f"{batch_id}.")]
        instances_held = len({live[rid] for rid in mine})
        if status == "committed":
            assert instances_held == expected, (batch_id, status, mine)
        else:
            assert instances_held == 0, (batch_id, status, mine)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(batches)
def test_random_batches_are_all_or_nothing_and_never_overcommit(
    plan: list[dict[str, object]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp, stack(Path(tmp), providers=5) as s:
        s.publisher.publish(list(POOLS.values()))
        s.pump()
        empty = snapshot_from_view(s.app.engine)  # a scheduler that never sees a claim
        answers: dict[str, tuple[str, int]] = {}
        committed: list[tuple[str, list[tuple[str, str]]]] = []
        for k, spec in enumerate(plan):
            if spec["release_first"] and committed:
                batch_id, held = committed.pop(0)
                s.publisher.publish(
                    [
                        Release(
                            event_id=f"rel-{rid}",
                            ts_ms=s.clock[0],
                            partition_key=key,
                            reservation_id=rid,
                        )
                        for rid, key in held
                    ]
                )
                s.pump()
                answers.pop(batch_id)
            count = int(spec["instances"])  # type: ignore[call-overload]
            member = PlacementRequest(
                request_id=f"b{k}-m",
                ts_ms=NOW_MS,
                project_id="ci",
                resources={"VCPU": int(spec["vcpu"])},  # type: ignore[call-overload]
                num_instances=count,
                identifiers=tuple(IdentifierItem(pool_id=p) for p in spec["pools"]),  # type: ignore[attr-defined]
            )
            at_least = spec["mode"] == "at_least"
            batch = BatchRequest(
                batch_id=f"b{k}",
                ts_ms=NOW_MS + k,
                members=(member,),
                mode="at_least" if at_least else "all_or_nothing",
                min_count=1 if at_least else None,
                prepare_timeout_ms=1_000,
            )
            scheduler = s.batches(snapshot=(lambda: empty) if spec["stale"] else None)
            if spec["crash"]:
                scheduler.coordinator._decide = _die  # type: ignore[method-assign,assignment]
                try:
                    result = scheduler.place(batch)
                except _Crash:  # the coordinator died after the votes: presumed abort
                    s.clock[0] += 1_001
                    s.publisher.tick()
                    s.pump()
                    answers[batch.batch_id] = ("failed", 0)
                    _check(s, answers)
                    continue
            else:
                result = scheduler.place(batch)
            s.pump()
            expected = len(result.instances)
            if not at_least and result.placed:
                assert expected == count
            answers[batch.batch_id] = (result.status, expected)
            if result.placed:
                committed.append(
                    (
                        batch.batch_id,
                        [
                            p
                            for i in result.instances
                            for p in zip(i.reservation_ids, i.keys, strict=True)
                        ],
                    )
                )
            _check(s, answers)
