"""Load balancing: the time to plan moves on 1,000 and 10,000 providers
holding 10 instances each on average, by policy.

    python -m bench.balance [--moves N]

Each figure is the median of 5 plans of ``--moves`` moves (default 10),
and the milliseconds per move. Progress goes to stderr; the figures are one
JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

from bench.common import note
from scheduling.balancers.base import Instance
from scheduling.config import SchedulerConfig
from scheduling.model import Provider, Snapshot

FLAVORS = (
    {"VCPU": 1, "MEMORY_MB": 2048},
    {"VCPU": 2, "MEMORY_MB": 4096},
    {"VCPU": 4, "MEMORY_MB": 8192},
)

POLICIES = {
    "evenly_distributed": {"policy": "evenly_distributed", "high_utilization": 70},
    "power_saving": {"policy": "power_saving", "high_utilization": 80, "low_utilization": 20},
    "vm_evenly_distributed": {"policy": "vm_evenly_distributed", "high_instance_count": 12},
}


def cluster(n: int, seed: int = 7) -> tuple[Snapshot, list[Instance]]:
    """Providers of 32 VCPU / 128 GiB, each with 0-20 instances of mixed sizes."""
    rng = random.Random(seed)
    providers = []
    inventories: dict[str, dict[str, dict[str, Any]]] = {}
    instances = []
    for i in range(n):
        pid = f"node-{i:06d}"
        used = {"VCPU": 0, "MEMORY_MB": 0}
        consumers = set()
        for k in range(rng.randrange(0, 21)):
            flavor = rng.choice(FLAVORS)
            if used["VCPU"] + flavor["VCPU"] > 32:
                break
            rid = f"{pid}-r{k}"
            instances.append(Instance(rid, f"vm-{rid}", "p", pid, flavor))
            consumers.add(f"vm-{rid}")
            for rc, amount in flavor.items():
                used[rc] += amount
        providers.append(Provider(pid, instances=frozenset(consumers)))
        inventories[pid] = {
            "VCPU": {"total": 32, "used": used["VCPU"]},
            "MEMORY_MB": {"total": 131_072, "used": used["MEMORY_MB"]},
        }
    return Snapshot.build(providers, inventories), instances


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--moves", type=int, default=10)
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    for n in (1_000, 10_000):
        snapshot, instances = cluster(n)
        figures[f"instances_{n}"] = len(instances)
        for name, section in POLICIES.items():
            note(f"{n} providers, {name} ...")
            config = SchedulerConfig.from_mapping({"balance": {**section, "max_moves": args.moves}})
            samples = []
            for _ in range(5):
                balancer = config.balancer()
                started = time.perf_counter()
                plan = balancer.plan(snapshot, instances)
                samples.append(time.perf_counter() - started)
            moved = len(plan.moves)
            median_ms = statistics.median(samples) * 1000
            figures[f"{name}_plan_ms_{n}"] = round(median_ms, 1)
            figures[f"{name}_moves_{n}"] = moved
            figures[f"{name}_ms_per_move_{n}"] = round(median_ms / moved, 2) if moved else None
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
