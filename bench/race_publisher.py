"""One publisher of the distributed race: its share of the requests, through
its own scheduler, against Kafka and PostgreSQL (see bench.end_to_end).

    python -m bench.race_publisher --log kafka://HOST:PORT --db URL --index K --of 8
                                   [--window W] [--waves D]

Once ready (its log, view and scheduler set up, the view read once), it
prints ``ready`` and waits for a line on stdin: the race starts for every
publisher at once, as Placement's harness starts its workers. Then it prints
one JSON object on one line: the results of its requests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace

from berth.app import Settings, open_log, tune_gc
from berth.client import Publisher
from consumers.scheduler import OutcomeFollower, Scheduled, Scheduler
from consumers.snapshot_source import LiveSnapshot
from projections.view.engine import make_engine
from scheduling.config import SchedulerConfig
from schemas.requests import PlacementRequest

NOW_MS = 1_700_000_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--of", type=int, required=True)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument(
        "--window",
        type=int,
        default=1,
        help="requests in flight at once: the next ranked while the writer decides the last",
    )
    parser.add_argument(
        "--waves",
        type=int,
        default=2,
        help="waves the window is ranked in, each on one snapshot, its claims one append",
    )
    args = parser.parse_args()
    depth = max(1, min(args.waves, args.window))
    settings = Settings(log_url=args.log, db_url=args.db)
    log = open_log(settings)
    engine = make_engine(args.db)
    scheduler = Scheduler(
        Publisher(log, settings.topics, clock_ms=lambda: NOW_MS),
        SchedulerConfig.default().engine(),
        LiveSnapshot(engine),
        OutcomeFollower(log, settings.topics.outcomes),
        max_attempts=10,
        decision_timeout_s=60.0,
        poll_interval_s=0.002,
        wave=-(-args.window // depth),
        depth=depth,
    )
    scheduler.snapshot()  # a running scheduler has read the view once
    tune_gc()  # as berth scheduler does once set up
    print("ready", flush=True)
    sys.stdin.readline()
    cpu_started = time.process_time()
    requests = [
        PlacementRequest(
            request_id=f"race-{i}",
            ts_ms=NOW_MS,
            project_id="ci",
            resources={"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 20},
        )
        for i in range(args.index, args.requests, args.of)
    ]
    scheduled: list[Scheduled] = []
    if args.window == 1:  # one request at a time, each waiting for its decision
        for request in requests:
            scheduled.extend(scheduler.schedule([request]))
    else:
        scheduled.extend(scheduler.schedule(requests))
    # what the race's figures read: no ranking to work out for the answers
    results = [replace(r, ranking=None).to_dict() for r in scheduled]
    log.close()
    engine.dispose()
    cpu_s = time.process_time() - cpu_started
    # one line, flushed: the race ends when the results are out, not once
    # this interpreter has torn itself down (a quarter of a second, loaded)
    print(json.dumps({"results": results, "cpu_s": cpu_s}), flush=True)


if __name__ == "__main__":
    main()
