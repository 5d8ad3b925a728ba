"""What the scheduler workers answered, read back from the placements topic."""

from __future__ import annotations

import json
from typing import Any

from berth.app import App
from tests.contracts.log_contract import read_all


def placement_answers(app: App) -> list[dict[str, Any]]:
    """Every answer on ``app``'s placements topic, partition by partition."""
    topic = app.settings.topics.placements
    return [
        json.loads(r.value)
        for p in range(app.settings.partitions)
        for r in read_all(app.log, topic, p)
    ]
