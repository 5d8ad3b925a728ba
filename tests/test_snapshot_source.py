"""The scheduler's snapshot reflects the view: usage, state and placements."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from consumers.partition_writer import PartitionWriter, catch_up_all
from consumers.snapshot_source import snapshot_from_view
from ledger.embedded import EmbeddedLog
from ledger.log import Append
from ledger.topics import DEFAULT_TOPICS
from projections.view.engine import make_engine
from projections.view.migrate import upgrade
from projections.view.writer import ViewWriter
from scheduling.config import SchedulerConfig
from scheduling.model import RESOURCE_ARRAYS
from schemas.codec import encode_event
from schemas.events import Event
from tests.builders import (
    claim,
    consume,
    inventory,
    provider,
    release,
    report,
    set_state,
    traits,
)


def _view(tmp_path: Path) -> Engine:
    log = EmbeddedLog(tmp_path / "log")
    for topic in (DEFAULT_TOPICS.events, DEFAULT_TOPICS.outcomes, DEFAULT_TOPICS.dead_letters):
        log.create_topic(topic, 1)
    events = [
        *provider("b", ts=1, VCPU=(4, 2.0), MEMORY_MB=4096),
        *provider("a", ts=1, VCPU=2, MEMORY_MB=1024),
        traits("a", "HW_GPU", ts=1),
        claim("r1", "b", ts=2, VCPU=3, MEMORY_MB=1000, group="g1", tags=["web"], consumer="vm1"),
        consume("r1", ts=3),
        set_state("b", "disabled", ts=3),
        claim("r2", "a", ts=4, VCPU=1, consumer="vm2"),
        claim("r3", "a", ts=5, VCPU=1, consumer="vm3"),
        release("r3", ts=6),
    ]
    log.append(DEFAULT_TOPICS.events, [Append(0, b"k", encode_event(e)) for e in events])
    engine = make_engine(f"sqlite:///{tmp_path / 'view.db'}", writer=True)
    upgrade(engine)
    PartitionWriter(log, ViewWriter(engine), 0, 1).catch_up()
    log.close()
    return engine


def test_snapshot_mirrors_the_view(tmp_path: Path) -> None:
    snapshot = snapshot_from_view(_view(tmp_path))
    assert [p.provider_id for p in snapshot.providers] == ["a", "b"]
    a, b = snapshot.providers
    assert snapshot.classes == ("MEMORY_MB", "VCPU")
    vcpu = snapshot.column("VCPU")
    assert vcpu is not None
    assert snapshot.used[:, vcpu].tolist() == [1, 3]
    assert snapshot.capacity()[:, vcpu].tolist() == [2, 8]
    assert a.traits == frozenset({"HW_GPU"})
    assert b.state == "disabled"
    assert a.instances == frozenset({"vm2"})
    assert b.instances == frozenset({"vm1"})
    assert b.groups == {"g1": 1}
    assert b.tags == {"web": 1}


def test_a_live_snapshot_matches_a_full_read_as_the_view_changes(
    tmp_path: Path, view_url: str
) -> None:
    from berth.app import App, Settings
    from berth.client import Publisher
    from consumers.snapshot_source import LiveSnapshot

    with App(Settings(data_dir=tmp_path / "app", db_url=view_url, partitions=3)) as app:
        edge = Publisher(app.log, clock_ms=lambda: 10**12)
        writers = app.writers()

        def settle() -> None:
            catch_up_all(writers)

        def same() -> None:
            full = snapshot_from_view(app.engine, placements=False)
            live_now = live()
            assert live_now.providers == full.providers
            assert live_now.classes == full.classes
            for name in RESOURCE_ARRAYS:
                assert (getattr(live_now, name) == getattr(full, name)).all(), name
                assert getattr(live_now, name).dtype == getattr(full, name).dtype, name

        edge.publish([e for n in range(6) for e in provider(f"n{n}", ts=1, VCPU=8, DISK_GB=100)])
        settle()
        live = LiveSnapshot(app.engine)
        same()
        edge.publish([claim(f"r{k}", f"n{k % 6}", ts=2, VCPU=1, DISK_GB=5) for k in range(9)])
        settle()
        same()
        edge.publish(
            [
                set_state("n1", "disabled", ts=3),
                consume("r0", ts=3).model_copy(update={"partition_key": "n0"}),
            ]
        )
        settle()
        same()
        # every column of an inventory, read back by a live update
        spec = {"total": 12, "reserved": 1, "allocation_ratio": 2.5, "min_unit": 2}
        edge.publish(
            [
                inventory("n2", VCPU={**spec, "max_unit": 6, "step_size": 2}, DISK_GB=100, ts=3),
                inventory("n4", VCPU=8, DISK_GB={"total": 90, "reserved": 10}, ts=3),
            ]
        )
        settle()
        same()
        edge.publish(provider("n9", ts=4, VCPU=2))  # a provider arrives: full rebuild
        settle()
        same()
        edge.publish([release("r3", ts=5).model_copy(update={"partition_key": "n3"})])
        settle()
        same()
        # reports alone; then a report and a claim on one provider in one
        # wave, and a report on another: the changed one read whole, the
        # other's report alone, each from its own index on (partition, offset)
        edge.publish([report("n5", {"cpu.percent": 12.5}, ts=6, io_ops=3)])
        settle()
        same()
        edge.publish(
            [
                report("n0", {"cpu.percent": 40.0}, ts=7, build_failures=1),
                claim("r20", "n0", ts=7, VCPU=1),
                report("n4", {"cpu.percent": 7.0}, ts=7),
            ]
        )
        settle()
        same()
        assert live().providers[live().row_of["n0"]].build_failures == 1
        assert live() is live()  # nothing changed: the same snapshot


def test_a_live_snapshot_keeps_what_is_placed_where_as_a_full_read_does(
    tmp_path: Path, view_url: str
) -> None:
    """Seeded random claims (with consumers, server groups, tags, several
    items), consumes, releases, expiries and consumer deletions: after each
    round the live snapshot, placements included, equals a full read, on
    SQLite and on PostgreSQL (the statements it re-reads with are built
    once, their offsets bound at each call)."""
    import random

    from berth.app import App, Settings
    from berth.client import Publisher
    from consumers.snapshot_source import LiveSnapshot
    from ledger.partitioner import partition_for
    from tests.builders import claim_items, tick

    rng = random.Random(25)
    nodes = [f"n{n}" for n in range(8)]
    with App(Settings(data_dir=tmp_path / "app", db_url=view_url, partitions=3)) as app:
        edge = Publisher(app.log, clock_ms=lambda: 10**12)
        writers = app.writers()
        edge.publish([e for n in nodes for e in provider(n, ts=1, VCPU=64, DISK_GB=1000)])
        catch_up_all(writers)
        live = LiveSnapshot(app.engine, placements=True)
        # past two reservations decided on since its last call, it reads everything again
        small = LiveSnapshot(app.engine, placements=True, limit=2)
        bounded = SchedulerConfig.from_mapping({"scheduler": {"mode": "bounded"}}).engine()
        bounded.index(live())
        held: dict[str, str] = {}  # reservation -> a provider of it
        now = 10
        for round_ in range(40):
            events: list[Event] = []
            for _ in range(rng.randint(1, 6)):
                now += rng.randint(1, 300)
                k = len(held) + round_ * 100
                roll = rng.random()
                if roll < 0.55 or not held:
                    first = rng.choice(nodes)
                    same_partition = [
                        n
                        for n in nodes
                        if partition_for(n.encode(), 3) == partition_for(first.encode(), 3)
                    ]
                    items = {
                        n: {"VCPU": 1}
                        for n in rng.sample(
                            same_partition, min(len(same_partition), rng.randint(1, 2))
                        )
                    }
                    rid = f"r{round_}-{k}-{rng.random():.6f}"
                    events.append(
                        claim_items(
                            rid,
                            items,
                            ts=now,
                            lease_ms=rng.choice((200, 5000)),
                            group=rng.choice((None, "g1", "g2")),
                            tags=rng.sample(["web", "db", "gpu"], rng.randint(0, 2)),
                            consumer=f"vm{rng.randint(0, 12)}",
                        )
                    )
                    held[rid] = next(iter(items))
                else:
                    rid = rng.choice(sorted(held))
                    pid = held.pop(rid)
                    maker = rng.choice((consume, release))
                    events.append(maker(rid, ts=now).model_copy(update={"partition_key": pid}))
            if rng.random() < 0.3:
                events.append(tick(now).model_copy(update={"partition_key": rng.choice(nodes)}))
            edge.publish(events)
            catch_up_all(writers)
            full = snapshot_from_view(app.engine, placements=True)
            now_live = live()
            assert now_live.providers == full.providers, f"round {round_}"
            assert small().providers == full.providers, f"round {round_}, limited"
            for name in RESOURCE_ARRAYS:
                assert (getattr(now_live, name) == getattr(full, name)).all(), name
            # bounded placement's index follows the live snapshot by the rows it re-read
            index = bounded.index(now_live)
            index.check(now_live, bounded._resources.capacity(now_live))  # type: ignore[union-attr]
        assert any(p.groups for p in full.providers) and any(p.tags for p in full.providers)
        assert bounded.index_builds == 1


def test_a_live_snapshot_told_where_the_writers_are_reads_the_view_only_once_they_moved(
    tmp_path: Path,
) -> None:
    from sqlalchemy import event

    from berth.app import App, Settings
    from berth.client import Publisher
    from consumers.snapshot_source import LiveSnapshot

    with App(Settings(data_dir=tmp_path / "app", partitions=2)) as app:
        edge = Publisher(app.log, clock_ms=lambda: 10**12)
        writers = app.writers()
        statements: list[str] = []
        event.listen(app.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
        live = LiveSnapshot(app.engine, version=lambda: [w.next_offset for w in writers])
        edge.publish([e for n in range(4) for e in provider(f"n{n}", ts=1, VCPU=8)])
        catch_up_all(writers)
        first = live()
        read = len(statements)
        assert read > 0 and live() is first and len(statements) == read
        edge.publish([claim("r1", "n1", ts=2, VCPU=3)])  # appended, not yet decided
        assert live() is first and len(statements) == read
        catch_up_all(writers)
        moved = live()
        full = snapshot_from_view(app.engine, placements=False)
        assert len(statements) > read and moved is not first
        assert (moved.used == full.used).all() and moved.providers == full.providers


def test_a_live_snapshot_fed_by_its_writers_matches_a_full_read_without_reading_the_view(
    tmp_path: Path,
) -> None:
    """``berth serve``'s live snapshot: what the writers of this process
    commit is told from their states (WriterFeed), not read back. Seeded
    claims (groups, tags, consumers), consumes, releases, expiries, state,
    traits, inventory and metrics changes leave it equal to a full read of
    the view with no statement run; a provider arriving and an aggregate
    defined are read from the view, and the feed goes on from there."""
    import random

    from sqlalchemy import event

    from berth.app import App, Settings
    from berth.client import Publisher
    from consumers.snapshot_source import LiveSnapshot
    from consumers.state_snapshot import WriterFeed
    from tests.builders import aggregates, report, tick

    rng = random.Random(7)
    nodes = [f"n{n}" for n in range(8)]
    with App(Settings(data_dir=tmp_path / "app", partitions=3)) as app:
        edge = Publisher(app.log, clock_ms=lambda: 10**12)
        writers = app.writers()
        edge.publish([e for n in nodes for e in provider(n, ts=1, VCPU=64, DISK_GB=1000)])
        catch_up_all(writers)
        live = LiveSnapshot(app.engine, placements=True, feed=WriterFeed(writers))
        live()
        # past three records between two reads, a feed leaves them to the view
        small = LiveSnapshot(app.engine, placements=True, feed=WriterFeed(writers, most=3))
        small()
        statements: list[str] = []
        event.listen(app.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
        held: dict[str, str] = {}
        now = 10
        overflowed = False
        for round_ in range(30):
            events: list[Event] = []
            for _ in range(rng.randint(1, 5)):
                now += rng.randint(1, 300)
                node = rng.choice(nodes)
                roll = rng.random()
                if roll < 0.5 or not held:
                    rid = f"r{round_}-{now}"
                    events.append(
                        claim(
                            rid,
                            node,
                            ts=now,
                            VCPU=1,
                            lease_ms=rng.choice((200, 5000)),
                            group=rng.choice((None, "g1")),
                            tags=rng.sample(["web", "db"], rng.randint(0, 2)),
                            consumer=f"vm{rng.randint(0, 9)}",
                        )
                    )
                    held[rid] = node
                elif roll < 0.8:
                    rid = rng.choice(sorted(held))
                    pid = held.pop(rid)
                    maker = rng.choice((consume, release))
                    events.append(maker(rid, ts=now).model_copy(update={"partition_key": pid}))
                elif roll < 0.85:
                    events.append(set_state(node, rng.choice(("enabled", "disabled")), ts=now))
                elif roll < 0.9:
                    events.append(traits(node, rng.choice(("HW_GPU", "SSD")), ts=now))
                elif roll < 0.95:
                    events.append(inventory(node, VCPU=rng.choice((64, 96)), DISK_GB=1000, ts=now))
                else:
                    events.append(report(node, {"cpu.percent": rng.random()}, ts=now))
            if rng.random() < 0.3:
                events.append(tick(now).model_copy(update={"partition_key": rng.choice(nodes)}))
            edge.publish(events)
            catch_up_all(writers)
            statements.clear()
            fed = live()
            assert statements == [], f"round {round_}: the view was read"
            full = snapshot_from_view(app.engine, placements=True)
            assert fed.providers == full.providers, f"round {round_}"
            for name in RESOURCE_ARRAYS:
                assert (getattr(fed, name) == getattr(full, name)).all(), (round_, name)
            read_before = len(statements)
            assert small().providers == full.providers, f"round {round_}, overflowed"
            overflowed = overflowed or len(statements) > read_before
        assert overflowed
        assert any(p.groups for p in full.providers) and any(p.tags for p in full.providers)
        # a provider arrives, then an aggregate is defined: read from the view
        edge.publish([*provider("n9", ts=now, VCPU=8), aggregates("n1", "agg", ts=now)])
        edge.define_aggregate("agg", {"cpu_allocation_ratio": "2.0"}, "agg-def")
        catch_up_all(writers)
        assert live().providers == snapshot_from_view(app.engine, placements=True).providers
        assert statements != []
        # a claim, and a provider joining the aggregate (its ratio): told, not read
        edge.publish([claim("after", "n9", ts=now + 1, VCPU=2), aggregates("n2", "agg", ts=now)])
        catch_up_all(writers)
        statements.clear()
        after = live()
        assert statements == []
        full = snapshot_from_view(app.engine, placements=True)
        assert after.providers == full.providers and after.aggregates == full.aggregates
        for name in RESOURCE_ARRAYS:
            assert (getattr(after, name) == getattr(full, name)).all(), name


def test_the_view_read_whole_is_the_snapshot_of_the_writers_states_decided_again(
    tmp_path: Path, view_url: str
) -> None:
    """A scheduler's start-up, from the view (its JSON columns read as text
    and decoded once per distinct text, its inventories column by column)
    or from a replay of the log in memory: the same snapshot, records,
    arrays and aggregates, and the same feasibility index of it."""
    import numpy as np

    from berth.app import App, Settings
    from berth.client import Publisher
    from berth.replay import decide_until
    from consumers.snapshot_source import LiveSnapshot
    from consumers.state_snapshot import snapshot_of
    from projections.state import PartitionState
    from scheduling.model import Request, Snapshot
    from tests.builders import aggregates, describe, retire
    from tests.builders import topology as described
    from tests.test_numa_topology import cell, nic

    partitions = 3
    with App(Settings(data_dir=tmp_path / "app", db_url=view_url, partitions=partitions)) as app:
        edge = Publisher(app.log, clock_ms=lambda: 10**12)
        edge.define_aggregate("fast", {"cpu_allocation_ratio": "3.0"}, event_id="fast")
        spec = {"total": 12, "reserved": 1, "allocation_ratio": 2.5, "min_unit": 2}
        events: list[Event] = []
        for n in range(40):
            pid = f"n{n:02d}"
            if n % 3:
                events += provider(pid, ts=1, VCPU=16, MEMORY_MB=4096, DISK_GB=100)
            else:  # a shape of its own, without DISK_GB
                events += provider(pid, ts=1, VCPU={**spec, "step_size": 2}, MEMORY_MB=2048)
            if n % 4 == 0:
                events.append(traits(pid, "HW_GPU", *(["SSD"] * (n % 8 == 0)), ts=2))
            if n % 5 == 0:
                events.append(aggregates(pid, "fast", ts=2))
            if n % 6 == 0:
                events.append(
                    describe(pid, ts=2, availability_zone=f"az{n % 2}", metadata={"rack": "r1"})
                )
            if n % 9 == 0:
                events.append(described(pid, ts=2, numa_cells=[cell(0, 0)], pci_devices=nic()))
            if n % 7 == 0:
                events.append(report(pid, {"cpu.percent": float(n)}, ts=3, io_ops=n % 3))
        events += [
            claim(f"r{k}", f"n{k % 40:02d}", ts=4, VCPU=2, MEMORY_MB=512, group="g", tags=["web"])
            for k in range(0, 60, 3)
        ]
        events += [set_state("n01", "disabled", ts=5), retire("n38", ts=5)]
        edge.publish(events)
        writers = app.writers()
        catch_up_all(writers)
        events_topic = app.settings.topics.events
        ends = [app.log.end_offset(events_topic, p) for p in range(partitions)]
        states = [PartitionState(p, partitions) for p in range(partitions)]
        for state, end in zip(states, ends, strict=True):
            decide_until(app.log, events_topic, state, 0, end)
        replayed = snapshot_of(states)
        read = snapshot_from_view(app.engine)
        live = LiveSnapshot(app.engine, placements=True)()
        bare = LiveSnapshot(app.engine)()
    assert "n38" not in read.row_of and len(read.providers) == 39
    assert read.classes == ("DISK_GB", "MEMORY_MB", "VCPU")
    for snapshot in (read, live):
        assert snapshot.providers == replayed.providers
        assert snapshot.classes == replayed.classes
        assert snapshot.aggregates == replayed.aggregates
        for name in RESOURCE_ARRAYS:
            mine, theirs = getattr(snapshot, name), getattr(replayed, name)
            assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs), name
    assert [p.instances for p in bare.providers] == [frozenset()] * 39  # no placements read
    assert [(p.traits, p.metadata, p.metrics) for p in bare.providers] == [
        (p.traits, p.metadata, p.metrics) for p in read.providers
    ]
    # the records share the values of one text, and the empty ones
    first, second = read.providers[read.row_of["n02"]], read.providers[read.row_of["n03"]]
    assert first.traits is second.traits and first.metrics is second.metrics
    assert first.instances is not second.instances or not first.instances

    def index_of(snapshot: Snapshot) -> tuple[Any, ...]:
        scheduler = {"mode": "bounded", "candidates": 4}
        engine = SchedulerConfig.from_mapping({"scheduler": scheduler}).engine()
        index = engine.index(snapshot)
        request = Request("q", {"VCPU": 2, "MEMORY_MB": 512}, num_instances=3)
        return (
            index.group_of.tolist(),
            index.bucket_of.tolist(),
            index.count.tolist(),
            index.ub.tolist(),
            engine.place(snapshot, request).providers,
        )

    assert index_of(read) == index_of(replayed)


def _mixed_round(rng: Any, nodes: list[str], held: dict[str, str], now: int) -> list[Event]:
    """A round of claims, consumes and releases with, on the same providers,
    what writes a provider whole (state, traits, a description, an
    inventory) and reports."""
    from tests.builders import describe

    events: list[Event] = []
    for _ in range(rng.randint(1, 6)):
        now += 1
        node = rng.choice(nodes)
        roll = rng.random()
        if roll < 0.5 or not held:
            rid = f"r{now}-{rng.random():.6f}"
            events.append(
                claim(
                    rid,
                    node,
                    ts=now,
                    VCPU=1,
                    group=rng.choice((None, "g1")),
                    tags=rng.sample(["web", "db"], rng.randint(0, 2)),
                    consumer=f"vm{rng.randint(0, 9)}",
                )
            )
            held[rid] = node
        elif roll < 0.7:
            rid = rng.choice(sorted(held))
            pid = held.pop(rid)
            maker = rng.choice((consume, release))
            events.append(maker(rid, ts=now).model_copy(update={"partition_key": pid}))
        elif roll < 0.76:
            events.append(set_state(node, rng.choice(("enabled", "disabled")), ts=now))
        elif roll < 0.82:
            events.append(traits(node, rng.choice(("HW_GPU", "SSD")), ts=now))
        elif roll < 0.88:
            events.append(describe(node, availability_zone=rng.choice(("az1", "az2")), ts=now))
        elif roll < 0.94:
            events.append(inventory(node, VCPU=rng.choice((64, 96)), DISK_GB=1000, ts=now))
        else:
            events.append(report(node, {"cpu.percent": rng.random()}, ts=now))
    return events


def test_a_live_snapshot_reads_whole_only_the_providers_written_whole(
    tmp_path: Path, view_url: str
) -> None:
    """Seeded rounds where claims and releases meet, on the same providers
    and in the same waves, state, traits, descriptions, inventories and
    reports: a live snapshot that reads the usage alone of the providers
    whose claims alone changed them (their shape_offset not past its
    offsets) equals a full read after each round, placements kept or not,
    on SQLite and PostgreSQL, and bounded placement's index follows it."""
    import random

    from berth.app import App, Settings
    from berth.client import Publisher
    from consumers.snapshot_source import LiveSnapshot

    rng = random.Random(33)
    nodes = [f"n{n}" for n in range(10)]
    with App(Settings(data_dir=tmp_path / "app", db_url=view_url, partitions=3)) as app:
        edge = Publisher(app.log, clock_ms=lambda: 10**12)
        writers = app.writers()
        edge.publish([e for n in nodes for e in provider(n, ts=1, VCPU=64, DISK_GB=1000)])
        catch_up_all(writers)
        placed, bare = LiveSnapshot(app.engine, placements=True), LiveSnapshot(app.engine)
        bounded = SchedulerConfig.from_mapping({"scheduler": {"mode": "bounded"}}).engine()
        bounded.index(bare())
        placed()
        held: dict[str, str] = {}
        for round_ in range(30):
            edge.publish(_mixed_round(rng, nodes, held, 10 + 10 * round_))
            catch_up_all(writers)
            for live, placements in ((placed, True), (bare, False)):
                full = snapshot_from_view(app.engine, placements=placements)
                now_live = live()
                assert now_live.providers == full.providers, (round_, placements)
                for name in RESOURCE_ARRAYS:
                    assert (getattr(now_live, name) == getattr(full, name)).all(), name
            index = bounded.index(bare())
            index.check(bare(), bounded._resources.capacity(bare()))  # type: ignore[union-attr]
        assert {p.availability_zone for p in full.providers} > {None}


def test_a_provider_whose_claims_alone_changed_it_is_not_read_whole(tmp_path: Path) -> None:
    """A claim moves its provider's usage offset, not its shape_offset: a
    live snapshot reads its usage and keeps the record it had (a name
    changed behind the writers' back is not seen); written whole (its
    state set), it is read whole."""
    from sqlalchemy import text

    from berth.app import App, Settings
    from berth.client import Publisher
    from consumers.snapshot_source import LiveSnapshot

    with App(Settings(data_dir=tmp_path / "app", partitions=2)) as app:
        edge = Publisher(app.log, clock_ms=lambda: 10**12)
        writers = app.writers()
        edge.publish([e for n in range(4) for e in provider(f"n{n}", ts=1, VCPU=8)])
        catch_up_all(writers)
        live = LiveSnapshot(app.engine)
        row = live().row_of["n1"]
        with app.write_engine.begin() as conn:
            conn.execute(text("UPDATE providers SET name = 'renamed' WHERE provider_id = 'n1'"))
        edge.publish([claim("r1", "n1", ts=2, VCPU=3)])
        catch_up_all(writers)
        after = live()
        vcpu = after.column("VCPU")
        assert after.used[row, vcpu] == 3 and after.providers[row].host == "n1"
        edge.publish([set_state("n1", "disabled", ts=3)])
        catch_up_all(writers)
        rewritten = live().providers[row]
        assert rewritten.state == "disabled" and rewritten.host == "n1"  # the writer's name
