"""The simulator (docs/simulation.md): a seed is a run, a short sweep of
fixed and random seeds finds nothing, and it bites: each deliberately
broken variant below (patched in here, never in the product) is caught
within the number of seeds it states, naming the invariant it breaks."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import consumers.partition_writer as partition_writer
import consumers.scheduler as scheduler
import consumers.state_snapshot as state_snapshot
import projections.claims as claims
import sim.invariants as invariants
import sim.system as system
from consumers.coordinator import Coordinator
from consumers.partition_writer import PartitionWriter
from consumers.policies import Policy, PolicyBook
from consumers.scheduler import OutcomeFollower
from ledger import frames
from ledger.log import Append, Record
from projections.batch import Batch, decide
from projections.state import Layout, PartitionState, ProviderState
from projections.view.writer import ViewWriter
from schemas.events import Claim
from schemas.outcomes import Kind
from schemas.requests import PlacementRequest
from sim.__main__ import main
from sim.run import run, shrink

ROOT = Path(__file__).resolve().parents[1]


def test_a_seed_is_a_run() -> None:
    first, second = run(11, 400), run(11, 400)
    assert first.ok and second.ok, (first.violation, second.violation)
    assert first.log_digest == second.log_digest
    assert first.counts == second.counts
    assert run(12, 400).log_digest != first.log_digest


def test_a_short_sweep_of_fixed_and_random_seeds_finds_nothing() -> None:
    """What CI runs: fixed seeds, and random ones it prints (a failure
    prints the line that replays it). About 12 s of CPU, in two processes:
    well within a minute on an idle machine."""
    sweep = ["--seeds", "1,2,3,4,5,6", "--random", "2", "--steps", "1000", "--jobs", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "sim", *sweep],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(done.stdout)  # the random seeds, for a failure to be replayed
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 9 and lines[-1]["ok"] and lines[-1]["runs"] == 8
    for count in ("fault: redelivery", "op: policy", "op: schedulers racing"):
        assert sum(line["counts"].get(count, 0) for line in lines[:-1]) > 0, count


# -- the variants, each broken on purpose ------------------------------------------


Decide = Callable[[PartitionState, Sequence[Record]], Batch]


def _doubled_capacity(decide: Decide) -> Decide:
    """A projector that decides claims against twice the capacity."""

    def broken(state: PartitionState, records: Sequence[Record]) -> Batch:
        real = {}
        for pid, provider in state.providers.items():
            layout = provider.layout
            limits = tuple(replace(lim, capacity=lim.capacity * 2) for lim in layout.limits)
            provider.layout = Layout(layout.index, layout.classes, limits)
            real[pid] = (layout, provider.layout)
        try:
            return decide(state, records)
        finally:
            for pid, (layout, doubled) in real.items():
                now = state.providers.get(pid)
                if now is not None and now.layout is doubled:
                    now.layout = layout

    return broken


def _identifier_given_back(decide: Decide) -> Decide:
    """A projector that returns a new hold's identifiers to their pools."""

    def broken(state: PartitionState, records: Sequence[Record]) -> Batch:
        before = set(state.reservations)
        batch = decide(state, records)
        for rid, reservation in state.reservations.items():
            if rid not in before:
                for pool, value in reservation.identifiers:
                    pool.free.give_back(value)
        return batch

    return broken


def _drifting_count(decide: Decide) -> Decide:
    """A writer whose usage counter drifts from its reservations."""

    def broken(state: PartitionState, records: Sequence[Record]) -> Batch:
        batch = decide(state, records)
        for provider in state.providers.values():
            if provider.held and provider.active:
                provider.held[0] += 1
                break
        return batch

    return broken


def _publish_without(
    kind: str,
) -> Callable[[PartitionWriter, Batch], tuple[list[Append], list[Append]]]:
    """A writer that never publishes outcomes of one kind."""
    real = PartitionWriter.appends

    def broken(self: PartitionWriter, batch: Batch) -> tuple[list[Append], list[Append]]:
        outcomes = [
            Append(self.partition, o.subject.encode(), o.to_json())
            for applied in batch.applied
            for o in applied.outcomes
            if o.kind != kind
        ]
        return outcomes, real(self, batch)[1]

    return broken


def _write_again_the_last() -> Callable[[PartitionWriter, list[Record]], Batch]:
    """A writer that decides again the record before those delivered."""
    real = PartitionWriter.write

    def broken(self: PartitionWriter, records: list[Record]) -> Batch:
        start = records[0].offset
        if start > 0:
            records = self.log.read(self.topics.events, self.partition, start - 1, 1) + records
        return real(self, records)

    return broken


def _scan_headers_only(
    mm: frames.Buffer,
    view: memoryview,
    base: int,
    pos: int,
    limit: int,
    offset: int,
    result: frames.Scan,
) -> int:
    """A log that checks its records' headers and never their bodies."""
    header = frames.header_size(2)
    previous = result.chain
    while pos + header <= limit:
        length, key_len, _body, head = struct.unpack_from("<IIII", mm, pos)
        if zlib.crc32(view[pos : pos + 12], previous ^ (offset & 0xFFFFFFFF)) != head:
            break
        end = pos + header + length
        if key_len > length or end > limit:
            break
        pos, previous, offset = end, head, offset + 1
        result.ends.append(base + pos)
        result.key_lengths.append(key_len)
    result.chain = previous
    return pos


def _commit_on_any_vote(mp: pytest.MonkeyPatch) -> None:
    real = Coordinator._decide

    def decide(self: Coordinator, decisions: list[Any], key: str) -> Any:
        bent = [replace(d, commit=bool(d.prepared) or d.commit) for d in decisions]
        return real(self, bent, key)

    mp.setattr(Coordinator, "_decide", decide)
    mp.setattr(Coordinator, "release", lambda *args, **kwargs: None)


def _deaf_to_one_partition(mp: pytest.MonkeyPatch) -> None:
    """A scheduler whose follower skips the last partition's outcomes."""
    real = OutcomeFollower.poll

    def poll(self: OutcomeFollower) -> None:
        last = len(self.offsets) - 1
        self.offsets[last] = self.log.end_offset(self.topic, last)  # as if read
        real(self)

    mp.setattr(OutcomeFollower, "poll", poll)


def _holds_never_expire(decide: Decide) -> Decide:
    """A projector that forgets when its holds expire."""

    def broken(state: PartitionState, records: Sequence[Record]) -> Batch:
        state.expiry.clear()
        return decide(state, records)

    return broken


def _groups_ignored(mp: pytest.MonkeyPatch) -> None:
    """A scheduler that drops a request's anti-affinity, from its ranking
    and from its claims (so the writers cannot hold it either)."""
    real_request, real_claim = scheduler.engine_request, scheduler._claim

    def request(r: PlacementRequest, instances: int, tried: frozenset[str]) -> Any:
        return real_request(r.model_copy(update={"group_policy": None}), instances, tried)

    def claim(*args: Any) -> Claim:
        return real_claim(*args).model_copy(update={"anti_affinity_group": None})

    mp.setattr(scheduler, "engine_request", request)
    mp.setattr(scheduler, "_claim", claim)
    # every claim through its model: one written out directly would keep the group
    mp.setattr(scheduler, "claim_text", lambda *args: None)


def _group_rules_ignored(mp: pytest.MonkeyPatch) -> None:
    """A projector that admits every member to its server group, whatever
    the group's policy says (in the writers and the checker's shadow)."""
    mp.setattr(claims, "membership_refused", lambda state, spec: None)


def _assignments_ignored(mp: pytest.MonkeyPatch) -> None:
    """A scheduler that places every request by the default policy, whatever
    its project was given."""

    def for_request(self: PolicyBook, *args: Any, **kwargs: Any) -> Policy:
        return self.default()

    mp.setattr(PolicyBook, "for_request", for_request)


class _HalvedCapacityView:
    """A view writer that writes every inventory's capacity halved."""

    def __init__(self, engine: Any) -> None:
        self.inner = _REAL_VIEW_WRITER(engine)
        self.engine = engine
        self.stall_ms = self.inner.stall_ms

    def commit(self, state: PartitionState, batch: Batch, generation: int | None = None) -> bool:
        done = self.inner.commit(state, batch, generation)
        with self.engine.begin() as conn:
            conn.execute(text("UPDATE inventories SET capacity = capacity / 2"))
        return done


_REAL_VIEW_WRITER = ViewWriter


def _consumed_unseen(mp: pytest.MonkeyPatch) -> None:
    """A snapshot made from the writers' states that counts what is held
    and not what is consumed (``berth explain``'s)."""

    def used(provider: ProviderState) -> list[int]:
        return list(provider.held)

    mp.setattr(state_snapshot, "_used", used)


@dataclass(frozen=True)
class Variant:
    name: str
    breaks: str
    """The invariant it is caught breaking (or ``also``)."""
    seeds: int
    """Caught within this many seeds (``first_seed``, the next, ...), at
    ``steps`` steps each."""
    steps: int
    patch: Callable[[pytest.MonkeyPatch], None]
    also: str = ""
    first_seed: int = 1


def _both(wrap: Callable[[Decide], Decide]) -> Callable[[pytest.MonkeyPatch], None]:
    """Broken in the writers and in the checker's shadow alike (a projector bug)."""

    def patch(mp: pytest.MonkeyPatch) -> None:
        mp.setattr(partition_writer, "decide", wrap(decide))
        mp.setattr(invariants, "decide", wrap(decide))

    return patch


VARIANTS = (
    Variant("doubled capacity", invariants.OVER_CAPACITY, 3, 600, _both(_doubled_capacity)),
    Variant(
        "drifting usage count",
        invariants.USAGE_COUNTED,
        1,
        300,
        lambda mp: mp.setattr(partition_writer, "decide", _drifting_count(decide)),
    ),
    Variant(
        "identifiers given back while held",
        invariants.IDENTIFIERS,
        3,
        600,
        _both(_identifier_given_back),
    ),
    Variant(
        "a record decided twice",
        invariants.APPLIED_ONCE,
        1,
        300,
        lambda mp: mp.setattr(PartitionWriter, "write", _write_again_the_last()),
    ),
    Variant(
        "a coordinator that commits on any vote and gives nothing back",
        invariants.ALL_OR_NOTHING,
        3,
        1000,
        _commit_on_any_vote,
    ),
    Variant(
        "renewals never published",
        invariants.REPLAY,
        3,
        600,
        lambda mp: mp.setattr(PartitionWriter, "appends", _publish_without(Kind.RENEWED)),
    ),
    Variant(
        "a scheduler that never reads one partition's decisions",
        invariants.LIVENESS,
        2,
        600,
        _deaf_to_one_partition,
    ),
    Variant(
        "record bodies never checked",
        invariants.DAMAGE,
        5,
        1500,
        lambda mp: mp.setattr(frames, "_scan_v2", _scan_headers_only),
        also=invariants.UNHANDLED,  # or earlier: a reader meets bytes it cannot decode
    ),
    Variant(
        "holds that never expire",
        invariants.LEASES,
        1,
        600,
        lambda mp: mp.setattr(partition_writer, "decide", _holds_never_expire(decide)),
    ),
    Variant("anti-affinity dropped", invariants.ANTI_AFFINITY, 5, 1000, _groups_ignored),
    # caught by about one seed in ten (seeds 31, 32, 37, 38, 40 and 52 of 1-60,
    # as the seeded runs go since a resubmitted id is answered as recorded: a
    # run's course follows what its scheduler answers), so the search starts
    # at 31 rather than running the thirty seeds before it that never catch it
    Variant(
        "server groups' rules ignored",
        invariants.SERVER_GROUPS,
        10,
        1000,
        _group_rules_ignored,
        first_seed=31,
    ),
    Variant("projects' policies ignored", invariants.POLICY, 3, 1000, _assignments_ignored),
    Variant(
        "the view's capacity halved",
        invariants.VIEW_OVER_CAPACITY,
        3,
        600,
        lambda mp: mp.setattr(system, "ViewWriter", _HalvedCapacityView),
    ),
    Variant("consumed usage unseen", invariants.SNAPSHOT, 1, 600, _consumed_unseen),
)


@contextmanager
def _broken(variant: Variant) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        variant.patch(mp)
        yield


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_the_simulator_bites(variant: Variant) -> None:
    with _broken(variant):
        for seed in range(variant.first_seed, variant.first_seed + variant.seeds):
            result = run(seed, variant.steps)
            if not result.ok:
                break
    assert result.violation is not None, f"{variant.name}: not caught in {variant.seeds} seeds"
    assert result.violation.invariant in (variant.breaks, variant.also), str(result.violation)


def test_every_invariant_has_a_variant_that_breaks_it() -> None:
    covered = {v.breaks for v in VARIANTS}
    missing = set(invariants.INVARIANTS) - covered
    assert missing <= {invariants.ACKNOWLEDGED, invariants.UNHANDLED}, missing


def test_a_failure_names_its_seed_and_shrinks(capsys: pytest.CaptureFixture[str]) -> None:
    variant = VARIANTS[3]  # a record decided twice: caught early
    with _broken(variant):
        assert main(["--seed", "1", "--steps", "300"]) == 1
        out = capsys.readouterr().out
        assert "reproduce: python -m sim --seed 1 --steps 300" in out
        smallest = int(out.rsplit("--steps ", 1)[1])
        assert not run(1, smallest).ok
        assert run(1, smallest - 1).ok
        assert shrink(1, 300)[0] == smallest
