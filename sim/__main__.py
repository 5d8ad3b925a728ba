"""``python -m sim``: one seed, or a sweep of seeds for a time budget.

Every run prints one JSON line, and a sweep a last line of totals. A failing
run prints its last steps, the line that reproduces it and the smallest
step count that still fails."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

from sim.run import Rates, Result, run, shrink


def _same_hashes() -> None:
    """Set and dict orders of strings follow the interpreter's hash seed:
    fix it, so that a seed replays the same run in another process."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "sim", *sys.argv[1:]])


def _seeds(args: argparse.Namespace) -> Iterator[int]:
    """The seeds asked for, then new random ones until the budget is spent."""
    draw = random.SystemRandom()
    yield from (int(s) for s in args.seeds.split(",") if s)
    if args.seed is not None:
        yield args.seed
    for _ in range(args.random):
        yield draw.randrange(1 << 32)
    deadline = time.monotonic() + args.budget_s
    while args.budget_s and time.monotonic() < deadline:
        yield draw.randrange(1 << 32)


def _results(args: argparse.Namespace, rates: Rates | None) -> Iterator[Result]:
    """Each seed's result, as it finishes: in this process, or ``jobs`` at once."""
    seeds = _seeds(args)
    if args.jobs <= 1:
        for seed in seeds:
            yield run(seed, args.steps, rates)
        return
    with ProcessPoolExecutor(args.jobs) as pool:
        running: set[Future[Result]] = set()
        for seed in seeds:
            running.add(pool.submit(run, seed, args.steps, rates))
            if len(running) < args.jobs:
                continue
            done, running = wait(running, return_when=FIRST_COMPLETED)
            yield from (f.result() for f in done)
        for future in running:
            yield future.result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    parser.add_argument("--seed", type=int, help="one run of this seed")
    parser.add_argument("--steps", type=int, default=2_000, help="steps per run")
    parser.add_argument("--seeds", type=str, default="", help="a sweep of these, comma separated")
    parser.add_argument("--random", type=int, default=0, help="and this many random seeds")
    parser.add_argument("--budget-s", type=float, default=0.0, help="sweep new seeds this long")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, in processes")
    parser.add_argument("--no-faults", action="store_true", help="the workload alone")
    parser.add_argument("--no-shrink", action="store_true", help="report a failure as it is")
    args = parser.parse_args(argv)
    if argv is None:  # from the command line (a test calling main keeps its process)
        _same_hashes()
    rates = Rates.none() if args.no_faults else None
    started = time.monotonic()
    runs = ops = 0
    cpu_s = 0.0
    faults: Counter[str] = Counter()
    for result in _results(args, rates):
        print(json.dumps(result.summary()), flush=True)
        runs += 1
        ops += result.ops
        cpu_s += result.cpu_s
        faults.update({k: v for k, v in result.counts.items() if k.startswith("fault:")})
        if not result.ok:
            again = f"python -m sim --seed {result.seed} --steps {args.steps}"
            print("last steps:", *result.trace, sep="\n  ", flush=True)
            print(f"FAILED: {result.violation}\nreproduce: {again}", flush=True)
            if not args.no_shrink:
                smallest, _ = shrink(result.seed, result.at_step, rates)
                again = f"python -m sim --seed {result.seed} --steps {smallest}"
                print(f"smallest: {again}", flush=True)
            return 1
    elapsed = time.monotonic() - started
    totals = {
        "runs": runs,
        "ops": ops,
        "seconds": round(elapsed, 1),
        "cpu_s": round(cpu_s, 1),
        "jobs": args.jobs,
        "ops_per_s": round(ops / elapsed) if elapsed else 0,
        "faults": sum(faults.values()),
        "ok": True,
    }
    print(json.dumps(totals), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
