"""The simulator's throughput: runs of new random seeds, with faults, in
``--jobs`` processes, until ``--ops`` simulated operations have run (a step
of the simulation or a wait of the scheduler, each followed by the
invariant checks). The last line is JSON: operations, wall and CPU seconds,
operations per second of each, and the faults injected by kind.

    python -m bench.sim --ops 1000000 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

from bench.common import note
from sim.run import Result, run


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sim", description=__doc__)
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=3_000, help="steps per run")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    if os.environ.get("PYTHONHASHSEED") != "0":  # a seed replays in any process
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "bench.sim", *sys.argv[1:]])
    draw = random.SystemRandom()
    ops = runs = 0
    cpu = 0.0
    faults: Counter[str] = Counter()
    failed: list[str] = []
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        running: set[Future[Result]] = set()
        while ops < args.ops or running:
            while ops < args.ops and len(running) < args.jobs:
                running.add(pool.submit(run, draw.randrange(1 << 32), args.steps))
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                result = future.result()
                runs += 1
                ops += result.ops
                cpu += result.cpu_s
                faults.update({k[7:]: v for k, v in result.counts.items() if k[:6] == "fault:"})
                if not result.ok:
                    failed.append(f"python -m sim --seed {result.seed} --steps {args.steps}")
                note(f"{runs} runs, {ops} ops, {time.perf_counter() - started:.0f} s")
            if failed:
                break
    wall = time.perf_counter() - started
    print(
        json.dumps(
            {
                "bench": "sim",
                "runs": runs,
                "steps_per_run": args.steps,
                "jobs": args.jobs,
                "ops": ops,
                "wall_s": round(wall, 1),
                "ops_per_s": round(ops / wall),
                "cpu_s": round(cpu, 1),
                "ops_per_cpu_s": round(ops / cpu) if cpu else 0,
                "faults": dict(sorted(faults.items())),
                "violations": failed,
            }
        )
    )


if __name__ == "__main__":
    main()
