"""How many more instances of a shape the cluster can take: the spare
capacity an autoscaler adds hosts to keep, beside the queue depth it adds
them to meet.

A provider counts when every filter of the engine lets one instance of the
request through; it then takes as many as its free capacity holds of every
class the shape asks for (with the aggregates' allocation ratios, as the
resource filter measures them), at most ``max_server_per_host`` when the
request's server group is anti-affine. Other per-instance limits (the
number of instances or I/O operations per host) are checked for the first
instance only, so the count is an upper bound where they are enabled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduling.engine import Engine
from scheduling.filters.resources import ResourceFilter
from scheduling.model import IntArray, Request, Snapshot


@dataclass(frozen=True, slots=True)
class Headroom:
    instances: int
    """Instances of the shape that would still fit, all providers together."""
    providers: dict[str, int]
    """Provider -> instances it would take, for those that would take one."""

    def to_dict(self) -> dict[str, object]:
        return {"instances": self.instances, "providers": self.providers}


def headroom(engine: Engine, snapshot: Snapshot, request: Request) -> Headroom:
    rows = engine.feasible(snapshot, request)
    counts = _fits(engine, snapshot, request, rows)
    if request.group_policy == "anti-affinity":
        counts = np.minimum(counts, request.max_server_per_host)
    taken = counts > 0
    providers = snapshot.providers
    return Headroom(
        int(counts.sum()),
        {
            providers[row].provider_id: n
            for row, n in zip(rows[taken].tolist(), counts[taken].tolist(), strict=True)
        },
    )


def _fits(engine: Engine, snapshot: Snapshot, request: Request, rows: IntArray) -> IntArray:
    """Per row, how many instances its free capacity holds of every class
    the request asks a positive amount of."""
    resource = next((f for f in engine.each_pick if isinstance(f, ResourceFilter)), None)
    capacity = resource.capacity(snapshot) if resource else snapshot.capacity_by_class()
    counts: IntArray | None = None
    for rc, amount in request.resources.items():
        column = snapshot.column(rc)
        if amount <= 0 or column is None:
            continue  # the filters have already ruled on a class no provider has
        free = capacity[column, rows] - snapshot.used[rows, column]
        held = np.maximum(free, 0) // amount
        counts = held if counts is None else np.minimum(counts, held)
    if counts is None:  # a shape that asks for nothing fits once per provider
        return np.ones(len(rows), dtype=np.int64)
    return counts
