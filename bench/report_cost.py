"""A metrics report's cost at one partition's writer, step by step.

    python -m bench.report_cost [--providers 1000] [--reports 2000] [--round 100]
    valgrind --tool=callgrind --instr-atstart=no python -m bench.report_cost

Described providers (as ``bench.projector --described`` makes them) each
report once; the writer takes the reports a round at a time and the CPU
time of each step is summed: fetching the round from the log, deciding
it (decoding included), encoding its outcomes, appending them (framing,
fsync), committing the view. Decoding is also timed alone. Under
callgrind each step's instructions a report are given too, which do not
drift with the machine's load as CPU time does.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from bench.callgrind import Marks, totals
from bench.common import metrics_report
from bench.projector import _populate
from berth.app import App, Settings
from consumers.partition_writer import PartitionWriter, catch_up_all
from ledger.log import Append
from ledger.partitioner import partition_for
from schemas.codec import decode_event
from schemas.outcomes import Kind

PARTITION = 0
_T = TypeVar("_T")


class Steps:
    """CPU seconds (and, under callgrind, instructions) summed per step."""

    def __init__(self) -> None:
        self.cpu_s: dict[str, float] = {}
        self.marks = Marks()

    def run(self, name: str, step: Callable[[], _T]) -> _T:
        self.marks.zero()
        started = time.process_time()
        result = step()
        self.cpu_s[name] = self.cpu_s.get(name, 0.0) + time.process_time() - started
        self.marks.dump(name)
        return result


def _reports(app: App, pids: list[str], count: int) -> list[bytes]:
    """``count`` reports of partition ``PARTITION``'s providers, appended."""
    mine = [p for p in pids if partition_for(p.encode(), app.settings.partitions) == PARTITION]
    raws = [metrics_report(mine[r % len(mine)], r, 3_000 + r) for r in range(count)]
    appends = [Append(PARTITION, mine[r % len(mine)].encode(), raw) for r, raw in enumerate(raws)]
    app.log.append(app.settings.topics.events, appends)
    return raws


def _rounds(writer: PartitionWriter, steps: Steps, count: int, per_round: int) -> int:
    """The writer's path (PartitionWriter.write), a round of ``per_round`` at
    a time; how many reports it took as applied."""
    log, topics = writer.log, writer.topics
    writer.batch_size = per_round
    decided = applied = 0
    while decided < count:
        records = steps.run("fetch", writer.fetch)
        batch = steps.run("decide", partial(writer.decide, records))
        outcomes, _ = steps.run("encode_outcomes", partial(writer.appends, batch))
        steps.run("append_outcomes", partial(log.append, topics.outcomes, outcomes))
        steps.run("commit_view", partial(writer.commit, batch))
        decided += len(records)
        applied += sum(a.outcomes[-1].kind == Kind.APPLIED for a in batch.applied)
    return applied


def bench(directory: Path, providers: int, count: int, per_round: int) -> dict[str, Any]:
    settings = Settings(
        data_dir=directory, partitions=4, db_url=f"sqlite:///{directory / 'view.db'}"
    )
    steps = Steps()
    with App(settings) as app:
        pids = _populate(app, providers, described=True)
        writers = app.writers()
        catch_up_all(writers)
        raws = _reports(app, pids, count)
        steps.marks.start()
        steps.run("decode_alone", lambda: [decode_event(raw) for raw in raws])
        applied = _rounds(writers[PARTITION], steps, count, per_round)
        steps.marks.stop()
    figures: dict[str, Any] = {
        "providers": providers,
        "reports": count,
        "per_round": per_round,
        "applied": applied,
        "cpu_us_per_report": {k: round(v / count * 1e6, 2) for k, v in steps.cpu_s.items()},
    }
    if steps.marks.running:
        counted = totals(os.getpid())
        figures["instructions_per_report"] = {
            name: round(counted[name] / count) for name in steps.cpu_s if name in counted
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--providers", type=int, default=1_000)
    parser.add_argument("--reports", type=int, default=2_000)
    parser.add_argument("--round", type=int, default=100, help="reports a writer's round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="berth-report-cost-") as folder:
        print(json.dumps(bench(Path(folder), args.providers, args.reports, args.round)))


if __name__ == "__main__":
    main()
