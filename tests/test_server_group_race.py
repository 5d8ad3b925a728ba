"""Several schedulers racing to hard server groups across partitions, through
the real ledger: each scheduler worker answers its own request partition, and
while one waits for the writers' votes on its transaction another may run
its own placement (hypothesis chooses when), so their memberships reach the
group's partition interleaved, pending beside each other. Whatever the
interleaving, the view never shows an affinity group on two providers, or an
anti-affinity group above max_server_per_host on one, and every placed
instance's provider is its membership's."""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from consumers.scheduler_worker import SchedulerWorker
from ledger.partitioner import partition_for
from projections.view.tables import outcomes, reservations, server_group_members
from scheduling.config import SchedulerConfig
from schemas.events import ServerGroupCreated
from schemas.requests import PlacementRequest
from tests.builders import provider
from tests.placements import placement_answers

PARTITIONS = 4
NOW_MS = 10**12
CONFIG = SchedulerConfig.from_mapping(
    {
        "filters": {
            "enabled": [
                "ComputeFilter",
                "ResourceFilter",
                "ServerGroupAffinityFilter",
                "ServerGroupAntiAffinityFilter",
            ]
        },
        "weighers": {"RAMWeigher": {"multiplier": 1.0}},
    }
)


def _ids_in(partition: int, prefix: str, count: int) -> list[str]:
    """``count`` request ids that the requests topic routes to ``partition``."""
    found: list[str] = []
    n = 0
    while len(found) < count:
        rid = f"{prefix}{n}"
        if partition_for(rid.encode(), PARTITIONS) == partition:
            found.append(rid)
        n += 1
    return found


class Race:
    """The writers, and one scheduler worker per request partition, whose
    pump may run another worker's placement first, and may leave the
    writers behind. What each pump does comes from ``schedule``, drawn
    before the race (how often a worker pumps depends on timing); once it
    is used up, every pump only lets the writers catch up."""

    def __init__(self, app: App, schedule: list[tuple[int, bool]], schedulers: int) -> None:
        self.app = app
        self.schedule = list(reversed(schedule))
        self.writers = app.writers()
        self.running: set[int] = set()
        self.workers: list[SchedulerWorker] = [
            app.scheduler_worker(CONFIG, self.pump, partitions=[k], own=False)
            for k in range(schedulers)
        ]

    def pump(self) -> None:
        interleave, lag = self.schedule.pop() if self.schedule else (-1, False)
        idle = [j for j in range(len(self.workers)) if j not in self.running]
        if interleave >= 0 and idle:
            self.step(idle[interleave % len(idle)])
        # the writers left behind: the next plan reads a view without the
        # claims just proposed, as a scheduler elsewhere would
        if not lag:
            catch_up_all(self.writers)

    def step(self, k: int) -> int:
        self.running.add(k)
        try:
            return self.workers[k].step()
        finally:
            self.running.discard(k)

    def run(self) -> None:
        while any(self.step(k) for k in range(len(self.workers))):
            pass


# the shapes of a race, spelled out: a scheduler waits for the votes on its
# prepared transaction while another plans with the writers behind
RACING = [(-1, False), (0, True), (-1, True), (-1, False)]


@example(2, "web", 1, [(0, True, 1), (1, True, 1)], RACING)
@example(3, "db", 1, [(0, True, 2), (1, True, 1), (2, False, 1)], RACING + RACING)
@example(2, "cache", 2, [(0, True, 2), (1, True, 2), (0, False, 2)], RACING * 3)
@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    st.integers(2, 4),
    st.sampled_from(["web", "db", "cache", "queue"]),
    st.sampled_from([1, 1, 2]),
    st.lists(
        st.tuples(st.integers(0, 3), st.booleans(), st.integers(1, 2)), min_size=2, max_size=8
    ),
    st.lists(
        st.tuples(st.sampled_from([-1, 0, 1, 2]), st.sampled_from([False, True, True])),
        min_size=4,
        max_size=60,
    ),
)
def test_racing_schedulers_never_break_a_hard_group(
    schedulers: int,
    affinity_id: str,
    most: int,
    asks: list[tuple[int, bool, int]],
    schedule: list[tuple[int, bool]],
) -> None:
    anti_id = f"{affinity_id}-anti"
    with (
        tempfile.TemporaryDirectory() as tmp,
        App(Settings(data_dir=Path(tmp) / "data", partitions=PARTITIONS)) as app,
    ):
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        pids = [f"n{i}" for i in range(5)]
        edge.publish([e for pid in pids for e in provider(pid, ts=1, VCPU=64, MEMORY_MB=65536)])
        edge.publish(
            [
                ServerGroupCreated(
                    event_id=f"mk-{gid}",
                    ts_ms=1,
                    partition_key=gid,
                    group_id=gid,
                    policy=policy,  # type: ignore[arg-type]
                    max_server_per_host=limit,
                )
                for gid, policy, limit in [
                    (affinity_id, "affinity", None),
                    (anti_id, "anti-affinity", most),
                ]
            ]
        )
        race = Race(app, schedule, schedulers)
        catch_up_all(race.writers)
        counters: dict[int, int] = defaultdict(int)
        for who, anti, instances in asks:
            partition = who % schedulers
            (rid,) = _ids_in(partition, f"q{partition}x{counters[partition]}-", 1)
            counters[partition] += 1
            edge.submit(
                [
                    PlacementRequest(
                        request_id=rid,
                        ts_ms=NOW_MS,
                        project_id="p",
                        resources={"VCPU": 1, "MEMORY_MB": 256},
                        num_instances=instances,
                        lease_ms=10**8,
                        group_id=anti_id if anti else affinity_id,
                    )
                ]
            )
        race.run()
        catch_up_all(race.writers)
        answers = {a["request_id"]: a for a in placement_answers(app)}
        m, r = server_group_members.c, reservations.c
        with app.engine.connect() as conn:
            members = conn.execute(
                select(m.group_id, m.provider_id, m.consumer_id)
                .join(reservations, r.reservation_id == m.reservation_id)
                .where(r.status.in_(("held", "consumed", "pending")))
            ).all()
    hosts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    member_host: dict[str, str] = {}
    for group_id, host, consumer in members:
        hosts[group_id][host] += 1
        member_host[consumer] = host
    assert len(hosts[affinity_id]) <= 1, dict(hosts[affinity_id])
    assert all(n <= most for n in hosts[anti_id].values()), dict(hosts[anti_id])
    assert len(answers) == len(asks)
    placed = [a for a in answers.values() if a["placed"]]
    assert placed, answers
    for answer in placed:
        for instance in answer["instances"]:
            consumer = f"{answer['request_id']}.{instance['member']}.{instance['index']}"
            assert member_host[consumer] == instance["provider_id"]
    assert sum(len(a["instances"]) for a in placed) == sum(
        hosts[g][h] for g in hosts for h in hosts[g]
    )


def test_a_scheduler_that_plans_before_the_others_member_is_decided_loses(
    tmp_path: Path,
) -> None:
    """The race spelled out: the first scheduler's transaction is prepared
    and pending when the second plans on a view without it, so both pick the
    same provider; the anti-affinity group's partition takes the first
    membership and refuses the second, which is placed elsewhere on its
    next attempt."""
    with App(Settings(data_dir=tmp_path / "data", partitions=PARTITIONS)) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        pids = [f"n{i}" for i in range(5)]
        edge.publish([e for pid in pids for e in provider(pid, ts=1, VCPU=64, MEMORY_MB=65536)])
        edge.publish(
            [
                ServerGroupCreated(
                    event_id="mk", ts_ms=1, partition_key="g", group_id="g", policy="anti-affinity"
                )
            ]
        )
        # first's plan: writers caught up; first waits for votes: second runs,
        # and plans with the writers behind; then every pump catches up
        race = Race(app, [(-1, False), (0, True), (-1, True)], schedulers=2)
        catch_up_all(race.writers)
        for k in range(2):
            (rid,) = _ids_in(k, f"q{k}-", 1)
            edge.submit(
                [
                    PlacementRequest(
                        request_id=rid,
                        ts_ms=NOW_MS,
                        project_id="p",
                        resources={"VCPU": 1, "MEMORY_MB": 256},
                        lease_ms=10**8,
                        group_id="g",
                    )
                ]
            )
        race.run()
        answers = sorted(placement_answers(app), key=lambda a: a["request_id"])
        m = server_group_members.c
        with app.engine.connect() as conn:
            refused = [
                row.subject
                for row in conn.execute(
                    select(outcomes.c.subject, outcomes.c.reasons).where(
                        outcomes.c.kind == "rejected"
                    )
                )
                if row.reasons[0]["code"] == "ANTI_AFFINITY_CONFLICT"
            ]
            joined = conn.execute(select(m.provider_id)).scalars().all()
    assert [a["placed"] for a in answers] == [True, True]
    assert [a["attempts"] for a in answers] == [1, 2]
    assert len(refused) == 1 and len(set(joined)) == 2
