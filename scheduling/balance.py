"""Load balancing: a plan of instance moves, oVirt's periodic balancing.

Each step asks for the providers to relieve: first any provider whose state
is ``evacuating`` (every instance must go, to any enabled provider that
fits), then those the configured balance unit names (see
:mod:`scheduling.balancers.base`). For each, in order, it tries the unit's
instances in the unit's order; the placement engine ranks the providers the
unit allows for that instance, with the instance's own claim rules
(anti-affinity group, tag requirements) and what its request asked of NUMA
cells and PCI devices (fitted as its placement was: the move carries the
CPUs, pages and devices it takes there), and the first instance that fits
somewhere is moved, virtually, before the next step. The plan stops when
nothing is left to relieve, when nothing that is left can move, or at
``max_moves``.

The plan proposes; it changes nothing. A move is carried out as Nova carries
out a migration: a claim for the instance's resources on the destination
(decided by that partition's writer, which may refuse it if the view was
stale), the instance moved, then the old reservation released and the new
one consumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from scheduling.balancers.base import BalanceUnit, Instance, Load, Source
from scheduling.balancers.even_distribution import EvenDistribution
from scheduling.balancers.even_guest_distribution import EvenGuestDistribution
from scheduling.balancers.power_saving import PowerSaving
from scheduling.engine import Engine
from scheduling.fit import claim_fit, fits_topology
from scheduling.model import BoolArray, PlacementReason, Request, Snapshot, TagRules
from schemas.guest_topology import SriovPort
from schemas.topology import TopologyFit

BALANCE_UNITS: dict[str, type[BalanceUnit]] = {
    cls.name: cls for cls in (EvenDistribution, PowerSaving, EvenGuestDistribution)
}
"""By oVirt's policy names; ``none`` is no unit (evacuation only)."""


@dataclass(frozen=True, slots=True)
class Move:
    instance: Instance
    source: str
    destination: str
    why: str
    """Why the source was relieved."""
    fit: TopologyFit | None = None
    """What the instance takes of the destination's NUMA cells and PCI
    devices (``scheduling.fit``), fitted as its placement was."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reservation_id": self.instance.reservation_id,
            "consumer_id": self.instance.consumer_id,
            "resources": dict(self.instance.resources),
            "source": self.source,
            "destination": self.destination,
            "why": self.why,
        }
        if self.fit is not None:
            out["fit"] = self.fit.model_dump(mode="json", exclude_defaults=True)
        return out


@dataclass(frozen=True, slots=True)
class Plan:
    moves: tuple[Move, ...]
    stopped: str
    """Why the plan ends where it does."""

    def to_dict(self) -> dict[str, Any]:
        return {"moves": [m.to_dict() for m in self.moves], "stopped": self.stopped}


class Balancer:
    """A balance unit (None: evacuation only) and the engine that places what it moves."""

    def __init__(self, unit: BalanceUnit | None, engine: Engine, max_moves: int = 10) -> None:
        if max_moves < 0:
            raise ValueError(f"max_moves must be 0 or more, not {max_moves}")
        self.unit = unit
        self.engine = engine
        self.max_moves = max_moves

    def plan(
        self,
        snapshot: Snapshot,
        instances: Sequence[Instance],
        leaving: Sequence[Instance] = (),
    ) -> Plan:
        """The moves that would balance ``snapshot``, where ``instances`` are
        the instances that may move and ``leaving`` those already moving
        (their sources count as relieved of them, though nothing may take
        their room until they are gone)."""
        load = Load.of(snapshot, instances, leaving)
        # moves change what is placed where, never a provider's state
        evacuating = [r for r, p in enumerate(snapshot.providers) if p.state == "evacuating"]
        moves: list[Move] = []
        while len(moves) < self.max_moves:
            move, why = self._next(load, evacuating)
            if move is None:
                return Plan(tuple(moves), why)
            moves.append(move)
            load = load.moved(
                move.instance,
                load.snapshot.row_of[move.source],
                load.snapshot.row_of[move.destination],
                move.fit,
            )
        return Plan(tuple(moves), f"stopped at max_moves ({self.max_moves})")

    def _next(self, load: Load, evacuating: list[int]) -> tuple[Move | None, str]:
        unit = self.unit
        sources = chain(
            (
                Source(r, "evacuating", f"{load.provider_id(r)}: evacuating")
                for r in evacuating
                if load.by_row[r]
            ),
            unit.sources(load) if unit is not None else (),
        )
        stuck: list[str] = []
        for source in sources:
            # an evacuation takes every instance, to any provider that fits
            rules = None if source.kind == "evacuating" else unit
            if rules is None:
                candidates = list(load.by_row[source.row])
            else:
                candidates = rules.candidates(load, source)
            for instance in candidates:
                move = self._place(load, source, instance, rules)
                if move is not None:
                    return move, ""
            stuck.append(source.why)
        if not stuck:
            return None, unit.balanced() if unit is not None else "no provider is evacuating"
        more = f"; and {len(stuck) - 3} more" if len(stuck) > 3 else ""
        return None, "nothing left can move: " + "; ".join(stuck[:3]) + more

    def _place(
        self, load: Load, source: Source, instance: Instance, rules: BalanceUnit | None
    ) -> Move | None:
        if instance.fitted and instance.guest is None:
            return None  # pinned, with nothing to pin it by elsewhere
        allowed: BoolArray
        if rules is None:
            allowed = load.open_to(source.row)
        else:
            allowed = rules.destinations(load, source, instance)
        rows = np.flatnonzero(allowed)
        if not len(rows):
            return None
        reason: PlacementReason = "evacuation" if source.kind == "evacuating" else "relocation"
        request = request_for(instance, reason, load.provider_id(source.row))
        snapshot = load.snapshot
        placement = self.engine.place(snapshot, request, among=rows)
        if not placement.placed:
            return None
        destination = placement.providers[0]
        fit = None
        if instance.guest is not None and fits_topology(self.engine):
            # the filters passed it on the cells and devices free there
            # (with the plan's earlier moves' fits taken): what it takes
            found = claim_fit(self.engine, snapshot, snapshot.row_of[destination], request)
            if isinstance(found, str):
                raise AssertionError(f"{destination}: {found}")
            fit = found
        return Move(instance, load.provider_id(source.row), destination, source.why, fit)


def request_for(instance: Instance, reason: PlacementReason, source: str | None = None) -> Request:
    """The engine's request for one more copy of ``instance``, elsewhere
    than ``source``, the provider it leaves."""
    group = instance.anti_affinity_group
    guest = instance.guest
    return Request(
        request_id=f"move-{instance.reservation_id}",
        reason=reason,
        source_provider=source,
        resources=dict(instance.resources),
        project_id=instance.project_id,
        group_id=group,
        group_policy="anti-affinity" if group else None,
        tags=TagRules(
            require_with=instance.require_with_tags,
            require_without=instance.require_without_tags,
        ),
        extra_specs={} if guest is None else dict(guest.extra_specs),
        image_properties={} if guest is None else dict(guest.image_properties),
        sriov_ports=()
        if guest is None
        else tuple(
            SriovPort(p.physical_network, p.vnic_type, p.numa_affinity_policy)
            for p in guest.sriov_ports
        ),
    )
