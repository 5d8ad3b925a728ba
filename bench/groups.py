"""The cost of a placement into a server group, through the scheduler worker.

    python -m bench.groups [--providers 2000] [--requests 2000] [--groups 200]

Three runs on the same cluster (16 partitions, the embedded log and SQLite,
the writers in this process): requests without a group, requests each in one
of ``--groups`` anti-affinity groups, and requests each in one of
``--groups`` affinity groups. All requests are submitted first, then the
scheduler worker answers them as ``berth serve`` does. A request without a
group is ranked in waves by the scheduler; one in a group created in the log
is a transaction (its compute in the provider's partition, its membership in
the group's, two-phase when those differ), placed one at a time. Progress
goes to stderr; the figures are one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench.common import note, timed
from bench.end_to_end import FLAVORS, NOW_MS, _cluster
from berth.app import App, Settings, tune_gc
from berth.client import Publisher
from berth.compile import compiled
from consumers.partition_writer import catch_up_all
from scheduling.config import SchedulerConfig
from schemas.events import ServerGroupCreated
from schemas.requests import PlacementRequest

PARTITIONS = 16


def run(providers: int, requests: int, groups: int, policy: str | None) -> dict[str, Any]:
    """Place ``requests`` (in ``groups`` groups of ``policy``, or none)."""
    with tempfile.TemporaryDirectory(prefix="berth-groups-") as tmp:
        app = App(Settings(data_dir=Path(tmp), partitions=PARTITIONS))
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        events = _cluster(providers)
        for start in range(0, len(events), 5000):
            edge.publish(events[start : start + 5000])
        if policy is not None:
            edge.publish(
                [
                    ServerGroupCreated(
                        event_id=f"group-{g}",
                        ts_ms=1,
                        partition_key=f"group-{g}",
                        group_id=f"group-{g}",
                        policy=policy,  # type: ignore[arg-type]
                        max_server_per_host=2 if policy == "anti-affinity" else None,
                    )
                    for g in range(groups)
                ]
            )
        writers = app.writers()
        catch_up_all(writers)
        worker = app.scheduler_worker(SchedulerConfig.default(), lambda: catch_up_all(writers))
        edge.submit(
            [
                PlacementRequest(
                    request_id=f"r{k}",
                    ts_ms=NOW_MS,
                    project_id="bench",
                    resources=FLAVORS[k % len(FLAVORS)],
                    group_id=None if policy is None else f"group-{k % groups}",
                )
                for k in range(requests)
            ]
        )
        with timed() as t:
            while worker.step():
                pass
            catch_up_all(writers)
        topic = app.settings.topics.placements
        answers = [
            json.loads(record.value)
            for p in range(PARTITIONS)
            for record in app.log.read(topic, p, 0, 10 * requests)
        ]
        app.close()
    placed = sum(a["placed"] for a in answers)
    return {
        "placements_per_s": round(placed / t[0], 1),
        "ms_per_placement": round(1000 * t[0] / max(placed, 1), 3),
        "placed": placed,
        "failed": len(answers) - placed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--providers", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--groups", type=int, default=200)
    args = parser.parse_args()
    tune_gc()
    figures: dict[str, Any] = {
        "providers": args.providers,
        "requests": args.requests,
        "groups": args.groups,
        "compiled": compiled(),
    }
    for label, policy in (
        ("plain", None),
        ("anti_affinity", "anti-affinity"),
        ("affinity", "affinity"),
    ):
        note(f"{label} ...")
        result = run(args.providers, args.requests, args.groups, policy)
        figures.update({f"{label}_{k}": v for k, v in result.items()})
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
