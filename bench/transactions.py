"""Transactions, batches and identifier pools: what the second phase costs.

    python -m bench.transactions [--quick]

1. A batch of 50 instances on 10,000 providers in 16 partitions, from request
   to committed, through the batch scheduler, the coordinator, the embedded log
   and the SQLite view, with every partition's writer pumped in this process
   (latency p50/p99, and how many partitions a batch touched). Each batch is
   released after it is measured, so the cluster never fills.
2. Pool claims decided per second by the projector's ``apply`` alone (events
   built beforehand, no I/O): the lowest free identifier of a 16M-VNI pool and
   of an IPv4 /16, and specific VNIs at random.
3. The memory of a 16M-VNI :class:`IntervalPool` with 1M identifiers taken,
   lowest first (one interval) and at random (fragmented), and how fast the
   fragmented pool takes and gives back.
4. Reservations per second through the real stack, one at a time: plain
   claims in one partition against two-partition transactions (prepare, votes,
   decision, acknowledgements), and, between the two, a coordinator claim set
   of the same two claims in one partition (no second phase).

Progress goes to stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from operator import contains
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import note, timed
from bench.end_to_end import _setup
from berth.app import App, tune_gc
from berth.client import Publisher
from berth.compile import compiled
from consumers.batches import BatchResult, BatchScheduler
from consumers.coordinator import Coordinator, Part
from consumers.partition_writer import PartitionWriter
from consumers.scheduler import OutcomeFollower
from consumers.snapshot_source import LiveSnapshot
from projections.pools import IntervalPool
from projections.projector import apply
from projections.state import PartitionState
from scheduling.config import SchedulerConfig
from schemas.events import (
    MAX_LEASE_MS,
    Claim,
    ClaimItem,
    ClaimSpec,
    Event,
    IdentifierItem,
    PoolDefined,
    Release,
)
from schemas.outcomes import Kind
from schemas.pool_space import VNI_RANGE
from schemas.requests import BatchRequest, PlacementRequest

FLAVOR = {"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 40}
PROVIDER_SIZE = (64, 262_144, 2_000)
PARTITIONS = 16


def _percentiles(seconds: Sequence[float]) -> tuple[float, float]:
    ms = np.array(seconds) * 1000
    return round(float(np.percentile(ms, 50)), 1), round(float(np.percentile(ms, 99)), 1)


# --- the real stack, in one process ------------------------------------------


class Stack:
    """An app, every partition's writer, and a coordinator on the wall clock
    whose pump is those writers."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.writers: list[PartitionWriter] = app.writers()
        self.publisher = Publisher(app.log, app.settings.topics)
        self.follower = OutcomeFollower(app.log, app.settings.topics.outcomes)
        self.coordinator = Coordinator(
            self.publisher, app.log, app.settings.topics, self.follower, pump=self.pump
        )

    def pump(self) -> None:
        for writer in self.writers:
            writer.catch_up()


@contextmanager
def _stack(providers: int, prefix: str) -> Iterator[Stack]:
    """``providers`` of one size, registered in ``PARTITIONS`` partitions."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        app = _setup(Path(tmp), providers, PARTITIONS, sizes=PROVIDER_SIZE)
        try:
            stack = Stack(app)
            stack.pump()
            yield stack
        finally:
            app.close()


# --- 1. batches of 50 ---------------------------------------------------------


def _batch(k: int, size: int, now_ms: int) -> BatchRequest:
    member = PlacementRequest(
        request_id=f"job-{k}.vms",
        ts_ms=now_ms,
        project_id="ci",
        resources=FLAVOR,
        num_instances=size,
    )
    return BatchRequest(batch_id=f"job-{k}", ts_ms=now_ms, members=(member,))


def _releases(result: BatchResult, now_ms: int) -> list[Event]:
    return [
        Release(
            event_id=f"release-{rid}",
            ts_ms=now_ms,
            partition_key=instance.provider_id,
            reservation_id=rid,
        )
        for instance in result.instances
        for rid in instance.reservation_ids
    ]


def bench_batches(providers: int, batches: int, size: int = 50, held: int = 5) -> dict[str, Any]:
    """Latency of ``batches`` all-or-nothing batches of ``size`` instances, from
    ``place`` to its committed result, after one unmeasured warm-up batch
    (the first snapshot reads the whole view).

    Each batch is released once ``held`` later ones are placed (not timed): at
    most ``held + 1`` batches are held at a time, so the cluster never fills,
    and no two batches see the same usage (released at once, every batch would
    find the cluster as the previous one did and land on the same providers)."""
    note(f"batches: registering {providers} providers in {PARTITIONS} partitions ...")
    with _stack(providers, "berth-batch-") as stack:
        config = SchedulerConfig.default()
        scheduler = BatchScheduler(
            stack.coordinator,
            config.engine(),
            LiveSnapshot(stack.app.engine),
            PARTITIONS,
            pump=stack.pump,
            max_attempts=config.max_attempts,
        )
        tune_gc()
        latencies: list[float] = []
        touched: list[int] = []
        attempts: list[int] = []
        holding: deque[BatchResult] = deque()
        failed = 0
        warm_up_ms = 0.0
        note(f"batches: {batches} batches of {size} (and a warm-up) ...")
        for k in range(batches + 1):
            request = _batch(k, size, stack.publisher.clock_ms())
            started = time.perf_counter()
            result = scheduler.place(request)
            elapsed = time.perf_counter() - started
            if not result.placed:
                failed += 1
                note(f"  batch {k} {result.status}: {result.reason}")
                continue
            if k == 0:
                warm_up_ms = elapsed * 1000
            else:
                latencies.append(elapsed)
                attempts.append(result.attempts)
                touched.append(
                    len({stack.publisher.partition_of(i.provider_id) for i in result.instances})
                )
            holding.append(result)
            if len(holding) > held:
                stack.publisher.publish(_releases(holding.popleft(), stack.publisher.clock_ms()))
                stack.pump()
    if not latencies:
        raise SystemExit("no batch was placed")
    p50, p99 = _percentiles(latencies)
    return {
        f"batch{size}_p50_ms": p50,
        f"batch{size}_p99_ms": p99,
        f"batch{size}_mean_ms": round(1000 * sum(latencies) / len(latencies), 1),
        f"batch{size}_warm_up_ms": round(warm_up_ms, 1),
        f"batch{size}_partitions_touched_mean": round(sum(touched) / len(touched), 2),
        f"batch{size}_attempts_mean": round(sum(attempts) / len(attempts), 2),
        f"batch{size}_failed": failed,
        f"batch{size}_batches": len(latencies),
        f"batch{size}_providers": providers,
    }


# --- 2. pool claims at the projector ------------------------------------------


def _pool_state(pools: Sequence[PoolDefined]) -> PartitionState:
    """One partition of one: every pool lives here."""
    state = PartitionState(0, 1)
    for offset, pool in enumerate(pools):
        kinds = [o.kind for o in apply(state, offset, pool)]
        assert kinds == [Kind.APPLIED], kinds
    return state


def _pool_claims(
    pool_id: str, label: str, count: int, values: Sequence[int] | None = None
) -> list[Event]:
    """Claims of one identifier each, held for the longest lease (none expires):
    the lowest free one, or ``values[k]``."""
    return [
        Claim(
            event_id=f"c-{label}-{k}",
            ts_ms=1_000 + k,
            partition_key=pool_id,
            reservation_id=f"{label}-{k}",
            consumer_id=f"port-{label}-{k}",
            project_id="bench",
            identifiers=(
                IdentifierItem(pool_id=pool_id, value=None if values is None else str(values[k])),
            ),
            lease_ms=MAX_LEASE_MS,
        )
        for k in range(count)
    ]


def _claims_per_s(state: PartitionState, events: Sequence[Event], start: int) -> int:
    accepted = 0
    with timed() as t:
        for offset, event in enumerate(events, start):
            accepted += apply(state, offset, event)[-1].kind == Kind.ACCEPTED
    assert accepted == len(events), f"{len(events) - accepted} claims refused"
    return round(len(events) / t[0])


def bench_pool_claims(lowest: int, ipv4: int, specific: int) -> dict[str, Any]:
    vni = PoolDefined(event_id="def-vni", ts_ms=1, partition_key="vni", pool_id="vni", kind="vni")
    net = PoolDefined(
        event_id="def-net",
        ts_ms=1,
        partition_key="net",
        pool_id="net",
        kind="ipv4",
        cidr="10.0.0.0/16",
    )
    ipv4 = min(ipv4, 65_534)  # a /16 less its network and broadcast addresses
    note(f"pool claims: building {lowest} + {ipv4} + {specific} claims ...")
    rng = random.Random(7)
    first, last = VNI_RANGE
    values = rng.sample(range(first, last + 1), specific)
    vni_lowest = _pool_claims("vni", "vni-lowest", lowest)
    net_lowest = _pool_claims("net", "net-lowest", ipv4)
    vni_specific = _pool_claims("vni", "vni-specific", specific, values)
    tune_gc()
    note("pool claims: applying ...")
    state = _pool_state([vni, net])
    figures = {
        "vni_lowest_claims_per_s": _claims_per_s(state, vni_lowest, 2),
        "ipv4_lowest_claims_per_s": _claims_per_s(state, net_lowest, 2 + lowest),
    }
    fresh = _pool_state([vni])  # specific values in a pool nothing else took from
    figures["vni_specific_claims_per_s"] = _claims_per_s(fresh, vni_specific, 1)
    figures["vni_specific_pool_intervals"] = fresh.pools["vni"].free.intervals
    figures.update(vni_lowest_claims=lowest, ipv4_lowest_claims=ipv4, vni_specific_claims=specific)
    return figures


# --- 3. a pool's memory -------------------------------------------------------


def _pool_bytes(pool: IntervalPool) -> int:
    return pool.nbytes + sys.getsizeof(pool)


def _rate(operation: Callable[[int], bool], identifiers: Sequence[int]) -> int:
    with timed() as t:
        done = sum(operation(identifier) for identifier in identifiers)
    assert done == len(identifiers)
    return round(len(identifiers) / t[0])


def bench_pool_memory(taken: int, churn: int) -> dict[str, Any]:
    """A VNI pool with ``taken`` identifiers taken lowest first, and another with
    ``taken`` random ones taken (in ascending order: the pool's state does not
    depend on the order, and ascending splits only its last interval); then
    ``churn`` random identifiers given back to the fragmented pool and taken
    again, which moves the arrays' tails."""
    first, last = VNI_RANGE
    note(f"pool memory: {taken} of {last} VNIs taken, lowest first ...")
    contiguous = IntervalPool(first, last)
    with timed() as t:
        for _ in range(taken):
            contiguous.take_lowest()
    lowest_rate = round(taken / t[0])
    note(f"pool memory: {taken} taken at random ...")
    rng = random.Random(11)
    chosen = rng.sample(range(first, last + 1), taken)
    fragmented = IntervalPool(first, last)
    for identifier in sorted(chosen):
        fragmented.take(identifier)
    assert fragmented.count == contiguous.count == last - first + 1 - taken
    intervals = fragmented.intervals
    size = _pool_bytes(fragmented)
    note(f"pool memory: {churn} give-backs and takes in the fragmented pool ...")
    moved = rng.sample(chosen, churn)
    give_back = _rate(fragmented.give_back, moved)
    take = _rate(fragmented.take, moved)
    assert fragmented.intervals == intervals
    return {
        "pool_1m_taken_contiguous_bytes": _pool_bytes(contiguous),
        "pool_1m_taken_contiguous_intervals": contiguous.intervals,
        "pool_1m_taken_random_bytes": size,
        "pool_1m_taken_random_intervals": intervals,
        "pool_taken": taken,
        "pool_take_lowest_per_s": lowest_rate,
        "pool_fragmented_give_back_per_s": give_back,
        "pool_fragmented_take_per_s": take,
    }


# --- 4. the second phase ------------------------------------------------------


def _spec(rid: str, pid: str) -> ClaimSpec:
    return ClaimSpec(
        reservation_id=rid,
        consumer_id=f"vm-{rid}",
        project_id="bench",
        items=(ClaimItem(provider_id=pid, resources=FLAVOR),),
    )


def _by_partition(publisher: Publisher, providers: int) -> list[list[str]]:
    pids: list[list[str]] = [[] for _ in range(PARTITIONS)]
    for n in range(providers):
        pid = f"node-{n:06d}"  # as bench.end_to_end names them
        pids[publisher.partition_of(pid)].append(pid)
    return pids


def _single_claims(stack: Stack, pids: list[list[str]], count: int) -> float:
    """Seconds for ``count`` plain claims, one at a time, each published, pumped
    and followed to its decision."""
    follower = stack.follower
    claims = []
    for k in range(count):
        mine = pids[k % PARTITIONS]
        pid = mine[(k // PARTITIONS) % len(mine)]
        claims.append(
            Claim(
                event_id=f"claim-one-{k}",
                ts_ms=0,
                partition_key=pid,
                reservation_id=f"one-{k}",
                consumer_id=f"vm-one-{k}",
                project_id="bench",
                items=(ClaimItem(provider_id=pid, resources=FLAVOR),),
            )
        )
    accepted = 0
    with timed() as t:
        for event in claims:
            rid = event.reservation_id
            follower.watched.add(rid)
            stack.publisher.publish(
                [event.model_copy(update={"ts_ms": stack.publisher.clock_ms()})]
            )
            follower.wait(
                partial(contains, follower.decided, rid),
                stack.pump,
                stack.coordinator.decision_timeout_s,
                stack.coordinator.poll_interval_s,
                f"claim {rid}",
            )
            accepted += follower.decided.pop(rid).kind == Kind.ACCEPTED
            follower.watched.discard(rid)
    assert accepted == count, f"{count - accepted} plain claims refused"
    return t[0]


def _transactions(
    stack: Stack, pids: list[list[str]], count: int, label: str, spread: bool
) -> float:
    """Seconds for ``count`` transactions of two claims, one at a time: in two
    partitions (``spread``) or as one claim set in one partition."""
    work: list[list[Part]] = []
    for k in range(count):
        home, j = k % PARTITIONS, k // PARTITIONS
        other = (home + 1 + j % (PARTITIONS - 1)) % PARTITIONS if spread else home
        a = pids[home][j % len(pids[home])]
        b = pids[other][-1 - j % len(pids[other])]
        specs = (_spec(f"{label}-{k}.a", a), _spec(f"{label}-{k}.b", b))
        if spread:
            work.append([Part(home, a, specs[:1]), Part(other, b, specs[1:])])
        else:
            work.append([Part(home, a, specs)])
    coordinator = stack.coordinator
    with timed() as t:
        for k, parts in enumerate(work):
            result = coordinator.execute(
                f"{label}-{k}", coordinator.publisher.clock_ms(), parts, needed=2
            )
            assert result.ok and len(result.committed) == 2, result.reason
    return t[0]


def bench_second_phase(providers: int, count: int) -> dict[str, Any]:
    note(f"second phase: {providers} providers in {PARTITIONS} partitions ...")
    with _stack(providers, "berth-2pc-") as stack:
        pids = _by_partition(stack.publisher, providers)
        tune_gc()
        note(f"second phase: {count} plain claims ...")
        single = _single_claims(stack, pids, count)
        note(f"second phase: {count} one-partition claim sets of two ...")
        one_set = _transactions(stack, pids, count, "set", spread=False)
        note(f"second phase: {count} two-partition transactions ...")
        two = _transactions(stack, pids, count, "txn", spread=True)
    single_per_s = count / single
    two_per_s = count / two
    return {
        "single_partition_claims_per_s": round(single_per_s, 1),
        "one_partition_set_of_two_per_s": round(count / one_set, 1),
        "one_partition_set_of_two_reservations_per_s": round(2 * count / one_set, 1),
        "two_partition_txn_per_s": round(two_per_s, 1),
        "two_partition_txn_reservations_per_s": round(2 * two_per_s, 1),
        "single_claims_per_two_partition_txn": round(single_per_s / two_per_s, 2),
        "second_phase_count": count,
        "second_phase_providers": providers,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    args = parser.parse_args()
    tune_gc()
    quick = args.quick
    figures: dict[str, Any] = {}
    with timed() as t:
        figures.update(bench_batches(1_000 if quick else 10_000, 3 if quick else 30))
        figures.update(
            bench_pool_claims(
                lowest=5_000 if quick else 200_000,
                ipv4=5_000 if quick else 65_534,
                specific=5_000 if quick else 100_000,
            )
        )
        figures.update(
            bench_pool_memory(taken=50_000 if quick else 1_000_000, churn=500 if quick else 10_000)
        )
        figures.update(bench_second_phase(1_000, 30 if quick else 500))
    figures["bench_s"] = round(t[0], 1)
    figures["compiled"] = compiled()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
