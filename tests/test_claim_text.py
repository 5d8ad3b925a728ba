"""A scheduler's claim written out directly (``consumers.claim_text``) is
the bytes its pydantic model encodes to, and decodes to that model; the
claims it leaves to the model are those the model must see (tags, an id
too long)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.app import App, Settings
from consumers.claim_text import claim_text
from consumers.scheduler import _claim, _Pending
from ledger.publisher import Publisher, PublishError
from schemas.codec import decode_event, encode_event
from schemas.events import DEFAULT_LEASE_MS, MAX_AMOUNT, MAX_LEASE_MS
from schemas.requests import PlacementRequest

# every character a JSON string may need escaped, and some beyond ASCII
ESCAPED = st.sampled_from('"\\\n\t\x00\x1f/é€𝄞')
TEXT = st.text(
    st.characters(codec="utf-8") | ESCAPED,
    min_size=1,
    max_size=40,
)
AMOUNTS = st.integers(1, MAX_AMOUNT)
CLASSES = st.from_regex(r"[A-Z0-9_]{1,12}", fullmatch=True)


@st.composite
def requests(draw: Any) -> PlacementRequest:
    grouped = draw(st.booleans())
    return PlacementRequest(
        request_id=draw(TEXT),
        ts_ms=draw(st.integers(0, 2**53)),
        project_id=draw(TEXT),
        resources=draw(st.dictionaries(CLASSES, AMOUNTS, min_size=1, max_size=4)),
        lease_ms=draw(st.sampled_from((DEFAULT_LEASE_MS, 1, MAX_LEASE_MS, 60_000))),
        group_id=draw(TEXT) if grouped else None,
        group_policy=draw(st.sampled_from(("anti-affinity", "affinity"))) if grouped else None,
    )


@settings(max_examples=300, deadline=None)
@given(requests(), st.integers(0, 999), TEXT, st.integers(1, 3), st.sampled_from(("", "g7")))
def test_the_text_is_the_models(
    r: PlacementRequest, instance: int, provider_id: str, attempts: int, generation: str
) -> None:
    p = _Pending(r, [instance], attempts=attempts)
    model = _claim(p, instance, provider_id, generation)
    written = claim_text(r, instance, provider_id, f"{attempts}{generation}")
    assert written is not None
    assert written.value == encode_event(model)
    assert decode_event(written.value) == model
    assert (written.event_id, written.ts_ms, written.partition_key) == (
        model.event_id,
        model.ts_ms,
        model.partition_key,
    )


def test_left_to_the_model() -> None:
    """Tags (encoded in the model's own set order) and ids longer than the
    model takes are not written out here."""
    r = PlacementRequest(request_id="r", ts_ms=1, project_id="p", resources={"VCPU": 1})
    assert claim_text(r, 0, "node-1", "1") is not None
    for tagged in ({"tags": frozenset({"web"})}, {"require_with_tags": frozenset({"db"})}):
        assert claim_text(r.model_copy(update=tagged), 0, "node-1", "1") is None
    long = r.model_copy(update={"request_id": "r" * 250})
    assert claim_text(long, 0, "node-1", "1") is None
    assert claim_text(r, 0, "n" * 256, "1") is None


def test_appended_as_the_model_would_be(tmp_path: Path) -> None:
    """Through ``publish_encoded`` the written claim lands in its provider's
    partition as the same record ``publish`` of its model appends; a claim
    from too far ahead of the edge's clock is refused, nothing appended."""
    app = App(Settings(data_dir=tmp_path, partitions=4))
    try:
        publisher = Publisher(app.log, clock_ms=lambda: 1_000)
        r = PlacementRequest(request_id="r", ts_ms=1_000, project_id="p", resources={"VCPU": 2})
        p = _Pending(r, [0], attempts=1)
        written = claim_text(r, 0, "node-7", "1")
        assert written is not None
        ((partition, offset),) = publisher.publish_encoded([written])
        assert partition == publisher.partition_of("node-7")
        ((again, next_offset),) = publisher.publish([_claim(p, 0, "node-7", "")])
        topic = app.settings.topics.events
        first, second = app.log.read(topic, partition, offset, 2)
        assert again == partition and next_offset == offset + 1
        assert (first.key, first.value) == (second.key, second.value)
        ahead = claim_text(r.model_copy(update={"ts_ms": 1_000_000}), 0, "node-7", "1")
        assert ahead is not None
        with pytest.raises(PublishError, match="ahead of this edge's clock"):
            publisher.publish_encoded([ahead])
        assert app.log.end_offset(topic, partition) == offset + 2
    finally:
        app.close()
