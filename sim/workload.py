"""What the simulated users do, drawn from the run's random generator:
register providers and change their inventories, retire them, define
identifier pools, create and delete server groups, ask for single
placements (some of them a group's members) and batches of the three
modes, and consume, renew and release what was placed, or delete a
consumer with everything it holds; and what the operator does: set,
assign and delete scheduling policies.

The workload learns what was placed the way a user does: from the answers
on the placements topic. Every event it publishes is stamped by one of a
few producers whose clocks are skewed, within the edge's bound."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from consumers.policies import DEFAULT, PolicyError
from ledger.log import Tail
from ledger.publisher import Publisher
from schemas.requests import BatchRequest, PlacementRequest
from sim.system import Clock

MAX_PRODUCER_SKEW_MS = 2_000
"""Producers' clocks run up to this far either side of the simulation's; the
scheduler's up to half as far: every pair stays within the edge's 5 s."""

PROJECTS = ("alpha", "beta")
POLICIES: dict[str, dict[str, Any]] = {
    "pack": {"weighers": {"RAMWeigher": -1.0, "CPUWeigher": -1.0}},
    "spread": {
        "weighers": {"RAMWeigher": 1.0, "CPUWeigher": 2.0},
        "scheduler": {"max_attempts": 5},
    },
    # no group filter: the writers alone hold anti-affinity against its picks
    "lean": {
        "filters": {"enabled": ["RetryFilter", "ComputeFilter", "ResourceFilter"]},
        "scheduler": {"max_attempts": 2},
    },
}
"""The configurations the operator sets as policies, under these names or as the default."""

_SHAPES = (
    {"VCPU": 1, "MEMORY_MB": 1024},
    {"VCPU": 2, "MEMORY_MB": 4096},
    {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 40},
    {"VCPU": 8, "MEMORY_MB": 16384},
)


@dataclass(slots=True)
class Placed:
    """A reservation the answers named, and what the workload did with it."""

    reservation_id: str
    key: str
    consumer_id: str
    consumed: bool = False


@dataclass(slots=True)
class Asked:
    """A request or batch submitted, and the answer it got."""

    mode: str
    """``single``, or a batch's mode."""
    instances: int
    least: int
    answer: dict[str, Any] | None = None
    project_id: str = ""


@dataclass(slots=True)
class Workload:
    rng: random.Random
    clock: Clock
    edge: Publisher
    answers: Tail
    moves: Tail
    """The balancer's proposals, which the workload carries out (or not) as
    the service moving instances would."""
    providers: list[str] = field(default_factory=list)
    retired: set[str] = field(default_factory=set)
    pools: list[str] = field(default_factory=list)
    placed: dict[str, Placed] = field(default_factory=dict)
    asked: dict[str, Asked] = field(default_factory=dict)
    consumers: list[str] = field(default_factory=list)
    skews: tuple[int, ...] = ()
    answered: list[str] = field(default_factory=list)
    """Requests answered since the checker last looked."""
    groups: dict[str, str] = field(default_factory=dict)
    """Request id -> its ad-hoc anti-affinity group (none created in the log)."""
    server_groups: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """Server groups created in the log and not deleted: id -> (policy, project)."""
    events: int = 0
    published: int = 0
    policies: Callable[[dict[str, Any]], int] | None = None
    """Appends a policy record as ``berth policy`` does (checked, then appended)."""

    def ts(self) -> int:
        skew = self.rng.choice(self.skews) if self.skews else 0
        return max(0, self.clock.now_ms + skew)

    def next_id(self, prefix: str) -> str:
        self.events += 1
        return f"{prefix}{self.events}"

    # -- the operations --------------------------------------------------------

    def act(self) -> str:
        """One operation; its name."""
        self.follow_answers()
        roll = self.rng.random()
        if len(self.providers) < 3 or roll < 0.05:
            return self.register()
        if roll < 0.10:
            return self.change_inventory()
        if roll < 0.115:
            return self.retire()
        if roll < 0.13 or not self.pools:
            return self.define_pool()
        if roll < 0.21:
            return self.claim()
        if roll < 0.45:
            return self.request()
        if roll < 0.60:
            return self.batch()
        if roll < 0.70:
            return self.consume()
        if roll < 0.82:
            return self.release()
        if roll < 0.90:
            return self.renew()
        if roll < 0.94:
            return self.delete_consumer()
        if roll < 0.955:
            return self.move()
        if roll < 0.97:
            return self.server_group()
        if roll < 0.985:
            return self.policy()
        return self.resubmit()

    def publish(self, events: list[dict[str, Any]]) -> None:
        self.edge.publish(events)
        self.published += len(events)
        if self.rng.random() < 0.03:
            # a producer that did not hear back sends the same events again
            self.edge.publish(events)
            self.published += len(events)

    def register(self) -> str:
        if len(self.providers) >= 16:
            return self.change_inventory()
        pid = f"p{len(self.providers)}"
        self.providers.append(pid)
        self.publish(
            [
                {"type": "provider_registered", **self._base(pid), "provider_id": pid, "name": pid},
                {
                    "type": "inventory_set",
                    **self._base(pid),
                    "provider_id": pid,
                    "inventories": self._inventories(),
                },
            ]
        )
        return "register"

    def _inventories(self) -> dict[str, Any]:
        rng = self.rng
        return {
            "VCPU": {
                "total": rng.choice((4, 8, 16, 32)),
                "allocation_ratio": rng.choice((1.0, 2.0)),
            },
            "MEMORY_MB": {"total": rng.choice((8192, 16384, 65536))},
            "DISK_GB": {"total": rng.choice((100, 500)), "reserved": rng.choice((0, 20))},
        }

    def _live_provider(self) -> str | None:
        live = [p for p in self.providers if p not in self.retired]
        return self.rng.choice(live) if live else None

    def change_inventory(self) -> str:
        """Grow or shrink a provider's inventory, under load: a shrink below
        what is in use is refused by its writer."""
        pid = self._live_provider()
        if pid is None:
            return self.register()
        event = {"type": "inventory_set", **self._base(pid), "provider_id": pid}
        self.publish([{**event, "inventories": self._inventories()}])
        return "inventory"

    def retire(self) -> str:
        pid = self._live_provider()
        if pid is None or len(self.providers) - len(self.retired) < 3:
            return self.change_inventory()
        self.retired.add(pid)
        if self.rng.random() < 0.5:
            self.publish([{"type": "provider_retired", **self._base(pid), "provider_id": pid}])
        else:
            self.publish(
                [
                    {
                        "type": "provider_state_set",
                        **self._base(pid),
                        "provider_id": pid,
                        "state": "disabled",
                    }
                ]
            )
        return "retire"

    def define_pool(self) -> str:
        if len(self.pools) >= 3:
            return self.request()
        pool = f"pool{len(self.pools)}"
        self.pools.append(pool)
        size = self.rng.randint(3, 12)  # small, so that pools run out
        self.publish(
            [
                {
                    "type": "pool_defined",
                    **self._base(pool),
                    "pool_id": pool,
                    "kind": "range",
                    "first": 100,
                    "last": 100 + size - 1,
                }
            ]
        )
        return "pool"

    def _member(self, rid: str, identifiers: bool) -> PlacementRequest:
        rng = self.rng
        items: tuple[dict[str, str], ...] = ()
        if identifiers and self.pools:
            items = ({"pool_id": rng.choice(self.pools)},)
        return PlacementRequest.model_validate(
            {
                "request_id": rid,
                "ts_ms": self.ts(),
                "project_id": rng.choice(PROJECTS),
                "resources": dict(rng.choice(_SHAPES)),
                "num_instances": rng.randint(1, 3),
                "lease_ms": rng.choice((5_000, 30_000, 120_000)),
                "identifiers": items,
            }
        )

    def claim(self) -> str:
        """A claim published directly (``berth publish``, the HTTP API), on
        a provider the user picked: its writer alone decides whether it fits."""
        pid = self._live_provider()
        if pid is None:
            return self.register()
        rid = self.next_id("c")
        shape = self.rng.choice(_SHAPES)
        self.publish(
            [
                {
                    "type": "claim",
                    **self._base(pid),
                    "reservation_id": rid,
                    "consumer_id": rid,
                    "project_id": "gamma",
                    "items": [{"provider_id": pid, "resources": dict(shape)}],
                    "lease_ms": self.rng.choice((5_000, 60_000)),
                }
            ]
        )
        self._placed(rid, pid, rid)  # perhaps refused: a consume of it is refused too
        return "claim"

    def request(self) -> str:
        rid = self.next_id("r")
        request = self._member(rid, identifiers=self.rng.random() < 0.15)
        roll = self.rng.random()
        if request.num_instances > 1 and roll < 0.3:
            # each instance on its own provider, a rule the writers hold too
            spread = {"group_id": f"group-{rid}", "group_policy": "anti-affinity"}
            request = request.model_copy(update=spread)
            self.groups[rid] = spread["group_id"]
        elif self.server_groups and roll < 0.7:
            # a member of a group created in the log, whose partition holds
            # its rule across requests, whatever partitions their providers
            # are in; mostly a group its project may join, now and then not
            mine = [
                gid
                for gid, (_, owner) in sorted(self.server_groups.items())
                if owner in (None, request.project_id)
            ]
            gid = self.rng.choice(mine or sorted(self.server_groups))
            if self.rng.random() < 0.1:
                gid = self.rng.choice(sorted(self.server_groups))
            request = request.model_copy(update={"group_id": gid})
        self.edge.submit([request])  # asked once acknowledged: a torn append never was
        instances = request.num_instances
        self.asked[rid] = Asked("single", instances, instances, project_id=request.project_id)
        return "request"

    def batch(self) -> str:
        rng = self.rng
        bid = self.next_id("b")
        members = tuple(
            self._member(f"{bid}m{i}", identifiers=rng.random() < 0.2)
            for i in range(rng.randint(1, 3))
        )
        mode = rng.choice(("all_or_nothing", "at_least", "queue"))
        total = sum(m.num_instances for m in members)
        least = rng.randint(1, total) if mode == "at_least" else total
        batch = BatchRequest.model_validate(
            {
                "batch_id": bid,
                "ts_ms": self.ts(),
                "members": members,
                "mode": mode,
                "priority": rng.randint(0, 3),
                "prepare_timeout_ms": rng.choice((2_000, 30_000)),
                "queue_timeout_ms": rng.choice((0, 3_000, 10_000)),
                **({"min_count": least} if mode == "at_least" else {}),
            }
        )
        self.edge.submit([batch])
        self.asked[bid] = Asked(mode, total, least)
        return "batch"

    def server_group(self) -> str:
        """Create a server group (any of Nova's policies, perhaps of one
        project, perhaps allowing two per host), or delete one: its
        memberships go with it."""
        rng = self.rng
        if self.server_groups and (len(self.server_groups) >= 6 or rng.random() < 0.2):
            gid = rng.choice(sorted(self.server_groups))
            del self.server_groups[gid]
            self.publish([{"type": "server_group_deleted", **self._base(gid), "group_id": gid}])
            return "group deleted"
        gid = self.next_id("g")
        policy = rng.choice(("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"))
        event: dict[str, Any] = {
            "type": "server_group_created",
            **self._base(gid),
            "group_id": gid,
            "policy": policy,
            "project_id": rng.choice((None, None, *PROJECTS)),
        }
        if policy == "anti-affinity" and rng.random() < 0.3:
            event["max_server_per_host"] = 2
        self.publish([event])
        self.server_groups[gid] = (policy, event["project_id"])
        return "group"

    def resubmit(self) -> str:
        """The same request id again: it must keep its first answer."""
        answered = [rid for rid, a in self.asked.items() if a.mode == "single" and a.answer]
        if not answered:
            return self.request()
        rid = self.rng.choice(answered)
        self.edge.submit([self._member(rid, identifiers=False)])
        return "resubmit"

    def policy(self) -> str:
        """The operator sets a policy (perhaps the default), gives a project
        one (or takes it back), or deletes one, perhaps one a project is
        still given (its requests are then refused), or tries to delete the
        default (refused at the edge: nothing appended)."""
        if self.policies is None:
            return self.request()
        rng = self.rng
        roll = rng.random()
        name = rng.choice((*POLICIES, DEFAULT))
        record: dict[str, Any]
        if roll < 0.45:
            mapping = POLICIES[rng.choice(list(POLICIES))]
            record = {"type": "policy_set", "name": name, "policy": mapping}
        elif roll < 0.8:
            given = rng.choice((*POLICIES, DEFAULT, None))
            record = {"type": "policy_assigned", "project_id": rng.choice(PROJECTS), "name": given}
        else:
            record = {"type": "policy_deleted", "name": name}
        try:
            self.policies({**record, "ts_ms": self.ts()})
        except PolicyError:
            return "policy refused"
        return "policy"

    def _pick(self, consumed: bool | None = None) -> Placed | None:
        choices = [p for p in self.placed.values() if consumed is None or p.consumed == consumed]
        return self.rng.choice(choices) if choices else None

    def _reservation_event(self, kind: str, placed: Placed, **extra: Any) -> None:
        base = self._base(placed.key)
        self.publish([{"type": kind, **base, "reservation_id": placed.reservation_id, **extra}])

    def consume(self) -> str:
        placed = self._pick(consumed=False)
        if placed is None:
            return self.request()
        self._reservation_event("consume", placed)
        placed.consumed = True
        return "consume"

    def release(self) -> str:
        placed = self._pick()
        if placed is None:
            return self.request()
        self._reservation_event("release", placed)
        del self.placed[placed.reservation_id]
        return "release"

    def renew(self) -> str:
        placed = self._pick(consumed=False)
        if placed is None:
            return self.request()
        self._reservation_event("renew", placed, lease_ms=self.rng.choice((5_000, 60_000)))
        return "renew"

    def delete_consumer(self) -> str:
        if not self.consumers:
            return self.request()
        consumer = self.rng.choice(self.consumers)
        self.consumers.remove(consumer)
        self.edge.release_consumer(consumer)
        for rid in [r for r, p in self.placed.items() if p.consumer_id == consumer]:
            del self.placed[rid]
        return "delete-consumer"

    def move(self) -> str:
        """Carry out the balancer's proposals so far: most moves are made
        (the new reservation consumed, the old released), some abandoned
        (the new one released)."""
        moved = 0
        for record in self.moves.records():
            proposal = json.loads(record.value)
            new = Placed(proposal["claim_id"], proposal["destination"], proposal["consumer_id"])
            if self.rng.random() < 0.2:
                self._reservation_event("release", new)
                continue
            self._reservation_event("consume", new)
            old = self.placed.pop(proposal["reservation_id"], None)
            if old is not None:
                self._reservation_event("release", old)
            new.consumed = True
            self.placed[new.reservation_id] = new
            moved += 1
        return "move" if moved else self.request()

    # -- answers ---------------------------------------------------------------

    def follow_answers(self) -> None:
        for record in self.answers.records():
            answer = json.loads(record.value)
            asked = self.asked.get(answer["request_id"])
            if asked is None or answer.get("status") == "queued":
                continue
            if asked.answer is None:
                asked.answer = answer
                self.answered.append(answer["request_id"])
            if not answer["placed"]:
                continue
            for instance in answer.get("instances") or ():
                consumer = f"{answer['request_id']}.{instance['member']}.{instance['index']}"
                for rid, key in zip(instance["reservation_ids"], instance["keys"], strict=True):
                    self._placed(rid, key, consumer)
            if not answer.get("batch"):
                for rid, pid in answer["reservations"]:
                    self._placed(rid, pid, rid.rsplit(".", 1)[0])

    def _placed(self, rid: str, key: str, consumer: str) -> None:
        if rid not in self.placed:
            self.placed[rid] = Placed(rid, key, consumer)
            if consumer not in self.consumers:
                self.consumers.append(consumer)

    def _base(self, key: str) -> dict[str, Any]:
        return {"event_id": self.next_id("e"), "ts_ms": self.ts(), "partition_key": key}
