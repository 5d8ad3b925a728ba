"""The ranking a placement keeps for its answer (issue 23 part 5): the best
candidates of the first instance, best first, ties to the earlier row as
the pick breaks them, each score the sum of its weighers' normalised values
times their multipliers; and the answers on ``berth.placements`` carry it
with the view offsets their snapshot reflected."""

from __future__ import annotations

import base64
import gc
import json
import struct
import time
import tracemalloc
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from berth.app import App, Settings
from berth.client import Answers, Publisher
from consumers.partition_writer import catch_up_all
from consumers.scheduler import Scheduled
from scheduling.config import SchedulerConfig
from scheduling.engine import Bounded, Engine
from scheduling.filters.base import Context
from scheduling.model import Aggregate, FloatArray, IntArray, Provider, Request, Snapshot
from scheduling.registry import DEFAULT_FILTERS, DEFAULT_WEIGHERS, FILTERS, WEIGHERS
from scheduling.weighers.base import normalize
from scheduling.weighers.combine import weigh_all
from scheduling.weighers.ram import RAMWeigher
from schemas.ranked import candidates_of, expand, strings, text
from schemas.requests import PlacementRequest
from tests.builders import provider
from tests.test_engine_properties import cases


def _bits(candidates: list[dict[str, Any]]) -> list[Any]:
    """The candidates with every float as its bits: -0.0 is not 0.0, a NaN
    is itself."""
    pack = struct.Struct("<d").pack
    return [
        (
            c["provider_id"],
            pack(c["score"]),
            {name: (pack(v), pack(m)) for name, (v, m) in c["weighers"].items()},
        )
        for c in candidates
    ]


def _engine(ranked: int) -> Engine:
    filters = [FILTERS[name]() for name in DEFAULT_FILTERS]
    weighers = [WEIGHERS[name](m) for name, m in DEFAULT_WEIGHERS.items()]
    return Engine(filters, weighers, ranked=ranked)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(cases())
def test_the_ranking_is_the_weighers_order_and_its_first_is_the_pick(
    case: tuple[Snapshot, Request],
) -> None:
    snapshot, request = case
    engine = _engine(ranked=3)
    placement = engine.place(snapshot, request)
    if not placement.providers:
        assert placement.ranking is None
        return
    assert placement.ranking is not None
    compact = placement.ranking.compact()  # before the ranking is worked out for to_dicts
    ranking = placement.ranking.to_dicts()
    assert ranking[0]["provider_id"] == placement.providers[0]
    # every candidate of the first instance, weighed as the engine does
    rows = engine.feasible(snapshot, request)
    scores = weigh_all(engine.weighers, Context.start(snapshot, request), rows)
    order = np.argsort(-scores, kind="stable")[:3]
    expected = [(snapshot.providers[int(rows[i])].provider_id, float(scores[i])) for i in order]
    assert [(r["provider_id"], r["score"]) for r in ranking] == expected
    # an answer's compact form reads back as the same numbers, bit for bit
    assert expand(json.loads(json.dumps(compact))) == ranking
    assert placement.ranking.compact() == compact
    assert placement.ranking.to_json() == json.dumps(compact)  # the text answers record
    assert _bits(expand(compact)) == _bits(ranking)
    for ranked in ranking:
        parts = ranked["weighers"]
        assert isinstance(parts, dict) and isinstance(ranked["score"], float)
        assert abs(sum(v * m for v, m in parts.values()) - ranked["score"]) < 1e-9, ranked
        assert all(0.0 <= v <= 1.0 for v, _ in parts.values()), ranked


def test_ties_go_to_the_earlier_provider_and_ranked_zero_keeps_none() -> None:
    names = [f"p{i}" for i in range(30)]
    snapshot = Snapshot.build(
        [Provider(name, host=name) for name in names],
        {name: {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}} for name in names},
    )
    request = Request("r", {"VCPU": 1})
    ranking = _engine(ranked=10).place(snapshot, request).ranking
    assert ranking is not None and list(ranking.providers) == names[:10]
    assert _engine(ranked=0).place(snapshot, request).ranking is None


def test_ties_across_the_cut_go_to_the_earlier_providers() -> None:
    """A tie at the tenth place goes to the earlier rows, after the
    providers that score more, wherever they are."""
    names = [f"p{i:02d}" for i in range(40)]
    roomy = {"p07", "p21", "p33"}  # more free: ranked first, in row order
    snapshot = Snapshot.build(
        [Provider(name, host=name) for name in names],
        {
            name: {"VCPU": {"total": 16 if name in roomy else 8}, "MEMORY_MB": {"total": 4096}}
            for name in names
        },
    )
    request = Request("r", {"VCPU": 1})
    ranking = _engine(ranked=10).place(snapshot, request).ranking
    assert ranking is not None
    tied = [n for n in names if n not in roomy]
    assert list(ranking.providers) == sorted(roomy) + tied[:7]
    assert ranking.scores[0] > ranking.scores[3] == ranking.scores[9]


def test_a_ranking_kept_for_its_answer_holds_its_best_not_every_candidate() -> None:
    """Answers are written after their wave is ranked: what each ranking
    holds until then must not grow with the cluster (it did: every
    candidate's score and shares, about 3 MB a request at 100,000
    providers, and a stream of answers ran out of memory)."""
    names = [f"p{i:05d}" for i in range(20_000)]
    snapshot = Snapshot.build(
        [Provider(name, host=name) for name in names],
        {name: {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}} for name in names},
    )
    engine = _engine(ranked=10)
    engine.bounded = Bounded(mode="full")  # every provider a candidate
    request = Request("r", {"VCPU": 1})
    engine.place(snapshot, request)  # caches warmed, outside the measure
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [engine.place(snapshot, Request(f"r{n}", {"VCPU": 1})) for n in range(50)]
        held = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert held < 8_000, f"{held:.0f} bytes a ranking"  # 20,000 candidates' parts: > 600 KB
    ranking = kept[0].ranking
    assert ranking is not None and list(ranking.providers) == names[:10]


@pytest.mark.parametrize("overridden", [False, True])
def test_a_ranking_kept_for_its_answer_lets_its_snapshot_go(overridden: bool) -> None:
    """A scheduler keeps every ranking of a wave until its answers are
    written (the sustained benchmark all of them): a ranking that held its
    wave's snapshot kept every wave's alive, a few MB each at 10,000
    providers. Nor does one whose multipliers an aggregate overrides."""
    names = [f"p{i}" for i in range(12)]
    heavy = {"heavy": Aggregate("heavy", {"ram_weight_multiplier": "2.5"})}
    snapshot = Snapshot.build(
        [
            Provider(n, host=n, aggregates=frozenset({"heavy"} if i % 3 else ()))
            for i, n in enumerate(names)
        ],
        {
            n: {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1024 * (i + 1)}}
            for i, n in enumerate(names)
        },
        heavy if overridden else {},
    )
    engine = _engine(ranked=10)
    ranking = engine.place(snapshot, Request("r", {"VCPU": 1})).ranking
    assert ranking is not None
    gone = weakref.ref(snapshot.used)  # the snapshot's arrays outlive it only if it is kept
    del snapshot
    gc.collect()
    assert gone() is None
    ram = {c["weighers"]["RAMWeigher"][1] for c in expand(ranking.compact())}
    assert ram == ({1.0, 2.5} if overridden else {1.0})


def test_an_answer_carries_its_candidates_and_the_offsets_its_snapshot_reflected(
    tmp_path: Path,
) -> None:
    now = int(time.time() * 1000)
    with App(Settings(data_dir=tmp_path, partitions=2)) as app:
        publisher = Publisher(app.log, app.settings.topics)
        events = [
            e
            for i, ram in enumerate((2048, 8192, 4096))
            for e in provider(f"n{i}", ts=now, VCPU=8, MEMORY_MB=ram)
        ]
        publisher.publish(events)
        writers = app.writers()
        catch_up_all(writers)
        # what the view has applied before the request is ranked
        ends = {str(p): app.log.end_offset(app.settings.topics.events, p) for p in range(2)}
        worker = app.scheduler_worker(SchedulerConfig.default(), lambda: catch_up_all(writers))
        answers = Answers(app.log, app.settings.topics)
        request = PlacementRequest(
            request_id="r1", ts_ms=now, project_id="p", resources={"MEMORY_MB": 1024}
        )
        publisher.submit([request])
        while worker.step():
            pass
        assert answers.wait(["r1"], 10.0) == []
        answer = answers.found["r1"]
        assert answer["placed"] and answer["reservations"][0][1] == "n1"
    candidates = candidates_of(answer)
    names = [c["provider_id"] for c in candidates]
    assert names == ["n1", "n2", "n0"]  # spreading by free RAM
    assert candidates[0]["weighers"]["RAMWeigher"] == [1.0, 1.0]
    assert candidates[2]["weighers"]["RAMWeigher"] == [0.25, 1.0]  # 2,048 of 8,192
    assert {p: o for p, o in answer["offsets"].items() if o} == {p: o for p, o in ends.items() if o}
    json.dumps(answer)  # it is JSON as it stands


def test_an_aggregates_multiplier_is_recorded_per_candidate() -> None:
    """Where an aggregate sets a weigher's multiplier for some providers,
    the compact form keeps one multiplier per candidate, and reads back as
    the engine ranked them."""
    names = [f"p{i}" for i in range(12)]
    heavy = Aggregate("heavy", {"ram_weight_multiplier": "2.5"})
    snapshot = Snapshot.build(
        [
            Provider(n, host=n, aggregates=frozenset({"heavy"} if i % 3 else ()))
            for i, n in enumerate(names)
        ],
        {
            n: {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1024 * (i + 1)}}
            for i, n in enumerate(names)
        },
        {"heavy": heavy},
    )
    ranking = _engine(ranked=12).place(snapshot, Request("r", {"VCPU": 1})).ranking
    assert ranking is not None
    compact = ranking.compact()
    candidates = expand(compact)
    assert candidates == ranking.to_dicts()
    ram = [c["weighers"]["RAMWeigher"][1] for c in candidates]
    assert set(ram) == {1.0, 2.5}
    assert [c["provider_id"] for c in candidates] == compact["providers"]


def test_one_engines_rankings_follow_each_snapshots_aggregates() -> None:
    """An engine keeps what its last ranking recorded of its weighers (names,
    multipliers); a snapshot whose aggregates override a multiplier, and one
    whose do not again, are each recorded with their own."""
    names = [f"p{i}" for i in range(6)]
    inventories = {
        n: {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1024 * (i + 1)}}
        for i, n in enumerate(names)
    }
    members = [
        Provider(n, host=n, aggregates=frozenset({"heavy"} if i % 2 else ()))
        for i, n in enumerate(names)
    ]
    plain = Snapshot.build(members, inventories)
    heavy = Snapshot.build(
        members, inventories, {"heavy": Aggregate("heavy", {"ram_weight_multiplier": "3"})}
    )
    engine = _engine(ranked=6)
    recorded = []
    for snapshot in (plain, heavy, plain):
        ranking = engine.place(snapshot, Request("r", {"VCPU": 1})).ranking
        assert ranking is not None
        ram = [c["weighers"]["RAMWeigher"][1] for c in expand(ranking.compact())]
        recorded.append(set(ram))
    assert recorded == [{1.0}, {1.0, 3.0}, {1.0}]


class _OwnRAM(RAMWeigher):
    """An operator's weigher whose ``add_to`` does not return its values."""

    name = "OwnRAM"

    def add_to(self, total: FloatArray, ctx: Context, rows: IntArray) -> None:
        total += self.multipliers(ctx, rows) * normalize(self.weigh(ctx, rows), self.minval)


def test_a_weighers_share_kept_apart_reads_back_as_its_values() -> None:
    """A weigher whose ``add_to`` returns nothing has its share weighed
    apart and divided by its multipliers (an aggregate's where it sets
    one): the same values as a weigher that returns them (multipliers that
    are powers of 2 divide out exactly)."""
    names = [f"p{i}" for i in range(6)]
    heavy = Aggregate("heavy", {"ram_weight_multiplier": "4"})
    snapshot = Snapshot.build(
        [
            Provider(n, host=n, aggregates=frozenset({"heavy"} if i % 2 else ()))
            for i, n in enumerate(names)
        ],
        {
            n: {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1000 * (i + 3)}}
            for i, n in enumerate(names)
        },
        {"heavy": heavy},
    )
    filters = [FILTERS[name]() for name in DEFAULT_FILTERS]
    for multiplier in (1.0, -2.0):
        ours = Engine(filters, [RAMWeigher(multiplier)], ranked=4)
        theirs = Engine(filters, [_OwnRAM(multiplier)], ranked=4)
        request = Request("r", {"VCPU": 1})
        mine, own = ours.place(snapshot, request).ranking, theirs.place(snapshot, request).ranking
        assert mine is not None and own is not None
        assert own.providers == mine.providers and np.array_equal(own.scores, mine.scores)
        assert np.array_equal(own.multipliers, mine.multipliers)
        assert own.values.tolist() == mine.values.tolist()
        assert _bits(expand(own.compact())) == _bits(own.to_dicts())
        assert set(own.multipliers.ravel().tolist()) == {multiplier, 4.0}


def test_the_compact_text_is_what_json_writes_whatever_the_names() -> None:
    numbers = base64.b64encode(b"\x00" * 24).decode()
    for providers in (
        ["node-1", "node-2"],
        [],
        ['a"b', "c\\d"],
        ["tab\there", "d\x7fel"],
        ["n\u00e9ud", "\u7bc0\u70b9"],
        ["", " spaced "],
    ):
        weighers = providers or ["RAMWeigher"]  # names written once, by the same rule
        written = text(providers, strings(weighers), numbers)
        assert written == json.dumps(
            {"providers": providers, "weighers": weighers, "numbers": numbers}
        )


def test_an_answer_is_encoded_as_its_dict_with_its_source() -> None:
    names = [f"p{i}" for i in range(12)]
    snapshot = Snapshot.build(
        [Provider(n, host=n) for n in names],
        {
            n: {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 512 * (i + 1)}}
            for i, n in enumerate(names)
        },
    )
    ranking = _engine(ranked=10).place(snapshot, Request("r", {"VCPU": 1})).ranking
    placed = Scheduled(
        "r", True, (("x", "p11"),), 1, policy="default@1", offsets={0: 3}, ranking=ranking
    )
    for scheduled in (placed, Scheduled("f", False, (), 1, "no valid host", ("a", "b"))):
        value = scheduled.encoded((1, 42))
        assert json.loads(value) == {**scheduled.to_dict(), "source": [1, 42]}
    assert json.loads(placed.encoded((0, 0)))["ranked"]["providers"][0] == "p11"


class _ByReference(RAMWeigher):
    """An operator's weigher whose multipliers read the context it weighs
    in: bounded mode's reference values."""

    name = "ByReference"

    def multipliers(self, ctx: Context, rows: IntArray) -> FloatArray:
        return np.full(len(rows), 2.0 if ctx.reference is not None else 1.0)


def test_multipliers_asked_row_by_row_see_the_pick_s_reference() -> None:
    """In bounded mode the candidates are weighed against the index's
    reference values; the multipliers the ranking records are asked in the
    same context, so each score is still its values times them."""
    names = [f"p{i}" for i in range(8)]
    snapshot = Snapshot.build(
        [Provider(n, host=n) for n in names],
        {
            n: {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1000 * (i + 3)}}
            for i, n in enumerate(names)
        },
    )
    filters = [FILTERS[name]() for name in DEFAULT_FILTERS]
    engine = Engine(filters, [_ByReference()], ranked=4, bounded=Bounded("bounded", candidates=4))
    placement = engine.place(snapshot, Request("r", {"VCPU": 1}))
    ranking = placement.ranking
    assert placement.bounded and ranking is not None
    assert ranking.multipliers.ravel().tolist() == [2.0] * len(ranking.providers)
    scores = (ranking.values * ranking.multipliers).sum(axis=0)
    assert np.allclose(scores, ranking.scores)
