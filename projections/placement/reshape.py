"""1.30's reshaper: several providers' inventories and several consumers'
allocations replaced as one decision, so a tree's resources can move from
one provider to another with the allocations against them.

As Placement does it: each provider first gets its old inventory with the
new one laid over it (so allocations can move to classes it is gaining),
then the allocations are replaced, then each provider gets exactly its new
inventory (so a class it gives up must be free by then). Each step moves
the generations it moves in Placement. A refusal at any step puts back
everything the record changed: the decision is all or nothing."""

from __future__ import annotations

from dataclasses import dataclass

from projections.emitter import Emitter
from projections.placement.decide import (
    changed,
    check_allocations,
    in_use,
    placement_of,
    replace_inventories,
    write_allocations,
)
from projections.placement.model import PlacementConsumer, PlacementState
from projections.state import Layout, PartitionState
from schemas.events import Inventory, PlacementReshaped
from schemas.outcomes import Code, Kind, Reason


@dataclass
class _Saved:
    """What a reshape may change, to put back on a refusal."""

    providers: dict[
        str, tuple[dict[str, Inventory], int, int, Layout, Layout, list[int], list[int]]
    ]
    consumers: dict[str, PlacementConsumer | None]

    @classmethod
    def of(
        cls, state: PartitionState, placement: PlacementState, event: PlacementReshaped
    ) -> _Saved:
        uuids = set(event.inventories)
        consumers: dict[str, PlacementConsumer | None] = {}
        for spec in event.consumers:
            uuids.update(spec.allocations)
            old = placement.consumers.get(spec.consumer)
            consumers[spec.consumer] = old
            if old is not None:
                uuids.update(old.allocations)
        providers = {}
        for uuid in uuids:
            p = placement.providers.get(uuid)
            b = state.providers.get(uuid)
            if p is None or b is None:
                continue
            providers[uuid] = (
                dict(p.inventories),
                p.generation,
                p.updated_ms,
                b.own,
                b.layout,
                list(b.held),
                list(b.consumed),
            )
        return cls(providers, consumers)

    def restore(self, state: PartitionState, placement: PlacementState) -> None:
        for uuid, (
            inventories,
            generation,
            updated,
            own,
            layout,
            held,
            consumed,
        ) in self.providers.items():
            p, b = placement.providers[uuid], state.providers[uuid]
            p.inventories, p.generation, p.updated_ms = inventories, generation, updated
            b.own, b.layout, b.held, b.consumed = own, layout, held, consumed
        for uuid, consumer in self.consumers.items():
            if consumer is None:
                placement.consumers.pop(uuid, None)
            else:
                placement.consumers[uuid] = consumer


def reshaped(state: PartitionState, event: PlacementReshaped, out: Emitter) -> None:
    placement = placement_of(state)
    subject = next(iter(sorted(event.inventories)), "reshaper")
    reason = _refused_before(state, placement, event)
    if reason is not None:
        out.emit(Kind.REJECTED, subject, (reason,))
        return
    saved = _Saved.of(state, placement, event)
    # consumers are replaced, not mutated, by write_allocations: keep copies
    for uuid, consumer in saved.consumers.items():
        if consumer is not None:
            placement.consumers[uuid] = PlacementConsumer(
                consumer.uuid,
                consumer.project_id,
                consumer.user_id,
                consumer.consumer_type,
                consumer.generation,
                {p: dict(a) for p, a in consumer.allocations.items()},
                consumer.created_ms,
                consumer.updated_ms,
            )
    reason = _apply(state, placement, event)
    if reason is not None:
        saved.restore(state, placement)
        out.emit(Kind.REJECTED, subject, (reason,))
        return
    out.emit(Kind.APPLIED, subject)


def _refused_before(
    state: PartitionState, placement: PlacementState, event: PlacementReshaped
) -> Reason | None:
    for uuid, given in sorted(event.inventories.items()):
        provider = placement.providers.get(uuid)
        if provider is None:
            return Reason(
                Code.PLACEMENT_NOT_FOUND,
                uuid,
                detail=f"Resource provider {uuid} in inventories not found",
            )
        if provider.generation != given.generation:
            return Reason(
                Code.PLACEMENT_CONCURRENT_UPDATE,
                uuid,
                detail=f"resource provider generation conflict for provider {uuid}: actual: "
                f"{provider.generation}, given: {given.generation}",
            )
        unknown = sorted(rc for rc in given.inventories if not placement.resource_class_exists(rc))
        if unknown:
            return Reason(
                Code.PLACEMENT_INVALID, uuid, detail=f"No such resource class {unknown[0]}."
            )
    return None


def _apply(
    state: PartitionState, placement: PlacementState, event: PlacementReshaped
) -> Reason | None:
    for uuid, given in sorted(event.inventories.items()):
        if given.inventories:
            provider = placement.providers[uuid]
            replace_inventories(state, provider, {**provider.inventories, **given.inventories})
            changed(state, provider, generation=True)
    reason = check_allocations(state, placement, event.consumers)
    if reason is not None:
        return reason
    for uuid in sorted(write_allocations(state, placement, event.consumers, True)):
        changed(state, placement.providers[uuid], generation=True)
    for uuid, given in sorted(event.inventories.items()):
        used = in_use(state, uuid, given.inventories)
        if used:
            return Reason(
                Code.PLACEMENT_IN_USE,
                uuid,
                detail=f"Inventory for '{', '.join(used)}' on resource provider '{uuid}' in use.",
            )
        provider = placement.providers[uuid]
        replace_inventories(state, provider, given.inventories)
        changed(state, provider, generation=True)
    return None
