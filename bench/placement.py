"""Placement engine latency: one decision with the default filters and
weighers, scanning every provider, at 1,000 / 10,000 / 100,000 providers
(bench.scale measures bounded mode); and with a placement
scriptlet that packs (the README's example) at 1,000 and 10,000.

    python -m bench.placement [--decisions N]

Progress goes to stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

import numpy as np

from bench.common import note, timed
from scheduling.config import SchedulerConfig
from scheduling.engine import Bounded
from scheduling.model import Provider, Request, Snapshot
from scheduling.scriptlet import Scriptlet

SIZES = ((64, 4.0, 262_144, 2_000), (32, 4.0, 131_072, 1_000), (16, 4.0, 65_536, 500))


def cluster(n: int, seed: int = 5) -> Snapshot:
    """Mixed node sizes, each some way full, a few disabled."""
    rng = random.Random(seed)
    providers = []
    inventories: dict[str, dict[str, dict[str, Any]]] = {}
    for i in range(n):
        pid = f"node-{i:06d}"
        vcpus, ratio, memory_mb, disk_gb = rng.choice(SIZES)
        fill = rng.random()
        providers.append(
            Provider(
                pid,
                host=pid,
                state="enabled" if rng.random() > 0.02 else "disabled",
                availability_zone=rng.choice(("az1", "az2")),
                num_io_ops=rng.randrange(0, 8),
            )
        )
        inventories[pid] = {
            "VCPU": {"total": vcpus, "allocation_ratio": ratio, "used": int(vcpus * ratio * fill)},
            "MEMORY_MB": {"total": memory_mb, "reserved": 512, "used": int(memory_mb * fill * 0.9)},
            "DISK_GB": {"total": disk_gb, "used": int(disk_gb * fill * 0.9)},
        }
    return Snapshot.build(providers, inventories)


PACKING = """
def instance_placement(request, candidates):
    if request.project_id == "frozen":
        return "project frozen"
    wanted = get_instance_resources()["VCPU"]
    for c in reversed(candidates):  # pack: the least free that fits
        if get_provider_resources(c["provider_id"])["VCPU"]["free"] >= wanted:
            set_target(c["provider_id"])
            return None
"""


def latencies(
    snapshot: Snapshot, decisions: int, scriptlet: Scriptlet | None = None
) -> dict[str, float]:
    config = SchedulerConfig.default()
    config.scriptlet = scriptlet
    config.bounded = Bounded("full")  # the full scan; bench.scale measures bounded mode
    engine = config.engine()
    flavors = (
        {"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 40},
        {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 80},
    )
    samples = []
    for k in range(decisions):
        request = Request(f"r{k}", flavors[k % 2])
        started = time.perf_counter()
        placement = engine.place(snapshot, request)
        samples.append(time.perf_counter() - started)
        assert placement.placed
    ms = np.array(samples) * 1000
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--decisions", type=int, default=300)
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    for n in (1_000, 10_000, 100_000):
        note(f"{n} providers ...")
        with timed() as t:
            snapshot = cluster(n)
        figures[f"snapshot_build_s_{n}"] = round(t[0], 3)
        for key, value in latencies(snapshot, args.decisions if n < 100_000 else 100).items():
            figures[f"{key}_{n}"] = value
        if n < 100_000:
            packing = latencies(snapshot, args.decisions, Scriptlet(PACKING))
            for key, value in packing.items():
                figures[f"scriptlet_{key}_{n}"] = value
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
