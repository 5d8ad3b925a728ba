"""The view as the projector's checkpoint, over random logs of pools, identifier
claims, claim sets and transactions cut into random batches: after every
commit the state loaded from the view equals the live one, the identifier rows
are exactly those live reservations hold, and the loaded state decides the
rest of the log as the uninterrupted run did."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.batch import Applied, Batch
from projections.projector import apply
from projections.state import PartitionState
from projections.view.engine import make_engine
from projections.view.loader import load_state
from projections.view.tables import metadata
from projections.view.writer import ViewWriter
from schemas.events import Event
from tests.contracts.view_contract import _assert_identifiers_match, _assert_same_state
from tests.test_transaction_properties import SETTINGS, records


@settings(SETTINGS, max_examples=75)
@given(records(), st.data())
def test_the_view_is_an_exact_checkpoint_after_every_batch(
    events: list[Event], data: st.DataObject
) -> None:
    inner = st.integers(1, len(events) - 1)
    cuts = [*sorted(data.draw(st.sets(inner, max_size=8), label="cuts")), len(events)]
    fresh = PartitionState(0, 1)
    expected = [apply(fresh, offset, event) for offset, event in enumerate(events)]
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'view.db'}", writer=True)
        try:
            metadata.create_all(engine)
            view = ViewWriter(engine)
            live = PartitionState(0, 1)
            start = 0
            for end in cuts:
                batch = Batch(0, start, end)
                for offset in range(start, end):
                    event = events[offset]
                    batch.applied.append(Applied(offset, event, apply(live, offset, event)))
                assert view.commit(live, batch)
                with engine.connect() as conn:
                    loaded, next_offset = load_state(conn, 0, 1)
                assert next_offset == end
                _assert_same_state(loaded, live)
                _assert_identifiers_match(engine, live)
                rest = [apply(loaded, offset, e) for offset, e in enumerate(events[end:], end)]
                assert rest == expected[end:]
                start = end
        finally:
            engine.dispose()
