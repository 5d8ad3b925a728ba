"""The ledger's state as Prometheus metrics, read from the log's ends and the
view at each scrape: what ``berth status`` and ``berth queue`` print, for a
dashboard, an alert on a writer that falls behind, or an autoscaler scaling
on the instances that wait (KEDA's Prometheus scaler, say).

Nothing is counted in process, so any number of exporters may run, and one
that restarts loses nothing; nothing here writes. The counters of decisions
and answers are folded from the outcomes and placements topics, from offset
0 at the first scrape and from where the last one stopped after that.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from berth.status import Status, read_status
from consumers.batches import shape_key
from consumers.policies import PolicyBook
from consumers.queue_projector import read_depth
from consumers.snapshot_source import LiveSnapshot
from ledger.log import Log, Tail
from ledger.topics import Topics
from scheduling.config import SchedulerConfig
from scheduling.engine import Engine as PlacementEngine
from scheduling.headroom import Headroom, headroom
from scheduling.model import Request
from schemas.outcomes import Kind

PROVIDER_STATES = ("enabled", "disabled", "offline", "evacuating")
RESERVATION_STATUSES = ("held", "pending", "consumed", "released", "expired", "aborted")
"""Exported even at zero, so that a series exists before its first member."""


class _Decisions:
    """Outcomes by kind, and rejections by reason, from the outcomes topic."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.last: dict[int, tuple[int, int]] = {}

    def fold(self, partition: int, value: bytes) -> None:
        data = json.loads(value)
        position = (data["offset"], data["seq"])
        # a writer that stopped before its view commit publishes those
        # outcomes again when it resumes: counted once
        if position <= self.last.get(partition, (-1, -1)):
            return
        self.last[partition] = position
        self.kinds[data["kind"]] += 1
        if data["kind"] == Kind.REJECTED:
            self.reasons.update(reason["code"] for reason in data.get("reasons", ()))


class _Answered:
    """The scheduler's answers by kind and result, and their attempts, from
    the placements topic."""

    def __init__(self) -> None:
        self.answers: Counter[tuple[str, str]] = Counter()
        self.attempts = 0

    def fold(self, _partition: int, value: bytes) -> None:
        data = json.loads(value)
        kind = "batch" if data.get("batch") else "request"
        if data.get("status") == "queued":
            self.answers[kind, "queued"] += 1
            return
        self.answers[kind, "placed" if data["placed"] else "failed"] += 1
        self.attempts += data.get("attempts", 0)


class LedgerCollector(Collector):
    """Reads the log and the view once per scrape.

    With ``totals`` off, only each partition's progress is read (no table
    scans), as ``berth status --lag`` does.
    """

    def __init__(
        self,
        log: Log,
        engine: Engine,
        topics: Topics,
        partitions: int,
        totals: bool = True,
        shapes: Sequence[Request] = (),
        placement: PlacementEngine | None = None,
        policies: PolicyBook | None = None,
    ) -> None:
        """``shapes`` are the requests whose headroom each scrape measures
        with ``placement``, the scheduler's engine (filters, ratios), or
        with ``policies``, the default policy's as of the scrape."""
        self.log = log
        self.engine = engine
        self.topics = topics
        self.partitions = partitions
        self.totals = totals
        self.shapes = list(shapes)
        self.placement = placement or SchedulerConfig.default().engine()
        self.policies = policies
        self._live = LiveSnapshot(engine)
        # scrapes may overlap; the log's handles are not shared between threads
        self._lock = threading.Lock()
        self._decisions = _Decisions()
        self._answered = _Answered()
        self._folds: list[tuple[Tail, Callable[[int, bytes], None]]] = [
            (Tail(log, topics.outcomes, from_start=True), self._decisions.fold),
            (Tail(log, topics.placements, from_start=True), self._answered.fold),
        ]

    def warm(self) -> None:
        """Fold the topics so far, before the first scrape has to (about
        2.6 us an outcome: 3 s for the outcomes of a 1M-record log)."""
        if self.totals:
            with self._lock:
                self._fold()

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        up = GaugeMetricFamily("berth_view_up", "1 if the view could be read at this scrape")
        try:
            with self._lock:
                status = read_status(
                    self.log, self.engine, self.topics, self.partitions, totals=self.totals
                )
                depth = read_depth(self.engine) if self.totals else {}
                rooms: list[tuple[str, Headroom]] = []
                if self.totals:
                    self._fold()
                    if self.shapes:
                        if self.policies is not None:
                            self.policies.refresh()
                            self.placement = self.policies.default().engine
                        snapshot = self._live()
                        rooms = [
                            (shape_key(dict(s.resources)), headroom(self.placement, snapshot, s))
                            for s in self.shapes
                        ]
        except DBAPIError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _progress(status)
        yield _damaged(status)
        if status.totals is not None:
            yield from _totals(status)
            yield from _queue(depth)
            yield from self._counted()
            yield from _headroom(rooms)
        yield GaugeMetricFamily(
            "berth_scrape_duration_seconds",
            "how long reading the log and the view took",
            value=time.perf_counter() - started,
        )

    def _fold(self) -> None:
        """The topics' records since the last fold, into the counters."""
        for tail, fold in self._folds:
            for record in tail.records():
                fold(record.partition, record.value)

    def _counted(self) -> Iterator[Metric]:
        decisions = CounterMetricFamily(
            "berth_outcomes", "the writers' decisions, by kind", labels=["kind"]
        )
        for kind, n in sorted(self._decisions.kinds.items()):
            decisions.add_metric([kind], n)
        rejections = CounterMetricFamily(
            "berth_rejections",
            "reasons given for rejected records, by code (a claim may give one per class)",
            labels=["code"],
        )
        for code, n in sorted(self._decisions.reasons.items()):
            rejections.add_metric([code], n)
        answers = CounterMetricFamily(
            "berth_placement_answers",
            "the scheduler's answers, by kind (request or batch) and result",
            labels=["kind", "result"],
        )
        for (kind, result), n in sorted(self._answered.answers.items()):
            answers.add_metric([kind, result], n)
        attempts = CounterMetricFamily(
            "berth_placement_attempts",
            "claims the scheduler proposed for the answered requests "
            "(more than one a request when a writer rejected a claim)",
            value=self._answered.attempts,
        )
        yield from (decisions, rejections, answers, attempts)


def _progress(status: Status) -> Iterator[Metric]:
    labels = ["partition"]
    end = GaugeMetricFamily("berth_log_end_offset", "records in the partition's log", labels=labels)
    applied = GaugeMetricFamily(
        "berth_view_applied_offset", "records of the partition the view reflects", labels=labels
    )
    behind = GaugeMetricFamily(
        "berth_view_behind_records",
        "records in the partition's log its writer has not applied yet",
        labels=labels,
    )
    clock = GaugeMetricFamily(
        "berth_partition_clock_seconds",
        "the partition's clock (its largest producer timestamp) as of the view",
        labels=labels,
    )
    dead = CounterMetricFamily(
        "berth_dead_letters",
        "records of the partition that did not decode, sent to the dead letters",
        labels=labels,
    )
    for p in status.partitions:
        key = [str(p.partition)]
        end.add_metric(key, p.log_end)
        applied.add_metric(key, p.applied)
        behind.add_metric(key, p.behind)
        dead.add_metric(key, p.dead_letters)
        if p.clock_ms is not None:
            clock.add_metric(key, p.clock_ms / 1000)
    yield from (end, applied, behind, clock, dead)


def _damaged(status: Status) -> Metric:
    damaged = GaugeMetricFamily(
        "berth_log_partition_damaged",
        "1 for a partition that holds a damaged record: it refuses appends and "
        "reads past it until restored or truncated (berth log verify names it)",
        labels=["topic", "partition"],
    )
    for d in status.damaged:
        damaged.add_metric([d.topic, str(d.partition)], 1)
    return damaged


def _totals(status: Status) -> Iterator[Metric]:
    assert status.totals is not None
    totals = status.totals
    labels = ["resource_class"]
    columns = {
        "capacity": "capacity: (total - reserved) x allocation ratio, summed over providers",
        "held": "held by claims not consumed yet",
        "consumed": "consumed",
        "free": "capacity neither held nor consumed",
    }
    families = {
        name: GaugeMetricFamily(f"berth_resource_{name}", text, labels=labels)
        for name, text in columns.items()
    }
    for r in totals.resources:
        for name, family in families.items():
            family.add_metric([r.resource_class], getattr(r, name))
    yield from families.values()
    providers = GaugeMetricFamily("berth_providers", "providers by state", labels=["state"])
    for state in sorted({*PROVIDER_STATES, *totals.providers}):
        providers.add_metric([state], totals.providers.get(state, 0))
    yield providers
    reservations = GaugeMetricFamily(
        "berth_reservations", "reservations by status", labels=["status"]
    )
    for name in sorted({*RESERVATION_STATUSES, *totals.reservations}):
        reservations.add_metric([name], totals.reservations.get(name, 0))
    yield reservations
    yield GaugeMetricFamily(
        "berth_overcommitted_providers",
        "providers holding or consuming more than their capacity (the ledger promises 0)",
        value=totals.overcommitted_providers,
    )


def _headroom(rooms: list[tuple[str, Headroom]]) -> Iterator[Metric]:
    if not rooms:
        return
    labels = ["shape"]
    instances = GaugeMetricFamily(
        "berth_headroom_instances",
        "more instances of the shape that would fit, all providers together",
        labels=labels,
    )
    providers = GaugeMetricFamily(
        "berth_headroom_providers", "providers that would take one more of the shape", labels=labels
    )
    for shape, room in rooms:
        instances.add_metric([shape], room.instances)
        providers.add_metric([shape], len(room.providers))
    yield from (instances, providers)


def _queue(depth: dict[str, dict[str, int]]) -> Iterator[Metric]:
    labels = ["shape"]
    instances = GaugeMetricFamily(
        "berth_queue_instances", "instances of queued batches waiting, by shape", labels=labels
    )
    batches = GaugeMetricFamily(
        "berth_queue_batches", "queued batches waiting, by shape", labels=labels
    )
    for shape, counts in sorted(depth.items()):
        instances.add_metric([shape], counts["instances"])
        batches.add_metric([shape], counts["batches"])
    yield from (instances, batches)


def registry_for(collector: LedgerCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def serve(collector: LedgerCollector, host: str, port: int) -> tuple[str, int, threading.Thread]:
    """Serve ``/metrics`` in a daemon thread; the address it listens on."""
    server, thread = start_http_server(port, host, registry_for(collector))
    bound_host, bound_port = server.server_address[:2]
    return str(bound_host), int(bound_port), thread
