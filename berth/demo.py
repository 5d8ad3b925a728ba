"""The main job: a simulated cluster on the embedded default, end to end.

The providers are described as Nova's compute nodes are (a zone, an
address, a hypervisor and the architectures it runs, a rack), an edge
aggregate overcommits CPU and is a zone of its own, every provider reports
its metrics each wave, and some requests ask for a zone or an architecture.
Each wave creates a server group of each of Nova's four policies, and some
requests join one: a membership is claimed in the group's partition in one
transaction with the compute, so the hard rules hold however the claims race.
Requests go through the whole path: two schedulers (the placement engine with
its default filters and weighers) rank providers on one snapshot of the SQL
view per wave and race, claims are appended to the log, the partition writers
decide them, losers are retried elsewhere, outcomes are read back from the
outcomes topic, then consumes, releases and abandoned holds that the clock
expires.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from berth.app import App
from berth.client import Publisher
from berth.status import overcommitted_providers, resource_totals
from consumers.batches import BatchResult, BatchScheduler
from consumers.coordinator import Coordinator
from consumers.scheduler import OutcomeFollower, Scheduled, Scheduler
from consumers.server_groups import ACTIVE_MEMBER_STATUSES, LiveRules
from consumers.snapshot_source import LiveSnapshot, snapshot_from_view
from projections.view.tables import reservations, server_group_members, server_groups
from scheduling.config import SchedulerConfig
from scheduling.model import Snapshot
from schemas.events import (
    HARD_GROUP_POLICIES,
    AggregateMemberAdded,
    Consume,
    Event,
    IdentifierItem,
    Inventory,
    InventorySet,
    MetricsReported,
    PoolDefined,
    ProviderDescribed,
    ProviderRegistered,
    Release,
    ServerGroupCreated,
)
from schemas.outcomes import Kind, Outcome
from schemas.requests import BatchRequest, PlacementRequest
from schemas.topology import HugePages, NumaCell, PciDevice

CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")
NODE_SIZES = (  # (weight, vcpus, memory_mb, disk_gb)
    (5, 16, 65_536, 500),
    (3, 32, 131_072, 1_000),
    (2, 64, 262_144, 2_000),
)
FLAVORS = (  # (weight, name, vcpus, memory_mb, disk_gb)
    (30, "m1.small", 1, 2_048, 20),
    (35, "m1.medium", 2, 4_096, 40),
    (25, "m1.large", 4, 8_192, 80),
    (9, "m1.xlarge", 8, 16_384, 160),
    (1, "m1.huge", 32, 524_288, 1_000),  # fits nowhere: shows "no valid host"
)
FLAVOR_WEIGHTS = [f[0] for f in FLAVORS]
RATIOS = {"VCPU": 4.0, "MEMORY_MB": 1.0, "DISK_GB": 1.0}
LEASE_MS = 60_000
STEP_MS = 2  # simulated time between two requests
DELETE_SHARE = 0.15  # of running instances deleted per wave
NETWORK_SHARE = 0.3  # of batch members that also take an address and a VNI
NETWORK = (IdentifierItem(pool_id="demo-net"), IdentifierItem(pool_id="demo-vnis"))
ZONES = ("az1", "az2", "az3")
EDGE = "edge"
"""An aggregate of every tenth provider: a zone of its own, CPU overcommitted 8 to 1."""
EDGE_METADATA = {"availability_zone": "az-edge", "cpu_allocation_ratio": "8.0"}
ZONE_SHARE = 0.1  # of requests that name a zone
ARM_SHARE = 0.05  # of requests for an aarch64 image
GROUP_SHARE = 0.08  # of requests that join one of the wave's server groups
GROUP_POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")
GROUPS_PER_POLICY = 4
"""Groups of each policy created per wave: a round of transactions takes one
member of a group, so more groups make fewer, larger rounds."""
ANTI_AFFINITY_MAX_PER_HOST = 2


@dataclass
class DemoConfig:
    providers: int = 200
    requests: int = 10_000
    partitions: int = 8
    wave: int = 500
    seed: int = 7
    batch_size: int = 0
    """With K > 0, requests arrive as all-or-nothing batches of K (CI jobs)."""


@dataclass
class Tally:
    requested: int = 0
    placed: int = 0
    asked: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    """Request id -> the zone and architecture it asked for, of those that asked."""
    landed: dict[str, str] = field(default_factory=dict)
    """Request id -> the provider it was placed on, of those that asked."""
    groups: list[str] = field(default_factory=list)
    """The server groups created, in order."""
    group_requests: int = 0
    group_placed: int = 0
    group_checks: int = 0
    group_members_checked: int = 0
    """Members of hard groups the checks saw, summed over the checks."""
    group_violations: list[str] = field(default_factory=list)
    """A hard group's rule broken in the view, as seen by a check (always none)."""
    metrics_reports: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    """Requests that ended failed, by reason."""
    attempts: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    """Claims the writers rejected (each was retried or reported), by code."""
    consumed: int = 0
    released: int = 0
    expired: int = 0
    decisions: int = 0
    batches_committed: int = 0
    batches_aborted: int = 0
    partial_batches: int = 0
    duplicate_identifiers: int = 0
    live_identifiers: dict[tuple[str, str], str] = field(default_factory=dict)
    """(pool, identifier) -> the reservation holding it, from the outcomes."""


class SimClock:
    """The producers' clock in the simulation: it moves as requests arrive."""

    def __init__(self, start_ms: int) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms


def _build_cluster(cfg: DemoConfig, rng: random.Random, clock: SimClock) -> list[Event]:
    events: list[Event] = []
    weights = [size[0] for size in NODE_SIZES]
    for n in range(cfg.providers):
        pid = f"node-{n:05d}"
        _, vcpus, memory_mb, disk_gb = rng.choices(NODE_SIZES, weights)[0]
        totals = {"VCPU": vcpus, "MEMORY_MB": memory_mb, "DISK_GB": disk_gb}
        events.append(
            ProviderRegistered(
                event_id=f"reg-{pid}", ts_ms=clock(), partition_key=pid, provider_id=pid, name=pid
            )
        )
        inventory = {
            rc: Inventory(
                total=total,
                reserved=512 if rc == "MEMORY_MB" else 0,
                allocation_ratio=RATIOS[rc],
            )
            for rc, total in totals.items()
        }
        events.append(
            InventorySet(
                event_id=f"inv-{pid}",
                ts_ms=clock(),
                partition_key=pid,
                provider_id=pid,
                inventories=inventory,
            )
        )
        events.append(_description(pid, n, clock()))
        if n % 10 == 0:
            events.append(
                AggregateMemberAdded(
                    event_id=f"edge-{pid}",
                    ts_ms=clock(),
                    partition_key=pid,
                    provider_id=pid,
                    aggregate_id=EDGE,
                )
            )
    events.append(
        PoolDefined(
            event_id="pool-net",
            ts_ms=clock(),
            partition_key="demo-net",
            pool_id="demo-net",
            kind="ipv4",
            cidr="10.0.0.0/16",
            excluded=frozenset({"10.0.0.1"}),  # the gateway
        )
    )
    events.append(
        PoolDefined(
            event_id="pool-vnis",
            ts_ms=clock(),
            partition_key="demo-vnis",
            pool_id="demo-vnis",
            kind="vni",
        )
    )
    return events


def _description(pid: str, n: int, ts_ms: int) -> ProviderDescribed:
    """One in eight providers runs aarch64; hypervisors of three versions;
    one in four has two NUMA cells and an SR-IOV NIC (no request pins CPUs
    or asks for a device yet: issue 31's parts 2 to 4)."""
    arch = "aarch64" if n % 8 == 7 else "x86_64"
    cells, devices = _topology() if n % 4 == 1 else (None, None)
    return ProviderDescribed(
        numa_cells=cells,
        pci_devices=devices,
        event_id=f"desc-{pid}",
        ts_ms=ts_ms,
        partition_key=pid,
        provider_id=pid,
        availability_zone=ZONES[n % len(ZONES)],
        host_ip=f"10.1.{n // 256 % 256}.{n % 256}",
        capabilities={
            "hypervisor_type": "QEMU",
            "hypervisor_version": 8000000 + 1000 * (n % 3),
            "supported_instances": [[arch, "qemu", "hvm"]],
            "cpu_info": {"arch": arch},
        },
        metadata={"rack": f"r{n // 20}"},
    )


def _topology() -> tuple[tuple[NumaCell, ...], tuple[PciDevice, ...]]:
    """Two cells of 16 hardware threads (the first pair of each shared, the
    rest dedicated, a few 1 GiB pages), and a PF on cell 0 with four VFs."""
    cells = []
    for cell_id in (0, 1):
        cpus = tuple(range(16 * cell_id, 16 * cell_id + 16))
        cells.append(
            NumaCell(
                cell_id=cell_id,
                cpus=cpus,
                siblings=tuple(cpus[i : i + 2] for i in range(0, 16, 2)),
                shared=cpus[:2],
                dedicated=cpus[2:],
                memory_mb=131_072,
                huge_pages=(HugePages(size_kb=1_048_576, total=32),),
            )
        )
    pf = "0000:81:00.0"
    devices = [
        PciDevice(
            address=pf if n < 0 else f"0000:81:02.{n}",
            vendor_id="8086",
            product_id="1572" if n < 0 else "154c",
            device_type="type-PF" if n < 0 else "type-VF",
            parent_address=None if n < 0 else pf,
            numa_node=0,
            physical_network="physnet1",
        )
        for n in range(-1, 4)
    ]
    return tuple(cells), tuple(devices)


class _StaleOnce:
    """The wave's shared snapshot for a scheduler's first round, a fresh one
    for its retries (as a scheduler re-reads the view after losing a race).
    The requests it places join no server group and use no placement hints,
    so placements are not read."""

    def __init__(self, app: App) -> None:
        self.fresh = LiveSnapshot(app.engine)
        self.stale: Snapshot | None = None

    def __call__(self) -> Snapshot:
        if self.stale is not None:
            snapshot, self.stale = self.stale, None
            return snapshot
        return self.fresh()


class Demo:
    def __init__(
        self, app: App, cfg: DemoConfig, progress: Callable[[int], object] | None = None
    ) -> None:
        self.app = app
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.clock = SimClock(1_700_000_000_000)
        self.publisher = Publisher(app.log, app.settings.topics, clock_ms=self.clock)
        self.writers = app.writers()
        self.outcome_offsets = [0] * app.settings.partitions
        self.tally = Tally()
        # an instance's reservations, each (id, partition key): its compute and
        # any identifiers or server group membership, which live and end together
        self.pending: list[tuple[tuple[str, str], ...]] = []
        self.consumed: list[tuple[tuple[str, str], ...]] = []
        self.wave_groups: list[str] = []  # this wave's server groups
        self.progress = progress or (lambda n: None)

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        # the aggregate first: its members join it in their own partitions
        self.publisher.define_aggregate(EDGE, EDGE_METADATA, event_id="edge")
        self.publisher.publish(_build_cluster(cfg, self.rng, self.clock))
        self._drive()
        # two schedulers ranking on the same view snapshot, like two API
        # workers that do not see each other's picks: on a tight cluster their
        # claims race, the writer rejects the losers and they retry elsewhere
        views = [_StaleOnce(self.app), _StaleOnce(self.app)]
        schedulers = [self._scheduler(view) for view in views]
        # grouped requests and batches: a transaction each, ranked on a view
        # that keeps placements (a group's members are where its filters look)
        batches = self._batches(LiveSnapshot(self.app.engine, placements=True))
        started = time.perf_counter()
        done = 0
        while done < cfg.requests:
            wave = min(cfg.wave, cfg.requests - done)
            self.publisher.publish(
                self._lifecycle_events() + self._metrics_reports() + self._new_groups(done)
            )
            self._drive()
            shared = snapshot_from_view(self.app.engine, placements=False)
            for view in views:
                view.stale = shared
            requests = [self._request(k) for k in range(done, done + wave)]
            if cfg.batch_size:
                self._place_batches(batches, requests)
            else:
                # the wave's grouped requests first: a transaction each, on a
                # cluster the wave has not filled yet
                self._place_grouped(batches, [r for r in requests if r.group_id is not None])
                alone = [r for r in requests if r.group_id is None]
                for turn, scheduler in enumerate(schedulers):
                    for result in scheduler.schedule(alone[turn::2]):
                        self._record(result)
            self._drive()
            self._check_groups()
            self.tally.requested += wave
            done += wave
            self.progress(wave)
        elapsed = time.perf_counter() - started
        # let every abandoned hold run out, then tick the quiet partitions
        self.clock.now_ms += LEASE_MS + 1
        self.publisher.tick()
        self._drive()
        self._check_groups()
        return self._summary(elapsed)

    def _scheduler(self, snapshot: Callable[[], Snapshot]) -> Scheduler:
        config = SchedulerConfig.default()
        return Scheduler(
            self.publisher,
            config.engine(),
            snapshot,
            OutcomeFollower(self.app.log, self.app.settings.topics.outcomes),
            pump=self._apply,
            max_attempts=config.max_attempts,
        )

    def _batches(self, snapshot: Callable[[], Snapshot]) -> BatchScheduler:
        config = SchedulerConfig.default()
        follower = OutcomeFollower(self.app.log, self.app.settings.topics.outcomes)
        topics = self.app.settings.topics
        return BatchScheduler(
            Coordinator(self.publisher, self.app.log, topics, follower, pump=self._apply),
            config.engine(),
            snapshot,
            self.app.settings.partitions,
            pump=self._apply,
            max_attempts=config.max_attempts,
            groups=LiveRules(self.app.engine),
        )

    def _new_groups(self, done: int) -> list[Event]:
        """This wave's server groups, ``GROUPS_PER_POLICY`` of each policy."""
        events: list[Event] = []
        self.wave_groups.clear()
        for policy in GROUP_POLICIES:
            for n in range(GROUPS_PER_POLICY):
                gid = f"{policy}-{done // self.cfg.wave}.{n}"
                self.wave_groups.append(gid)
                self.tally.groups.append(gid)
                events.append(self._group(gid, policy))
        return events

    def _group(self, gid: str, policy: str) -> ServerGroupCreated:
        return ServerGroupCreated(
            event_id=f"group-{gid}",
            ts_ms=self.clock.now_ms,
            partition_key=gid,
            group_id=gid,
            policy=policy,  # type: ignore[arg-type]
            max_server_per_host=ANTI_AFFINITY_MAX_PER_HOST if policy == "anti-affinity" else None,
        )

    def _place_grouped(self, scheduler: BatchScheduler, requests: list[PlacementRequest]) -> None:
        """The requests joining a server group, as the scheduler worker places
        them: each a transaction of its compute and its membership, run side
        by side in rounds."""
        alone = [BatchRequest(batch_id=r.request_id, ts_ms=r.ts_ms, members=(r,)) for r in requests]
        for request, result in zip(requests, scheduler.place_alone(alone), strict=True):
            self.tally.attempts += result.attempts
            if result.placed:
                self.tally.placed += 1
                self.tally.group_placed += 1
                self._hold(result)
                if request.request_id in self.tally.asked:
                    self.tally.landed[request.request_id] = result.instances[0].provider_id
            else:
                self.tally.failed[_reason(result.reason)] += 1

    def _hold(self, result: BatchResult) -> None:
        for instance in result.instances:
            self.pending.append(tuple(zip(instance.reservation_ids, instance.keys, strict=True)))

    def _check_groups(self) -> None:
        """Every hard group's members as the view holds them keep its rule:
        one query for every group's members per provider."""
        self.tally.group_checks += 1
        g, m, r = server_groups.c, server_group_members.c, reservations.c
        with self.app.engine.connect() as conn:
            rows = conn.execute(
                select(g.group_id, g.policy, g.max_server_per_host, m.provider_id, func.count())
                .join(server_group_members, m.group_id == g.group_id)
                .join(reservations, r.reservation_id == m.reservation_id)
                .where(r.status.in_(ACTIVE_MEMBER_STATUSES), g.policy.in_(HARD_GROUP_POLICIES))
                .group_by(g.group_id, g.policy, g.max_server_per_host, m.provider_id)
            ).all()
        hosts: dict[str, list[str]] = {}
        for gid, policy, most, pid, members in rows:
            self.tally.group_members_checked += members
            hosts.setdefault(gid, []).append(pid)
            if policy == "anti-affinity" and members > most:
                self.tally.group_violations.append(f"{gid} has {members} on {pid}")
            if policy == "affinity" and len(hosts[gid]) > 1:
                self.tally.group_violations.append(f"{gid} on {sorted(hosts[gid])}")

    def _place_batches(self, scheduler: BatchScheduler, requests: list[PlacementRequest]) -> None:
        size = self.cfg.batch_size
        for start in range(0, len(requests), size):
            members = tuple(
                r.model_copy(update={"identifiers": NETWORK})
                if self.rng.random() < NETWORK_SHARE
                else r
                for r in requests[start : start + size]
            )
            batch = BatchRequest(
                batch_id=f"job-{members[0].request_id}", ts_ms=self.clock.now_ms, members=members
            )
            result = scheduler.place(batch)
            self._apply()
            self._check_whole(batch, result)
            self._record_batch(batch, result)

    def _check_whole(self, batch: BatchRequest, result: BatchResult) -> None:
        """A batch is all or nothing in the view: count it if it is not."""
        with self.app.engine.connect() as conn:
            active = conn.execute(
                select(func.count())
                .select_from(reservations)
                .where(reservations.c.consumer_id.like(f"{batch.batch_id}.%"))
                .where(reservations.c.status.in_(("held", "pending", "consumed")))
            ).scalar_one()
        expected = sum(len(i.reservation_ids) for i in result.instances)
        if active != expected or (result.placed and len(result.instances) != batch.instances):
            self.tally.partial_batches += 1

    def _record_batch(self, batch: BatchRequest, result: BatchResult) -> None:
        tally = self.tally
        tally.attempts += result.attempts
        if result.placed:
            tally.batches_committed += 1
            tally.placed += len(result.instances)
            tally.group_placed += sum(
                batch.members[i.member].group_id is not None for i in result.instances
            )
            self._hold(result)
        else:
            tally.batches_aborted += 1
            tally.failed[result.reason.split(";")[0].split(":")[0]] += batch.instances

    def _request(self, k: int) -> PlacementRequest:
        self.clock.now_ms += STEP_MS
        _, name, vcpus, memory_mb, disk_gb = self.rng.choices(FLAVORS, FLAVOR_WEIGHTS)[0]
        roll = self.rng.random()
        zone = self.rng.choice((*ZONES, "az-edge")) if roll < ZONE_SHARE else None
        arch = "aarch64" if ZONE_SHARE <= roll < ZONE_SHARE + ARM_SHARE else None
        group = None
        if self.rng.random() < GROUP_SHARE:
            group = self.rng.choice(self.wave_groups)
            self.tally.group_requests += 1
        rid = f"req-{k:08d}"
        if zone or arch:
            self.tally.asked[rid] = (zone, arch)
        return PlacementRequest(
            request_id=rid,
            ts_ms=self.clock.now_ms,
            project_id=f"project-{k % 17}",
            name=f"vm-{k}",
            resources={"VCPU": vcpus, "MEMORY_MB": memory_mb, "DISK_GB": disk_gb},
            flavor_name=name,
            availability_zone=zone,
            image_properties={"hw_architecture": arch} if arch else {},
            lease_ms=LEASE_MS,
            group_id=group,
        )

    def _metrics_reports(self) -> list[Event]:
        """Every provider's report as of now, as its agent would send it."""
        now = self.clock.now_ms
        self.tally.metrics_reports += self.cfg.providers
        return [
            MetricsReported(
                event_id=f"m-{n}-{now}",
                ts_ms=now,
                partition_key=f"node-{n:05d}",
                provider_id=f"node-{n:05d}",
                metrics={"cpu.percent": float(self.rng.randrange(100))},
                num_io_ops=self.rng.randrange(4),
            )
            for n in range(self.cfg.providers)
        ]

    def _record(self, result: Scheduled) -> None:
        tally = self.tally
        tally.attempts += result.attempts
        if result.placed:
            tally.placed += 1
            self.pending.extend((pair,) for pair in result.reservations)
            if result.request_id in tally.asked:
                tally.landed[result.request_id] = result.reservations[0][1]
        else:
            tally.failed[_reason(result.reason)] += 1

    def _lifecycle_events(self) -> list[Event]:
        """Builds start for most held instances, some fail, some are abandoned;
        some running instances are deleted. An instance's reservations (its
        compute, its identifiers, its server group membership) go together."""
        events: list[Event] = []
        now = self.clock.now_ms
        for instance in self.pending:
            roll = self.rng.random()
            if roll < 0.6:
                events.extend(_consumes(instance, now))
                self.consumed.append(instance)
            elif roll < 0.8:
                events.extend(_releases(instance, now, "r"))
        self.pending.clear()
        keep = []
        for instance in self.consumed:
            if self.rng.random() < DELETE_SHARE:
                events.extend(_releases(instance, now, "d"))
            else:
                keep.append(instance)
        self.consumed = keep
        return events

    def _apply(self) -> None:
        for writer in self.writers:
            writer.catch_up()

    def _drive(self) -> None:
        self._apply()
        topic = self.app.settings.topics.outcomes
        for partition in range(self.app.settings.partitions):
            while True:
                records = self.app.log.read(topic, partition, self.outcome_offsets[partition], 5000)
                if not records:
                    break
                self.outcome_offsets[partition] = records[-1].offset + 1
                for record in records:
                    self._count(Outcome.from_json(record.value))

    def _count(self, outcome: Outcome) -> None:
        tally = self.tally
        tally.decisions += 1
        kind = outcome.kind
        if kind == Kind.REJECTED:
            for reason in outcome.reasons:
                tally.rejected[reason.code.name] += 1
        elif kind == Kind.CONSUMED:
            tally.consumed += 1
        elif kind == Kind.RELEASED:
            tally.released += 1
        elif kind == Kind.EXPIRED:
            tally.expired += 1
        if outcome.identifiers:
            live = tally.live_identifiers
            if kind in (Kind.ACCEPTED, Kind.PREPARED):
                for pair in outcome.identifiers:
                    if pair in live:
                        tally.duplicate_identifiers += 1
                    live[pair] = outcome.subject
            elif kind in (Kind.RELEASED, Kind.EXPIRED, Kind.ABORTED):
                for pair in outcome.identifiers:
                    live.pop(pair, None)

    def _nova(self) -> dict[str, Any]:
        """The requests that asked for a zone or an architecture, how many
        were placed, and how many landed where they should not (always 0),
        checked against the view's descriptions and aggregates."""
        snapshot = snapshot_from_view(self.app.engine, placements=False)
        tally = self.tally
        misplaced = 0
        for rid, pid in tally.landed.items():
            zone, arch = tally.asked[rid]
            provider = snapshot.providers[snapshot.row_of[pid]]
            zones = {provider.availability_zone} | {
                a.metadata.get("availability_zone")
                for a in snapshot.aggregates_of(snapshot.row_of[pid])
            }
            supported = {entry[0] for entry in provider.capabilities.get("supported_instances", ())}
            if (zone and zone not in zones) or (arch and arch not in supported):
                misplaced += 1
        return {
            "zone_or_arch_requests": len(tally.asked),
            "zone_or_arch_placed": len(tally.landed),
            "zone_or_arch_misplaced": misplaced,
            "metrics_reports": tally.metrics_reports,
            "server_groups": len(tally.groups),
            "group_requests": tally.group_requests,
            "group_placed": tally.group_placed,
            "group_checks": tally.group_checks,
            "group_members_checked": tally.group_members_checked,
            "group_rule_violations": len(tally.group_violations),
        }

    def _summary(self, elapsed_s: float) -> dict[str, Any]:
        with self.app.engine.connect() as conn:
            totals = resource_totals(conn)
            overcommitted = overcommitted_providers(conn)
        tally = self.tally
        return {
            "providers": self.cfg.providers,
            "partitions": self.app.settings.partitions,
            "requests": tally.requested,
            "placed": tally.placed,
            "failed": sum(tally.failed.values()),
            "failed_reasons": dict(sorted(tally.failed.items())),
            "claims_rejected_by_writer": sum(tally.rejected.values()),
            "rejected_reasons": dict(sorted(tally.rejected.items())),
            "attempts": tally.attempts,
            "consumed": tally.consumed,
            "released": tally.released,
            "expired": tally.expired,
            "utilisation": {r.resource_class: round(r.used, 4) for r in totals},
            "overcommitted_providers": overcommitted,
            "elapsed_s": round(elapsed_s, 3),
            "requests_per_s": round(tally.requested / elapsed_s, 1) if elapsed_s else None,
            "decisions": tally.decisions,
            **self._nova(),
            "data_dir": str(self.app.settings.data_dir),
            **(
                {
                    "batch_size": self.cfg.batch_size,
                    "batches_committed": tally.batches_committed,
                    "batches_aborted": tally.batches_aborted,
                    "partial_batches": tally.partial_batches,
                    "duplicate_identifiers": tally.duplicate_identifiers,
                    "identifiers_held": len(tally.live_identifiers),
                }
                if self.cfg.batch_size
                else {}
            ),
        }


def _reason(reason: str) -> str:
    """A failure's reason without its details, to count failures by."""
    return reason.split(";")[0]


def _consumes(instance: tuple[tuple[str, str], ...], now_ms: int) -> list[Event]:
    return [
        Consume(event_id=f"c-{rid}", ts_ms=now_ms, partition_key=key, reservation_id=rid)
        for rid, key in instance
    ]


def _releases(instance: tuple[tuple[str, str], ...], now_ms: int, tag: str) -> list[Event]:
    return [
        Release(event_id=f"{tag}-{rid}", ts_ms=now_ms, partition_key=key, reservation_id=rid)
        for rid, key in instance
    ]


def render(summary: dict[str, Any]) -> str:
    """The summary for a person."""
    lines = [
        f"providers {summary['providers']} in {summary['partitions']} partitions, "
        f"{summary['requests']} requests in {summary['elapsed_s']} s "
        f"({summary['requests_per_s']} requests/s)",
        f"placed {summary['placed']}, failed {summary['failed']}",
    ]
    for reason, count in summary["failed_reasons"].items():
        lines.append(f"  {count} x {reason}")
    lines.append(
        f"claims rejected by the writer (lost races, retried): "
        f"{summary['claims_rejected_by_writer']}; attempts {summary['attempts']}"
    )
    for code, count in summary["rejected_reasons"].items():
        lines.append(f"  {code}: {count}")
    lines.append(
        f"consumed {summary['consumed']}, released {summary['released']}, "
        f"expired {summary['expired']}"
    )
    lines.append(
        "utilisation: "
        + ", ".join(f"{rc} {share:.1%}" for rc, share in summary["utilisation"].items())
    )
    lines.append(f"overcommitted providers: {summary['overcommitted_providers']}")
    lines.append(
        f"zone or architecture asked by {summary['zone_or_arch_requests']} requests: "
        f"{summary['zone_or_arch_placed']} placed, {summary['zone_or_arch_misplaced']} misplaced; "
        f"{summary['metrics_reports']} metrics reports"
    )
    lines.append(
        f"server groups: {summary['server_groups']} created, "
        f"{summary['group_requests']} requests joined one, {summary['group_placed']} placed; "
        f"hard rules broken at {summary['group_checks']} checks of the view "
        f"({summary['group_members_checked']} members seen): {summary['group_rule_violations']}"
    )
    if "batch_size" in summary:
        lines.append(
            f"batches of {summary['batch_size']}: committed {summary['batches_committed']}, "
            f"aborted {summary['batches_aborted']}, partial {summary['partial_batches']}; "
            f"duplicate identifiers {summary['duplicate_identifiers']} "
            f"({summary['identifiers_held']} addresses and VNIs held at the end)"
        )
    data = summary["data_dir"]
    lines.append(
        f"log and view in {data} (try: berth replay --data-dir {data} --verify; "
        f"berth status, berth history NODE-OR-RESERVATION, berth metrics --once, "
        f"each with --data-dir {data})"
    )
    return "\n".join(lines)


def to_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, sort_keys=True)
