"""A small ledger on two partitions, and ways to damage it, for the tests
of a damaged data directory."""

from __future__ import annotations

import shutil
from pathlib import Path

from berth.app import App, Settings
from berth.client import Decisions, Publisher
from consumers.partition_writer import catch_up_all
from ledger.partitioner import partition_for
from schemas.events import Event
from schemas.outcomes import Outcome
from tests.builders import claim, provider, release

PARTITIONS = 2


def node(partition: int, n: int = 0) -> str:
    """A provider id routed to ``partition``."""
    found = [
        f"node-{i}"
        for i in range(200)
        if partition_for(f"node-{i}".encode(), PARTITIONS) == partition
    ]
    return found[n]


def workload(start: int, count: int) -> list[Event]:
    """Claims and releases on one provider of each partition."""
    events: list[Event] = []
    for i in range(start, start + count):
        for p in range(PARTITIONS):
            events.append(claim(f"r{p}-{i}", node(p), ts=1000 + i, lease_ms=10**8, VCPU=1))
            if i % 3 == 0:
                events.append(
                    release(f"r{p}-{i}", ts=1000 + i).model_copy(update={"partition_key": node(p)})
                )
    return events


def ledger(data: Path, records_each: int = 60) -> Settings:
    """A data directory whose view has applied everything in its log."""
    settings = Settings(data_dir=data, partitions=PARTITIONS)
    with App(settings) as app:
        edge = Publisher(app.log, settings.topics, clock_ms=lambda: 10**6)
        edge.publish([e for p in range(PARTITIONS) for e in provider(node(p), VCPU=10_000)])
        edge.publish(workload(0, records_each))
        catch_up_all(app.writers())
    return settings


def flip(data: Path, topic: str, partition: int, fraction: float = 0.5) -> None:
    path = data / "log" / topic / f"p{partition}.log"
    raw = bytearray(path.read_bytes())
    raw[int(len(raw) * fraction)] ^= 0x10
    path.write_bytes(bytes(raw))


def served(app: App, settings: Settings, reservation: str) -> list[Outcome]:
    """A claim on partition 1's provider, decided by the server: it is up."""
    decisions = Decisions(app.log, settings.topics)
    event = claim(reservation, node(1), ts=6000, VCPU=1)
    Publisher(app.log, settings.topics).publish([event])
    assert decisions.wait([event.event_id], timeout_s=30) == []
    return decisions.found[event.event_id]


def view_ahead_of_its_log(tmp_path: Path) -> Settings:
    """An older copy of the log put back under a newer view: the records the
    view applied since are gone."""
    data = tmp_path / "data"
    settings = ledger(data, records_each=10)
    shutil.copytree(data / "log", tmp_path / "old-log")
    with App(settings) as app:
        edge = Publisher(app.log, settings.topics, clock_ms=lambda: 10**6)
        edge.publish(workload(10, 10))
        catch_up_all(app.writers())
    shutil.rmtree(data / "log")
    shutil.copytree(tmp_path / "old-log", data / "log")
    return settings
