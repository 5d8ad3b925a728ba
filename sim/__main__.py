"""``python -m sim``: one seed, or a sweep of seeds for a time budget.

Every run prints one JSON line. A failing run prints the line that
reproduces it and the smallest step count that still fails."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

from sim.run import Rates, run, shrink


def _same_hashes() -> None:
    """Set and dict orders of strings follow the interpreter's hash seed:
    fix it, so that a seed replays the same run in another process."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "sim", *sys.argv[1:]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    parser.add_argument("--seed", type=int, help="one run of this seed")
    parser.add_argument("--steps", type=int, default=2_000, help="steps per run")
    parser.add_argument("--seeds", type=str, default="", help="a sweep of these, comma separated")
    parser.add_argument("--random", type=int, default=0, help="and this many random seeds")
    parser.add_argument("--budget-s", type=float, default=0.0, help="sweep new seeds this long")
    parser.add_argument("--no-faults", action="store_true", help="the workload alone")
    parser.add_argument("--no-shrink", action="store_true", help="report a failure as it is")
    args = parser.parse_args(argv)
    if argv is None:  # from the command line (a test calling main keeps its process)
        _same_hashes()
    rates = Rates.none() if args.no_faults else None
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.seed is not None:
        seeds.append(args.seed)
    draw = random.SystemRandom()
    seeds += [draw.randrange(1 << 32) for _ in range(args.random)]
    deadline = time.monotonic() + args.budget_s
    total_ops = runs = 0
    started = time.monotonic()
    while seeds or (args.budget_s and time.monotonic() < deadline):
        seed = seeds.pop(0) if seeds else draw.randrange(1 << 32)
        result = run(seed, args.steps, rates)
        print(json.dumps(result.summary()), flush=True)
        runs += 1
        total_ops += result.ops
        if not result.ok:
            again = f"python -m sim --seed {seed} --steps {args.steps}"
            print("last steps:", *result.trace, sep="\n  ", flush=True)
            print(f"FAILED: {result.violation}\nreproduce: {again}", flush=True)
            if not args.no_shrink:
                smallest, _ = shrink(seed, result.at_step, rates)
                print(f"smallest: python -m sim --seed {seed} --steps {smallest}", flush=True)
            return 1
    elapsed = time.monotonic() - started
    print(
        json.dumps(
            {"runs": runs, "ops": total_ops, "seconds": round(elapsed, 1),
             "ops_per_s": round(total_ops / elapsed) if elapsed else 0, "ok": True}
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
