"""The Placement API's ids (a request's ``req-`` id, an event's id) are
random version 4 UUIDs in their canonical text, as uuid.uuid4's."""

from __future__ import annotations

import uuid

from berth.placement_api.service import random_uuid


def test_random_uuids_are_canonical_version_4_and_distinct() -> None:
    made = [random_uuid() for _ in range(2000)]
    for text in made:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
    assert len(set(made)) == len(made)
