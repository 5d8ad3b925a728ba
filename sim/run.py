"""One seeded run: a loop of steps, each chosen by the run's one random
generator, faults injected at their rates, the invariants checked after
every step; then the faults stop, everything is drained, and the end
checks run (every acknowledged record, every flip found, replay --verify).

The schedulers' waits call back into the run (``pump``): that is where the
writers decide while a request or a transaction is in flight, where the
other scheduler may take a step of its own (two transactions in flight at
once, racing for the same providers), and where a scheduler may crash
between its votes and its decision.
"""

from __future__ import annotations

import hashlib
import logging
import random
import shutil
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from berth.audit import verify_policies
from berth.replay import replay_log
from consumers.partition_writer import PartitionHalted
from consumers.policies import publish_policy
from ledger.log import CorruptLog, Tail
from projections.view.engine import make_engine
from projections.view.writer import StaleBatch, ViewWriter
from sim.invariants import (
    APPLIED_ONCE,
    DAMAGE,
    LIVENESS,
    REPLAY,
    UNHANDLED,
    Checker,
    Violation,
)
from sim.log import Crash, SimLog
from sim.system import Clock, System, migrated_view
from sim.workload import MAX_PRODUCER_SKEW_MS, Workload

PARTITIONS = 4
SCHEDULERS = 2
"""Schedulers answering a share of the requests' partitions each, racing."""
NESTED_STEP = 0.05
"""Chance per wait of a scheduler that the other takes a step meanwhile."""
MOST_PUMPS = 2_000
"""The most times one scheduler step may wait on the writers: past it, a
request is stuck (liveness)."""
DRAIN_STEPS = 2_000
CAUGHT_UP_EVERY = 200


@dataclass(frozen=True, slots=True)
class Rates:
    """Each fault's chance per opportunity (a step, an append, a commit, a wait)."""

    writers_crash: float = 0.004
    writer_crash: float = 0.006
    scheduler_crash: float = 0.002
    """Per wait of the scheduler: between proposing and the decisions, between
    a transaction's votes and its decision, in its recovery."""
    view_commit_fails: float = 0.004
    crash_after_commit: float = 0.003
    torn_append: float = 0.001
    crash_after_append: float = 0.001
    duplicate_delivery: float = 0.2
    gap_in_delivery: float = 0.05
    flip_bit: float = 0.002
    scrub: float = 0.01
    ticks_missing: float = 0.003
    """Chance per step that the reaper stops ticking for a while."""

    @classmethod
    def none(cls) -> Rates:
        return cls(*(0.0 for _ in range(12)))


FAULTS = (
    "a component crashes between steps (the writers' process, one writer, the scheduler "
    "while it waits on decisions or votes) and restarts from what is durable",
    "the view's commit fails; a writer crashes after publishing outcomes and before its "
    "view commit, or right after it",
    "records delivered twice, partitions interleaved, gaps in delivery, readers lagging",
    "producer clocks skewed within the edge's bound",
    "ticks missing for a while",
    "inventories shrinking and providers retired under load, pools exhausted",
    "a torn last append, a crash after an append became durable, a flipped bit in an old record",
)


@dataclass(slots=True)
class Result:
    seed: int
    steps: int
    ops: int
    violation: Violation | None
    at_step: int
    counts: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    trace: list[str] = field(default_factory=list)
    """The last faults and operations before the end (or the violation)."""
    log_digest: str = ""
    """Of every byte the log holds at the end: the same seed, the same bytes."""
    cpu_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.violation is None

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "steps": self.steps,
            "ops": self.ops,
            "ok": self.ok,
            "violation": None if self.violation is None else str(self.violation),
            "at_step": self.at_step,
            "log_digest": self.log_digest,
            "seconds": round(self.seconds, 2),
            "cpu_s": round(self.cpu_s, 2),
            "ops_per_s": round(self.ops / self.seconds) if self.seconds else 0,
            "counts": dict(sorted(self.counts.items())),
        }


class Run:
    def __init__(self, seed: int, steps: int, rates: Rates | None = None) -> None:
        self.seed = seed
        self.steps = steps
        self.rng = random.Random(seed)
        self.rates = Rates() if rates is None else rates
        self.faulty = True
        self.counts: Counter[str] = _Traced(self)
        self.trace: deque[str] = deque(maxlen=40)
        """The last faults and operations, for the report of a failure."""
        self.step_no = 0
        self.pumps = 0
        self.waits = [0] * SCHEDULERS
        """Waits of each scheduler's current step."""
        self.active: list[int] = []
        """The schedulers in a step, outermost first (the other may step
        while one waits)."""
        self.ticks_back_at = 0
        self.clock = Clock()
        self.log = SimLog(self._storage_fault)
        shm = Path("/dev/shm")
        where = shm if shm.is_dir() else None  # memory: the view's file is scratch
        self.directory = Path(tempfile.mkdtemp(prefix="berth-sim-", dir=where))
        rng = self.rng
        self.system = System(
            self.directory,
            PARTITIONS,
            self.clock,
            self.log,
            self._view_fault,
            self.pump,
            scheduler_skews_ms=tuple(
                rng.randint(-MAX_PRODUCER_SKEW_MS // 2, MAX_PRODUCER_SKEW_MS // 2)
                for _ in range(SCHEDULERS)
            ),
            batch_size=lambda: rng.choice((1, 3, 20, 200)),
        )
        skews = tuple(rng.randint(-MAX_PRODUCER_SKEW_MS, MAX_PRODUCER_SKEW_MS) for _ in range(3))
        self.workload = Workload(
            rng,
            self.clock,
            self.system.publisher(0),
            Tail(self.log, self.system.topics.placements, from_start=True),
            Tail(self.log, self.system.topics.moves, from_start=True),
            skews=skews,
            policies=lambda record: publish_policy(self.log, self.system.topics, record),
        )
        self.reaper = self.system.reaper(rng.choice(skews))
        self.balancer_skew_ms = rng.choice(skews)
        self.balancer = self.system.balancer(self.balancer_skew_ms)
        self.checker = Checker(self.system, self.workload)
        self.flips: set[tuple[str, int, int]] = set()
        self.delivered = [0] * PARTITIONS
        """Where the simulated consumer's next fetch of each partition starts."""

    # -- faults at their rates ------------------------------------------------------

    def _chance(self, rate: float) -> bool:
        return self.faulty and self.rng.random() < rate

    def _storage_fault(self) -> str | None:
        if self._chance(self.rates.torn_append):
            self.counts["fault: torn append"] += 1
            return "torn"
        if self._chance(self.rates.crash_after_append):
            self.counts["fault: crash after a durable append"] += 1
            return "after"
        return None

    def _view_fault(self) -> str | None:
        if self._chance(self.rates.view_commit_fails):
            self.counts["fault: view commit failed"] += 1
            return "fail"
        if self._chance(self.rates.crash_after_commit):
            self.counts["fault: crash after view commit"] += 1
            return "crash"
        return None

    # -- the loop ------------------------------------------------------------------------

    def execute(self) -> Result:
        started = time.perf_counter()
        cpu = time.process_time()
        violation: Violation | None = None
        try:
            while self.step_no < self.steps:
                self.step_no += 1
                self.step()
                self.checker.after_step()
                if self.step_no % CAUGHT_UP_EVERY == 0:
                    self._check_caught_up()
            self.finish()
        except Violation as found:
            violation = found
        except Exception as error:  # whatever escapes a component is a finding
            violation = Violation(UNHANDLED, f"{type(error).__name__}: {error}"[:2000])
            violation.__cause__ = error
        finally:
            self.system.close()
            shutil.rmtree(self.directory, ignore_errors=True)
        digest = hashlib.sha256()
        for parts in self.log.topics.values():
            for part in parts:
                digest.update(part.data)
        return Result(
            self.seed,
            self.steps,
            self.step_no + self.pumps,
            violation,
            self.step_no,
            Counter(self.counts),
            time.perf_counter() - started,
            list(self.trace),
            digest.hexdigest()[:16],
            time.process_time() - cpu,
        )

    def step(self) -> None:
        rng = self.rng
        self.clock.now_ms += rng.randint(0, 40)
        roll = rng.random()
        if roll < 0.35:
            self._guarded("workload", self._workload)
        elif roll < 0.41:
            self._scheduler_step(rng.randrange(SCHEDULERS))
        elif roll < 0.90:
            self._writers_act()
        elif roll < 0.985:
            self._tick()
        else:
            self._guarded("balancer", self._balance)
        self._fault()

    def _workload(self) -> None:
        op = self.workload.act()
        self.counts[f"op: {op}"] += 1

    def _balance(self) -> None:
        planned = self.balancer.step()
        self.counts["op: balance round"] += 1
        if planned is not None and planned[1]:
            self.counts["op: move claimed"] += len(planned[1])

    def _tick(self) -> None:
        if self.clock.now_ms < self.ticks_back_at:
            self.counts["fault: tick missed"] += 1
            return
        self._guarded("reaper", self.reaper.step)
        self.counts["op: tick"] += 1

    def _fault(self) -> None:
        rng, rates = self.rng, self.rates
        if self._chance(rates.writers_crash):
            self.counts["fault: writers' process crashed"] += 1
            self.system.restart_writers()
        if self._chance(rates.writer_crash):
            self.counts["fault: one writer crashed"] += 1
            self.system.restart_writer(rng.randrange(PARTITIONS))
        if self._chance(rates.flip_bit):
            topic = rng.choice(list(self.log.topics))
            partition = rng.randrange(self.log.partition_count(topic))
            offset = self.log.flip_bit(rng, topic, partition)
            if offset is not None:
                self.counts["fault: bit flipped"] += 1
                self.flips.add((topic, partition, offset))
        if self._chance(rates.scrub):
            self.counts["op: scrub"] += 1
            self.repair()
        if self._chance(rates.ticks_missing):
            self.counts["fault: ticks stop"] += 1
            self.ticks_back_at = self.clock.now_ms + rng.randint(1_000, 60_000)

    # -- the writers, fed by a consumer that misbehaves ----------------------------------

    def _writers_act(self) -> None:
        if self.rng.random() < 0.5:
            self._guarded("writers", self._deliver)
        else:
            self._guarded("writers", lambda: self.system.writers.catch_up(self.rng.randint(1, 3)))

    def _deliver(self) -> None:
        """What a consumer group hands the writers: some records of a few
        partitions, in any partition order, sometimes again, sometimes with
        a gap."""
        rng, log, topic = self.rng, self.log, self.system.topics.events
        records = []
        for partition in rng.sample(range(PARTITIONS), rng.randint(1, PARTITIONS)):
            start = self.delivered[partition]
            if self._chance(self.rates.duplicate_delivery):
                self.counts["fault: redelivery"] += 1
                start = max(0, start - rng.randint(1, 20))
            if self._chance(self.rates.gap_in_delivery):
                self.counts["fault: gap in delivery"] += 1
                start += rng.randint(1, 5)
            fetched = log.read(topic, partition, start, rng.randint(1, 50))
            if fetched:
                self.delivered[partition] = fetched[-1].offset + 1
            records.extend(fetched)
        self.system.writers.write(records)

    def _guarded(self, who: str, action: Any) -> None:
        """Run a component's action; a crash restarts it from what is durable,
        damage met on the way is repaired by the operator first."""
        try:
            action()
        except Crash:
            self.counts[f"restart: {who}"] += 1
            self._restart(who)
        except (CorruptLog, PartitionHalted):
            self.counts["damage met by a reader"] += 1
            self.repair()
            self._restart(who)
        except StaleBatch as stale:
            # the view refused a batch that does not start where it stands:
            # the writer applied records it had applied (or skipped some)
            raise Violation(APPLIED_ONCE, f"{who}: {stale}") from stale

    def _restart(self, who: str) -> None:
        if who == "writers":
            self.system.restart_writers()
        elif who == "balancer":
            self.balancer = self.system.balancer(self.balancer_skew_ms)
        elif who.startswith("scheduler"):
            index = int(who.rsplit(" ", 1)[1])
            worker = self.system.schedulers[index]
            if worker is not None:
                self.checker.crashed_generations.add(worker.scheduler.generation)
            self.system.schedulers[index] = None

    # -- the schedulers ------------------------------------------------------------------

    def _scheduler_step(self, index: int) -> None:
        """A step of scheduler ``index``, which starts it first if it is not
        running (its recovery finishes the transactions its predecessor
        began, and leaves the other's alone, which may be in flight: a start
        happens between steps or while the other waits)."""
        who = f"scheduler {index}"
        self.waits[index] = 0
        self.active.append(index)
        try:
            if self.system.schedulers[index] is None:
                self._guarded(who, lambda: self.system.start_scheduler(index))
                if self.system.schedulers[index] is None:
                    # crashed while starting: what it began is abandoned too
                    starting = self.system.starting[index]
                    if starting is not None:
                        self.checker.crashed_generations.add(starting.generation)
                    return
            worker = self.system.schedulers[index]
            assert worker is not None
            self._guarded(who, worker.step)
            self.counts["op: scheduler step"] += 1
        finally:
            self.active.pop()

    def pump(self) -> None:
        """What happens while a scheduler waits: the writers decide (with
        their faults), the reaper may tick, the other scheduler may take a
        step (starting first if it is down, so its recovery runs while this
        one has a transaction in flight), and the one waiting may crash."""
        self.pumps += 1
        waiting = self.active[-1]
        self.waits[waiting] += 1
        if self.waits[waiting] > MOST_PUMPS:
            raise Violation(LIVENESS, f"one scheduler step waited {MOST_PUMPS} times")
        self.clock.now_ms += self.rng.randint(0, 10)
        self._writers_act()
        if self.rng.random() < 0.02:
            self._tick()
        self.checker.after_step()
        if len(self.active) == 1 and self.rng.random() < NESTED_STEP:
            other = self.rng.choice([i for i in range(SCHEDULERS) if i != waiting])
            if self.system.schedulers[other] is None:
                self.counts["op: a scheduler starting while the other waits"] += 1
            else:
                self.counts["op: schedulers racing"] += 1
            self._scheduler_step(other)
            self.checker.after_step()
        if self._chance(self.rates.scheduler_crash):
            self.counts["fault: scheduler crashed while waiting"] += 1
            raise Crash("the scheduler crashed while it waited")

    # -- the operator ----------------------------------------------------------------------

    def repair(self) -> None:
        """``berth log verify`` over every partition; each damaged record
        restored from the backup. Damage the run did not inject is a finding."""
        for topic, parts in self.log.topics.items():
            for p in range(len(parts)):
                while True:
                    at, damage = self.log.scrub(topic, p)
                    if damage is None:
                        break
                    if (topic, p, at) not in self.flips:
                        raise Violation(DAMAGE, f"{topic} partition {p} record {at}: {damage}")
                    self.log.restore(topic, p, at)
                    self.flips.discard((topic, p, at))
                    self.counts["repaired: record restored"] += 1

    # -- the end ------------------------------------------------------------------------------

    def _catch_up(self) -> bool:
        """The consumer delivers the rest of every partition, and the writers
        read the log for what it skipped; whether they reached the end."""
        self._guarded("writers", self._deliver_rest)
        self._guarded("writers", lambda: self.system.writers.catch_up(10_000))
        topic = self.system.topics.events
        writers = self.system.writers.writers
        return len(writers) == PARTITIONS and all(
            w.next_offset == self.log.end_offset(topic, p) for p, w in writers.items()
        )

    def _deliver_rest(self) -> None:
        topic = self.system.topics.events
        for partition in range(PARTITIONS):
            while records := self.log.read(topic, partition, self.delivered[partition], 500):
                self.delivered[partition] = records[-1].offset + 1
                self.system.writers.write(records)

    def _check_caught_up(self) -> None:
        if self._catch_up():
            self.checker.after_step()
            self.checker.caught_up()

    def finish(self) -> None:
        """Faults stop; the scheduler answers everything asked, the writers
        catch up; then the end checks."""
        self.faulty = False
        self.ticks_back_at = 0
        self.repair()
        for _ in range(DRAIN_STEPS):
            self.clock.now_ms += 50
            self._catch_up()
            self.workload.follow_answers()
            if self._all_answered():
                break
            for index in range(SCHEDULERS):
                self._scheduler_step(index)
                self.checker.after_step()
        else:
            unanswered = [rid for rid, a in self.workload.asked.items() if a.answer is None]
            raise Violation(LIVENESS, f"{len(unanswered)} unanswered, e.g. {unanswered[:3]}")
        if not self._catch_up():
            raise Violation(LIVENESS, "the writers did not reach the end of the log")
        self.checker.after_step()
        self.checker.caught_up()
        if self.flips:
            raise Violation(DAMAGE, f"flipped bits never found: {sorted(self.flips)[:3]}")
        self.counts["end: acknowledged records checked"] = self.checker.acknowledged_present()
        self._replay_verify()

    def _all_answered(self) -> bool:
        for worker in self.system.schedulers:
            if worker is not None and worker.batches is not None and worker.batches.queue:
                return False
        return all(a.answer is not None for a in self.workload.asked.values())

    def _replay_verify(self) -> None:
        """``berth replay --verify`` into a fresh view: every recomputed outcome
        equals the recorded one, and the view equals the live one."""
        url = migrated_view(self.directory / "replay")
        engine = make_engine(url, writer=True)
        try:
            _, _, verified, divergence = replay_log(
                self.log,
                ViewWriter(engine),
                list(range(PARTITIONS)),
                self.system.settings,
                500,
                verify=True,
            )
            if divergence is not None:
                raise Violation(REPLAY, str(divergence))
            self.counts["end: outcomes verified by replay"] = verified
            policies, answers, wrong = verify_policies(self.log, self.system.topics)
            if wrong is not None:
                raise Violation(REPLAY, wrong)
            self.counts["end: policy records verified"] = policies
            self.counts["end: answers' policies verified"] = answers
            for table, columns in _COMPARED.items():
                query = text(f"SELECT {columns} FROM {table} ORDER BY {columns}")
                with self.system.engine.connect() as live, engine.connect() as again:
                    mine, theirs = live.execute(query).all(), again.execute(query).all()
                if mine != theirs:
                    ours: list[Any] = [*mine, None]
                    again_: list[Any] = [*theirs, None]
                    diff = next((a, b) for a, b in zip(ours, again_, strict=False) if a != b)
                    raise Violation(REPLAY, f"{table}: live {diff[0]}, replayed {diff[1]}")
        finally:
            engine.dispose()


_COMPARED = {
    "inventories": "provider_id, resource_class, total, capacity, held, consumed",
    "reservations": "reservation_id, status, expires_at_ms, consumer_id",
    "providers": "provider_id, state",
    "provider_usage": "provider_id, active_reservations",
    "pools": "pool_id, taken, free",
    "reservation_identifiers": "pool_id, value, reservation_id",
    "outcomes": 'partition, "offset", seq, kind, subject',
}


class _Traced(Counter[str]):
    """Counts that also remember, in order, the last things counted."""

    def __init__(self, run: Run) -> None:
        super().__init__()
        self.run = run

    def __setitem__(self, key: str, value: int) -> None:
        super().__setitem__(key, value)
        if not key.startswith("end:"):
            self.run.trace.append(f"{self.run.step_no}: {key}")


def run(seed: int, steps: int, rates: Rates | None = None) -> Result:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.CRITICAL)  # the components log every fault the run injects
    try:
        return Run(seed, steps, rates).execute()
    finally:
        root.setLevel(level)


def shrink(seed: int, steps: int, rates: Rates | None = None) -> tuple[int, Result]:
    """The smallest step count (by bisection) at which the seed still fails;
    a shorter run is the same run cut short, so failing is near monotone."""
    low, high = 0, steps
    failing = run(seed, steps, rates)
    while high - low > 1:
        middle = (low + high) // 2
        result = run(seed, middle, rates)
        if result.ok:
            low = middle
        else:
            high, failing = middle, result
    return high, failing
