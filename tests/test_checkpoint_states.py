"""A checkpoint's pickled writer states, over random logs of pools,
identifier claims, claim sets and transactions: the state loaded from the
view, pickled and read back, is the same state and decides the rest of the
log as the uninterrupted run did (compiled classes included, whose own
pickling cannot remake every one of them)."""

from __future__ import annotations

import dataclasses
import io
import pickle
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from berth.checkpoints import _StatePickler, dump_states, load_states
from projections.batch import Applied, Batch
from projections.projector import apply
from projections.state import PartitionState, ProviderState, Reservation
from projections.view.engine import make_engine
from projections.view.loader import load_state
from projections.view.tables import metadata
from projections.view.writer import ViewWriter
from schemas.events import Event
from schemas.topology import TopologyFit
from tests.contracts.view_contract import _assert_same_state
from tests.test_transaction_properties import SETTINGS, records


@settings(SETTINGS, max_examples=40, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(records(), st.data())
def test_a_pickled_state_decides_the_rest_of_the_log_as_the_live_one(
    events: list[Event], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(1, len(events) - 1), label="cut")
    fresh = PartitionState(0, 1)
    expected = [apply(fresh, offset, event) for offset, event in enumerate(events)]
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'view.db'}", writer=True)
        try:
            metadata.create_all(engine)
            live = PartitionState(0, 1)
            batch = Batch(0, 0, cut)
            for offset in range(cut):
                event = events[offset]
                batch.applied.append(Applied(offset, event, apply(live, offset, event)))
            assert ViewWriter(engine).commit(live, batch)
            with engine.connect() as conn:
                loaded, _ = load_state(conn, 0, 1)
        finally:
            engine.dispose()
    (restored,), _ = load_states(dump_states([loaded]))
    _assert_same_state(restored, live)
    rest = [apply(restored, offset, e) for offset, e in enumerate(events[cut:], cut)]
    assert rest == expected[cut:]


def _fields(reservation: Reservation) -> tuple[Any, ...]:
    """Every field of a reservation, its providers by id."""
    return (
        reservation.reservation_id,
        [(p.provider_id, amounts) for p, amounts in reservation.items],
        reservation.status,
        reservation.expires_at_ms,
        reservation.fingerprint,
        reservation.group,
        reservation.tags,
        reservation.consumer_id,
        reservation.identifiers,
        reservation.transaction,
        reservation.lease_ms,
        reservation.project_id,
        reservation.membership,
        [(p.provider_id, fit) for p, fit in reservation.fits],
    )


def _two_reservations() -> PartitionState:
    """A state with a reservation that sets every field it may leave as its
    default, and one that sets none of them."""
    state = PartitionState(0, 1)
    node = state.providers["node-1"] = ProviderState("node-1", "node-1")
    shape = state.shape({"VCPU": 2})
    state.reservations["full"] = Reservation(
        "full",
        ((node, shape),),
        1,
        9_000,
        -(2**63),
        group="g-1",
        tags=frozenset({"ci"}),
        consumer_id="vm-1",
        transaction="tx-1",
        lease_ms=600_000,
        project_id="p-1",
        membership=("g-1", "node-1"),
        fits=((node, TopologyFit(devices=("0000:00:01.0",))),),
    )
    state.reservations["bare"] = Reservation("bare", ((node, shape),), 0, 5_000, 2**63 - 1)
    return state


def test_reservations_saved_a_field_at_a_time_come_back_as_they_were() -> None:
    state = _two_reservations()
    (restored,), _ = load_states(dump_states([state]))
    assert list(restored.reservations) == ["full", "bare"]
    for rid, reservation in state.reservations.items():
        again = restored.reservations[rid]
        assert _fields(again) == _fields(reservation)
        # the provider a reservation holds is the state's own, not a copy
        assert all(p is restored.providers["node-1"] for p, _ in again.items)
    assert restored.reservations["bare"].tags == frozenset()


class _OneAtATime(_StatePickler):
    """How checkpoints pickled a state before: a reservation an object."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is PartitionState:
            return PartitionState, tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))
        return super().reducer_override(obj)


def test_states_pickled_a_reservation_at_a_time_still_read() -> None:
    state = _two_reservations()
    buffer = io.BytesIO()
    _OneAtATime(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump([state])
    _OneAtATime(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(None)
    data = buffer.getvalue()
    assert data.count(b"_with_reservations") == 0
    (restored,), _ = load_states(data)
    assert {r: _fields(x) for r, x in restored.reservations.items()} == {
        r: _fields(x) for r, x in state.reservations.items()
    }
