"""Eight schedulers race to pin CPUs and take VFs on twenty small hosts,
through the ledger and two real writer processes (``berth projector``, each
owning half the partitions): each claim carries the fit its scheduler chose
on a snapshot that may be stale, the writers hold it or refuse it, and the
schedulers retry. No CPU is ever pinned twice and no device given twice;
every host cell that can take a guest does."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Publisher
from consumers.scheduler import OutcomeFollower, Scheduled, Scheduler
from consumers.snapshot_source import LiveSnapshot
from projections.view.tables import provider_usage, reservations
from scheduling.config import SchedulerConfig
from schemas.requests import PlacementRequest
from tests.builders import provider
from tests.builders import topology as described
from tests.polling import wait_for
from tests.processes import berth_running
from tests.racing import described_count, held_count, race
from tests.test_numa_topology import cell, nic

NOW_MS = 10**12
HOSTS = 20
SCHEDULERS = 8
REQUESTS_EACH = 7  # 56 requests for 40 host cells of 2 dedicated CPUs
VF_ALIAS = {"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}
CONFIG = SchedulerConfig.from_mapping(
    {
        "filters": {
            "enabled": [
                "ComputeFilter",
                "ResourceFilter",
                "NUMATopologyFilter",
                "PciPassthroughFilter",
            ],
            "PciPassthroughFilter": {"alias": [VF_ALIAS]},
        },
        "weighers": {"RAMWeigher": {"multiplier": 1.0}},
    }
)


def test_racing_schedulers_never_pin_a_cpu_twice_nor_give_a_device_twice(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = Settings(data_dir=data, partitions=4)
    where = ["--data-dir", str(data)]
    with App(settings) as app:
        edge = Publisher(app.log, clock_ms=lambda: NOW_MS)
        # PCPU beyond the dedicated CPUs: the cells, not the amounts, are what runs out
        edge.publish(
            [
                e
                for n in range(HOSTS)
                for e in (
                    *provider(f"h{n}", ts=1, PCPU=16, MEMORY_MB=65536),
                    described(
                        f"h{n}", ts=1, numa_cells=[cell(0, 0), cell(1, 4)], pci_devices=nic()
                    ),
                )
            ]
        )

        results: list[Scheduled] = []
        lock = threading.Lock()

        def scheduler(k: int) -> None:
            own = Scheduler(
                Publisher(app.log, clock_ms=lambda: NOW_MS),
                CONFIG.engine(),
                LiveSnapshot(app.engine),
                OutcomeFollower(app.log, settings.topics.outcomes),
                max_attempts=40,
            )
            for i in range(REQUESTS_EACH):
                asks = {"hw:cpu_policy": "dedicated"}
                if i % 2:
                    asks["pci_passthrough:alias"] = "vf:1"
                    # the VFs are on cell 0: a guest on cell 1 may have one
                    asks["hw:pci_numa_affinity_policy"] = "preferred"
                request = PlacementRequest(
                    request_id=f"s{k}-{i}",
                    ts_ms=NOW_MS,
                    project_id="p",
                    resources={"PCPU": 2, "MEMORY_MB": 1024},
                    extra_specs=asks,
                    lease_ms=10**8,
                )
                done = own.schedule([request])
                with lock:
                    results.extend(done)

        with (
            berth_running("projector", *where, "--owned", "0,1"),
            berth_running("projector", *where, "--owned", "2,3"),
        ):
            wait_for(
                lambda: described_count(app.engine) == HOSTS,
                "the hosts' descriptions in the view",
                timeout_s=60,
            )
            race(scheduler, [(k,) for k in range(SCHEDULERS)])
            placed = [r for r in results if r.placed]

            wait_for(
                lambda: held_count(app.engine) == len(placed),
                "the placed instances' holds in the view",
                timeout_s=60,
            )
        with app.engine.connect() as conn:
            items = [
                (rid, row[0])
                for rid, row in conn.execute(
                    select(reservations.c.reservation_id, reservations.c["items"]).where(
                        reservations.c.status == "held"
                    )
                )
            ]
            found = conn.execute(
                select(provider_usage.c.provider_id, provider_usage.c.topology_use)
            )
            use = dict(found.all())
    cpus: Counter[tuple[str, int]] = Counter()
    devices: Counter[tuple[str, str]] = Counter()
    for _, item in items:
        fit = item["fit"]
        for part in fit["cells"]:
            cpus.update((item["provider_id"], cpu) for cpu in part["cpus"])
        devices.update((item["provider_id"], d) for d in fit.get("devices", ()))
    assert len(results) == SCHEDULERS * REQUESTS_EACH
    assert len(placed) == 2 * HOSTS  # every host cell took a guest
    assert [key for key, n in cpus.items() if n > 1] == []
    assert [key for key, n in devices.items() if n > 1] == []
    assert len(cpus) == 2 * len(placed)
    failed = [r for r in results if not r.placed]
    assert all(r.reason.startswith(("no valid host", "rejected by the writer")) for r in failed)
    # the view's record of what is held is the reservations' fits
    pinned = {(pid, cpu) for pid, u in use.items() for cpu, _ in u.get("cpus", ())}
    given = {(pid, d) for pid, u in use.items() for d, _ in u.get("devices", ())}
    assert pinned == set(cpus) and given == set(devices)
