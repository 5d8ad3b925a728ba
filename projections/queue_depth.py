"""Queue depth by resource shape: a fold over the scheduler's answers.

A batch in ``queue`` mode that does not fit is answered ``queued`` on the
placements topic, with the instances it has waiting per resource shape; its
later answer (committed, or failed at its deadline) takes it out of the queue.
How many instances of each shape wait is the scale-out signal an autoscaler
reads. Pure: the same placements records give the same depth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Waiting:
    """One queued batch: its priority, its instances per shape, and where its
    ``queued`` answer is in the placements topic."""

    priority: int
    shapes: Mapping[str, int]
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Depth:
    instances: int
    batches: int


@dataclass(slots=True)
class QueueDepth:
    waiting: dict[str, Waiting] = field(default_factory=dict)
    """Batch id -> what it has waiting, for every batch now queued."""

    def apply(self, partition: int, offset: int, answer: Mapping[str, Any]) -> None:
        """Fold one answer from the placements topic."""
        batch_id = answer["request_id"]
        if answer.get("status") == "queued" and answer.get("waiting"):
            shapes = {str(k): int(v) for k, v in answer["waiting"].items()}
            priority = int(answer.get("priority", 0))
            self.waiting[batch_id] = Waiting(priority, shapes, partition, offset)
        else:
            self.waiting.pop(batch_id, None)

    def depth(self) -> dict[str, Depth]:
        """Resource shape -> instances and batches waiting, shapes sorted."""
        instances: dict[str, int] = {}
        batches: dict[str, int] = {}
        for waiting in self.waiting.values():
            for shape, count in waiting.shapes.items():
                instances[shape] = instances.get(shape, 0) + count
                batches[shape] = batches.get(shape, 0) + 1
        return {shape: Depth(instances[shape], batches[shape]) for shape in sorted(instances)}
