"""A claim's fingerprint is the same in every process: a checkpoint taken
by ``berth checkpoint`` in one process (one PYTHONHASHSEED) and decided on
by another (another seed) judges a late duplicate claim a duplicate, as
the live writer did, never a reused id with other content; and a
checkpoint whose manifest names no fingerprint (one from before) is
passed over, never decided on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from berth.app import App, Settings
from berth.checkpoints import Checkpoints
from berth.client import Publisher
from consumers.partition_writer import catch_up_all
from projections.claims import fingerprint
from projections.projector import apply
from projections.state import PartitionState, reservation_columns
from projections.view.engine import make_engine
from projections.view.loader import load_state
from schemas.events import Claim, ClaimSet, ClaimSpec, Event
from schemas.outcomes import Code, Kind
from tests.builders import claim, provider, release
from tests.contracts.view_contract import _assert_same_state

NOW = 1_000_000


def _berth_checkpoint(data: Path, seed: int) -> dict[str, object]:
    """``berth checkpoint`` in a process of its own, with its own string hashing."""
    done = subprocess.run(
        [sys.executable, "-m", "berth.cli", "checkpoint", "--data-dir", str(data)],
        env={**os.environ, "PYTHONHASHSEED": str(seed)},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    # no checkpoint passed over: the second is decided on the first's states
    assert "ignored" not in done.stderr, done.stderr
    taken: dict[str, object] = json.loads(done.stdout.splitlines()[-1])["taken"]
    return taken


def _spec(made: Claim) -> ClaimSpec:
    """The claim's content as a claim set's member."""
    return ClaimSpec(**{name: getattr(made, name) for name in ClaimSpec.model_fields})


def _claims() -> tuple[Claim, Claim]:
    """One claim that stays active and one that is released (finished), with
    tags and a group: every string the fingerprint digests."""
    active = claim(
        "active", "n0", ts=NOW, tags=("db", "eu", "ssd"), group="g", VCPU=1, MEMORY_MB=64
    )
    ended = claim("ended", "n0", ts=NOW, tags=("web",), consumer="vm-7", VCPU=1, MEMORY_MB=64)
    return active, ended


def _late_duplicates(active: Claim, ended: Claim) -> list[Event]:
    """Both claims redelivered, and an atomic set mixing the active one's
    duplicate with a fresh member (held only if the duplicate is one)."""
    fresh = _spec(claim("fresh", "n0", ts=NOW + 5, VCPU=1, MEMORY_MB=64))
    return [
        active.model_copy(update={"event_id": "again-1", "ts_ms": NOW + 3}),
        ended.model_copy(update={"event_id": "again-2", "ts_ms": NOW + 4}),
        ClaimSet(event_id="set", ts_ms=NOW + 5, partition_key="n0", claims=(_spec(active), fresh)),
    ]


def _view_state(app: App) -> PartitionState:
    engine = make_engine(app.settings.view_url)
    try:
        with engine.connect() as conn:
            state, _ = load_state(conn, 0, 1)
    finally:
        engine.dispose()
    return state


def test_a_checkpoint_from_another_process_judges_a_late_duplicate_as_the_writer_did(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    active, ended = _claims()
    with App(Settings(data_dir=data, partitions=1)) as app:
        edge = Publisher(app.log, app.settings.topics)
        writers = app.writers()
        edge.publish([*provider("n0", ts=NOW, VCPU=8, MEMORY_MB=1024), active, ended])
        edge.publish([release("ended", ts=NOW + 1).model_copy(update={"partition_key": "n0"})])
        catch_up_all(writers)
    first = _berth_checkpoint(data, seed=1)
    with App(Settings(data_dir=data, partitions=1)) as app:
        writers = app.writers()
        Publisher(app.log, app.settings.topics).publish(_late_duplicates(active, ended))
        catch_up_all(writers)
        live = _view_state(app)
    # what the live writer decided: both duplicates, the set's fresh member held
    assert set(live.reservations) == {"active", "fresh"}
    assert set(live.finished) == {"ended"}
    second = _berth_checkpoint(data, seed=2)
    assert second["records"] > first["records"]  # type: ignore[operator]
    restored = Checkpoints(Settings(data_dir=data, partitions=1)).restore_states({0: 99})
    assert restored is not None and restored[0].records == second["records"]
    states = restored[1]
    # decided in the seed-2 process on the seed-1 process's states
    _assert_same_state(states[0], live)


def test_the_fingerprint_is_the_same_in_every_process(tmp_path: Path) -> None:
    active, _ = _claims()
    script = (
        "from tests.test_fingerprint_processes import _claims, _print;print(_print(_claims()[0]))"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.strip()
        for seed in (1, 2, 3)
    }
    assert seen == {str(_print(active))}


def _print(made: Claim) -> int:
    state = PartitionState(0, 1)
    items = made.items
    shapes = tuple((i.provider_id, state.shape(i.resources)) for i in items)
    return fingerprint(made, shapes)


def test_a_checkpoint_naming_no_fingerprint_is_passed_over(tmp_path: Path) -> None:
    data = tmp_path / "data"
    active, ended = _claims()
    with App(Settings(data_dir=data, partitions=1)) as app:
        writers = app.writers()
        edge = Publisher(app.log, app.settings.topics)
        edge.publish([*provider("n0", ts=NOW, VCPU=8, MEMORY_MB=1024), active, ended])
        catch_up_all(writers)
    taken = _berth_checkpoint(data, seed=1)
    checkpoints = Checkpoints(Settings(data_dir=data, partitions=1))
    assert checkpoints.restore_states({0: 99}) is not None
    manifest = Path(str(taken["path"])).with_suffix(".json")
    written = json.loads(manifest.read_text())
    del written["fingerprints"]  # as a checkpoint from before wrote it
    manifest.write_text(json.dumps(written))
    assert checkpoints.restore_states({0: 99}) is None


def test_a_duplicate_is_told_from_a_reused_id() -> None:
    active, _ = _claims()
    other = active.model_copy(update={"tags": frozenset({"db", "eu"})})
    assert _print(active) != _print(other)
    assert _print(active) == _print(active.model_copy(update={"event_id": "x", "ts_ms": 1}))


def test_a_plain_claims_fingerprint_made_when_asked_is_the_one_made_at_once() -> None:
    """A claim with none of the rare fields, alone or in a set, is held
    without its digest, which its reservation makes from its own fields when
    a duplicate, its end or a checkpoint asks: the same value the claim's
    content gives, so duplicates and reused ids are told apart as before,
    active or finished."""
    state = PartitionState(0, 1)
    events: list[Event] = [*provider("n0", ts=NOW, VCPU=8, MEMORY_MB=1024)]
    held = claim("held", "n0", ts=NOW, consumer="vm-1", VCPU=1, MEMORY_MB=64)
    ended = claim("ended", "n0", ts=NOW, consumer="vm-2", VCPU=2, MEMORY_MB=128)
    member = claim("member", "n0", ts=NOW, consumer="vm-3", VCPU=1, MEMORY_MB=32)
    in_set = ClaimSet(event_id="set", ts_ms=NOW, partition_key="n0", claims=(_spec(member),))
    events += [held, ended, in_set, release("ended", ts=NOW + 1)]
    for offset, event in enumerate(events):
        apply(state, offset, event)
    assert state.reservations["held"].fingerprint == _print(held)
    assert state.reservations["member"].fingerprint == _print(member)
    assert state.finished["ended"] == _print(ended)
    columns = reservation_columns(state.reservations)
    assert columns is not None and columns[4] == [_print(held), _print(member)]
    reused = held.model_copy(update={"event_id": "reuse", "items": ended.items})
    later: list[Event] = [
        held.model_copy(update={"event_id": "again-1"}),
        ended.model_copy(update={"event_id": "again-2"}),
        member.model_copy(update={"event_id": "again-3"}),
        reused,
    ]
    decided = [apply(state, len(events) + k, e)[0] for k, e in enumerate(later)]
    assert [(o.kind, o.reasons[0].code) for o in decided] == [
        (Kind.NOOP, Code.DUPLICATE),
        (Kind.NOOP, Code.DUPLICATE),
        (Kind.NOOP, Code.DUPLICATE),
        (Kind.REJECTED, Code.RESERVATION_ID_CONFLICT),
    ]
