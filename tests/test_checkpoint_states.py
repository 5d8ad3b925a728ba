"""A checkpoint's pickled writer states, over random logs of pools,
identifier claims, claim sets and transactions: the state loaded from the
view, pickled and read back, is the same state and decides the rest of the
log as the uninterrupted run did (compiled classes included, whose own
pickling cannot remake every one of them)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from berth.checkpoints import dump_states, load_states
from projections.batch import Applied, Batch
from projections.projector import apply
from projections.state import PartitionState
from projections.view.engine import make_engine
from projections.view.loader import load_state
from projections.view.tables import metadata
from projections.view.writer import ViewWriter
from schemas.events import Event
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
