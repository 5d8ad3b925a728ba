"""Eight schedulers race for the memory of twenty small hosts' NUMA cells
with floating two-cell guests, through the ledger and two real writer
processes (``berth projector``, each owning half the partitions): each
claim's fit names the memory each guest cell takes of its host cell, the
writers hold it under the cell's limit (its small pages times the MEMORY_MB
allocation ratio) or refuse it, and the schedulers retry. No host cell is
ever over-filled, every host that can take a guest does, and a replay
decides it all again the same."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from berth.replay import replay
from consumers.scheduler import OutcomeFollower, Scheduled, Scheduler
from consumers.snapshot_source import LiveSnapshot
from projections.view.tables import outcomes, provider_usage, reservations
from scheduling.config import SchedulerConfig
from schemas.requests import PlacementRequest
from tests.builders import provider
from tests.builders import topology as described
from tests.polling import wait_for
from tests.processes import berth_running
from tests.racing import described_count, held_count, race
from tests.test_numa_topology import cell

NOW_MS = 10**12
HOSTS = 20
SCHEDULERS = 8
REQUESTS_EACH = 12  # 96 guests of 1024 MB per cell for 20 hosts that take 4 each
CELL_LIMIT_MB = 3072 * 1.5  # cell(): 3072 MiB of small pages; the ratio 1.5
CONFIG = SchedulerConfig.from_mapping(
    {
        "filters": {"enabled": ["ComputeFilter", "ResourceFilter", "NUMATopologyFilter"]},
        "weighers": {"RAMWeigher": {"multiplier": 1.0}},
    }
)


def _scheduler(app: App, settings: Settings, k: int, results: list[Scheduled]) -> None:
    own = Scheduler(
        Publisher(app.log, clock_ms=lambda: NOW_MS),
        CONFIG.engine(),
        LiveSnapshot(app.engine),
        OutcomeFollower(app.log, settings.topics.outcomes),
        max_attempts=40,
    )
    for i in range(REQUESTS_EACH):
        request = PlacementRequest(
            request_id=f"s{k}-{i}",
            ts_ms=NOW_MS,
            project_id="p",
            resources={"VCPU": 2, "MEMORY_MB": 2048},
            extra_specs={"hw:numa_nodes": "2"},
            lease_ms=10**8,
        )
        results.extend(own.schedule([request]))


def test_racing_schedulers_never_over_fill_a_cells_memory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = Settings(data_dir=data, partitions=4)
    where = ["--data-dir", str(data)]
    with App(settings) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        # the provider's MEMORY_MB far beyond its cells': the cells run out first
        edge.publish(
            [
                e
                for n in range(HOSTS)
                for e in (
                    *provider(f"h{n}", ts=1, VCPU=(64, 4.0), MEMORY_MB=(65536, 1.5)),
                    described(f"h{n}", ts=1, numa_cells=[cell(0, 0), cell(1, 4)]),
                )
            ]
        )

        results: list[Scheduled] = []
        with (
            berth_running("projector", *where, "--owned", "0,1"),
            berth_running("projector", *where, "--owned", "2,3"),
        ):
            wait_for(
                lambda: described_count(app.engine) == HOSTS,
                "the hosts' descriptions in the view",
                timeout_s=60,
            )
            race(_scheduler, [(app, settings, k, results) for k in range(SCHEDULERS)])
            placed = [r for r in results if r.placed]

            wait_for(
                lambda: held_count(app.engine) == len(placed),
                "the placed instances' holds in the view",
                timeout_s=60,
            )
        with app.engine.connect() as conn:
            items = [row[0][0] for row in conn.execute(select(reservations.c["items"]))]
            found = conn.execute(
                select(provider_usage.c.provider_id, provider_usage.c.topology_use)
            )
            use = {pid: u for pid, u in found}
            refusals = [
                reasons[0]["code"]
                for (reasons,) in conn.execute(
                    select(outcomes.c.reasons).where(outcomes.c.kind == "rejected")
                )
            ]
    memory: Counter[tuple[str, int]] = Counter()
    for item in items:
        for part in item["fit"]["cells"]:
            memory[(item["provider_id"], part["host_cell"])] += part["memory_mb"]
    assert len(results) == SCHEDULERS * REQUESTS_EACH
    assert [key for key, mb in memory.items() if mb > CELL_LIMIT_MB] == []
    assert len(placed) == 4 * HOSTS  # every host's cells filled to their limit
    # the race was run: writers refused claims a stale snapshot had fitted
    assert "TOPOLOGY_TAKEN" in refusals
    failed = [r for r in results if not r.placed]
    assert all(r.reason.startswith(("no valid host", "rejected by the writer")) for r in failed)
    # the view's record of what is held is the reservations' fits
    viewed = {(pid, c): mb for pid, u in use.items() for c, mb in u.get("memory", ())}
    assert viewed == dict(memory)
    result = replay(settings, verify=True)
    assert result.divergence is None and result.verified == result.outcomes > 0
