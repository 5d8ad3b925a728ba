"""Deciding Placement's writes: one function per event, each a straight
ladder of refusals (a :class:`Reason` with Placement's message) before it
changes anything. Pure: the clock is the partition's."""

from __future__ import annotations

from projections.aggregates import effective_layout
from projections.emitter import Emitter
from projections.placement.model import (
    STANDARD_RESOURCE_CLASSES,
    STANDARD_TRAITS,
    Allocations,
    PlacementConsumer,
    PlacementProvider,
    PlacementState,
    class_order,
)
from projections.state import EMPTY_LAYOUT, PartitionState, ProviderState
from schemas.events import (
    Inventory,
    PlacementAggregatesSet,
    PlacementAllocationsSet,
    PlacementConsumerAllocations,
    PlacementInventoriesSet,
    PlacementNameDefined,
    PlacementProviderDeleted,
    PlacementProviderSaved,
    PlacementTraitsSet,
)
from schemas.outcomes import Code, Kind, Reason


def placement_of(state: PartitionState) -> PlacementState:
    if state.placement is None:
        state.placement = PlacementState()
    placement: PlacementState = state.placement
    return placement


def _refuse(out: Emitter, subject: str, code: Code, detail: str) -> None:
    out.emit(Kind.REJECTED, subject, (Reason(code, detail=detail),))


def _stale(out: Emitter, provider: PlacementProvider, generation: int | None) -> bool:
    if generation is not None and generation != provider.generation:
        _refuse(
            out,
            provider.uuid,
            Code.PLACEMENT_CONCURRENT_UPDATE,
            f"resource provider generation conflict: {provider.uuid} is at generation "
            f"{provider.generation}, not {generation}",
        )
        return True
    return False


def changed(state: PartitionState, provider: PlacementProvider, generation: bool) -> None:
    placement = placement_of(state)
    if generation:
        provider.generation += 1
    provider.updated_ms = state.clock_ms
    placement.touched_providers.add(provider.uuid)


def provider_saved(state: PartitionState, event: PlacementProviderSaved, out: Emitter) -> None:
    placement = placement_of(state)
    uuid, name, parent = event.uuid, event.name, event.parent
    existing = placement.providers.get(uuid)
    if not event.create and existing is None:
        _refuse(out, uuid, Code.PLACEMENT_NOT_FOUND, f"No resource provider with uuid {uuid} found")
        return
    # Placement checks the parent before it writes the row that a duplicate
    # uuid or name would conflict with: its refusal comes first
    if parent is not None and parent not in placement.providers:
        _refuse(out, uuid, Code.PLACEMENT_INVALID, "parent provider UUID does not exist.")
        return
    if (
        existing is not None
        and parent is not None
        and parent != existing.parent
        and parent in placement.subtree(uuid)
    ):
        _refuse(
            out, uuid, Code.PLACEMENT_INVALID, "creating loop in the provider tree is not allowed."
        )
        return
    if event.create and existing is not None:
        _refuse(
            out,
            uuid,
            Code.PLACEMENT_DUPLICATE,
            f"Conflicting resource provider uuid: {uuid} already exists.",
        )
        return
    holder = placement.names.get(name)
    if holder is not None and holder != uuid:
        _refuse(
            out,
            uuid,
            Code.PLACEMENT_DUPLICATE,
            f"Conflicting resource provider name: {name} already exists.",
        )
        return
    if existing is None:
        _create(state, placement, event)
    else:
        _update(state, placement, existing, event)
    out.emit(Kind.APPLIED, uuid)


def _create(
    state: PartitionState, placement: PlacementState, event: PlacementProviderSaved
) -> None:
    uuid, parent = event.uuid, event.parent
    root = uuid if parent is None else placement.providers[parent].root
    provider = PlacementProvider(
        uuid, event.name, root, parent, created_ms=state.clock_ms, updated_ms=state.clock_ms
    )
    placement.providers[uuid] = provider
    placement.names[event.name] = uuid
    if parent is not None:
        placement.children.setdefault(parent, set()).add(uuid)
    placement.touched_providers.add(uuid)
    # the Berth provider of the same id: its capacity is the one claims and
    # allocations are decided against
    state.providers[uuid] = ProviderState(uuid, event.name, layout=EMPTY_LAYOUT)
    state.reshaped.add(uuid)


def _update(
    state: PartitionState,
    placement: PlacementState,
    provider: PlacementProvider,
    event: PlacementProviderSaved,
) -> None:
    """Rename and re-parent (upstream allows re-parenting from 1.37, which
    the edge checks; a loop is refused before); the subtree follows to its
    new root."""
    parent = event.parent
    if parent != provider.parent:
        subtree = placement.subtree(provider.uuid)
        if provider.parent is not None:
            placement.children[provider.parent].discard(provider.uuid)
        if parent is not None:
            placement.children.setdefault(parent, set()).add(provider.uuid)
        root = provider.uuid if parent is None else placement.providers[parent].root
        provider.parent = parent
        for uuid in subtree:
            placement.providers[uuid].root = root
            placement.touched_providers.add(uuid)
    del placement.names[provider.name]
    placement.names[event.name] = provider.uuid
    provider.name = event.name
    berth = state.providers[provider.uuid]
    berth.name = event.name
    state.reshaped.add(provider.uuid)
    changed(state, provider, generation=False)


def provider_deleted(state: PartitionState, event: PlacementProviderDeleted, out: Emitter) -> None:
    placement = placement_of(state)
    uuid = event.uuid
    provider = placement.providers.get(uuid)
    if provider is None:
        _refuse(
            out,
            uuid,
            Code.PLACEMENT_NOT_FOUND,
            f"No resource provider with uuid {uuid} found for delete",
        )
        return
    if placement.children.get(uuid):
        _refuse(
            out,
            uuid,
            Code.PLACEMENT_IN_USE,
            f"Unable to delete parent resource provider {uuid}: It has child resource providers.",
        )
        return
    berth = state.providers[uuid]
    if berth.active or any(berth.held) or any(berth.consumed):
        _refuse(
            out,
            uuid,
            Code.PLACEMENT_IN_USE,
            f"Unable to delete resource provider {uuid}: Resource provider has allocations.",
        )
        return
    del placement.providers[uuid]
    del placement.names[provider.name]
    placement.children.pop(uuid, None)
    if provider.parent is not None:
        placement.children[provider.parent].discard(uuid)
    placement.touched_providers.add(uuid)
    del state.providers[uuid]
    state.reshaped.add(uuid)
    out.emit(Kind.APPLIED, uuid)


def _provider(
    placement: PlacementState, uuid: str, generation: int | None, out: Emitter
) -> PlacementProvider | None:
    provider = placement.providers.get(uuid)
    if provider is None:
        _refuse(out, uuid, Code.PLACEMENT_NOT_FOUND, f"No resource provider with uuid {uuid} found")
        return None
    if _stale(out, provider, generation):
        return None
    return provider


def inventories_set(state: PartitionState, event: PlacementInventoriesSet, out: Emitter) -> None:
    """Replace a provider's inventories. A class that goes while allocated
    is refused (``placement.inventory.inuse``); a capacity lowered below
    what is used is not (as Placement): nothing more fits until enough goes."""
    placement = placement_of(state)
    provider = _provider(placement, event.uuid, event.generation, out)
    if provider is None:
        return
    unknown = sorted(rc for rc in event.inventories if not placement.resource_class_exists(rc))
    if unknown:
        _refuse(
            out,
            provider.uuid,
            Code.PLACEMENT_INVALID,
            f"Unknown resource class in inventory for resource provider {provider.uuid}: "
            f"{', '.join(unknown)}",
        )
        return
    used = in_use(state, provider.uuid, event.inventories)
    if used:
        _refuse(
            out,
            provider.uuid,
            Code.PLACEMENT_IN_USE,
            f"Inventory for '{', '.join(used)}' on resource provider '{provider.uuid}' in use.",
        )
        return
    replace_inventories(state, provider, event.inventories)
    changed(state, provider, generation=True)
    out.emit(Kind.APPLIED, provider.uuid)


def in_use(state: PartitionState, uuid: str, inventories: dict[str, Inventory]) -> list[str]:
    """The classes a provider has allocated that ``inventories`` would drop."""
    berth = state.providers[uuid]
    return sorted(
        (
            rc
            for i, rc in enumerate(berth.layout.classes)
            if rc not in inventories and berth.held[i] + berth.consumed[i] > 0
        ),
        key=class_order,
    )


def replace_inventories(
    state: PartitionState, provider: PlacementProvider, inventories: dict[str, Inventory]
) -> None:
    """The provider's inventories (checked already), its usage kept per class."""
    berth = state.providers[provider.uuid]
    own = state.layout_for(inventories)
    layout = effective_layout(state, berth, own)
    held = [0] * len(layout.classes)
    consumed = [0] * len(layout.classes)
    for i, rc in enumerate(berth.layout.classes):
        j = layout.index.get(rc)
        if j is not None:
            held[j], consumed[j] = berth.held[i], berth.consumed[i]
    berth.own, berth.layout, berth.held, berth.consumed = own, layout, held, consumed
    state.reshaped.add(provider.uuid)
    provider.inventories = dict(inventories)


def traits_set(state: PartitionState, event: PlacementTraitsSet, out: Emitter) -> None:
    placement = placement_of(state)
    provider = _provider(placement, event.uuid, event.generation, out)
    if provider is None:
        return
    unknown = sorted(t for t in event.traits if not placement.trait_exists(t))
    if unknown:
        _refuse(
            out, provider.uuid, Code.PLACEMENT_INVALID, f"No such trait(s): {', '.join(unknown)}"
        )
        return
    if set(event.traits) == set(provider.traits):
        # Placement's no-op: the generation checked, nothing changed, none moved
        out.emit(Kind.APPLIED, provider.uuid)
        return
    provider.traits = event.traits
    state.providers[provider.uuid].traits = event.traits
    state.reshaped.add(provider.uuid)
    changed(state, provider, generation=True)
    out.emit(Kind.APPLIED, provider.uuid)


def aggregates_set(state: PartitionState, event: PlacementAggregatesSet, out: Emitter) -> None:
    placement = placement_of(state)
    provider = _provider(placement, event.uuid, event.generation, out)
    if provider is None:
        return
    provider.aggregates = event.aggregates
    berth = state.providers[provider.uuid]
    berth.aggregates = frozenset(event.aggregates)
    state.reshaped.add(provider.uuid)
    # from 1.19 (a generation given) a change of aggregates is a new generation
    changed(state, provider, generation=event.generation is not None)
    out.emit(Kind.APPLIED, provider.uuid)


def name_defined(state: PartitionState, event: PlacementNameDefined, out: Emitter) -> None:
    """Create or delete a custom resource class or trait; a standard one, or
    one in use, stays."""
    placement = placement_of(state)
    name = event.name
    is_class = event.kind == "resource_class"
    customs = placement.resource_classes if is_class else placement.traits
    standard = STANDARD_RESOURCE_CLASSES if is_class else STANDARD_TRAITS
    noun = "resource class" if is_class else "trait"
    if event.renamed_to is not None:
        if not _renamed(state, placement, name, event.renamed_to, out):
            return
    elif event.defined:
        if name in customs or name in standard:
            _refuse(
                out, name, Code.PLACEMENT_DUPLICATE, f"{noun.capitalize()} {name} already exists."
            )
            return
        customs[name] = state.clock_ms
    else:
        if name in standard:
            _refuse(out, name, Code.PLACEMENT_INVALID, f"Cannot delete standard {noun} {name}.")
            return
        if name not in customs:
            missing = (
                f"No such resource class {name}." if is_class else f"No such trait(s): {name}."
            )
            _refuse(out, name, Code.PLACEMENT_NOT_FOUND, missing)
            return
        if any(
            (name in p.inventories if is_class else name in p.traits)
            for p in placement.providers.values()
        ):
            refusal = (
                f"Cannot delete resource class {name}. Class is in use in inventory."
                if is_class
                else f"The trait {name} is in use by a resource provider."
            )
            _refuse(out, name, Code.PLACEMENT_IN_USE, refusal)
            return
        del customs[name]
    placement.touched_names.add((event.kind, name))
    out.emit(Kind.APPLIED, name)


def _renamed(
    state: PartitionState, placement: PlacementState, old: str, new: str, out: Emitter
) -> bool:
    """Rename a custom resource class everywhere it is used."""
    if old in STANDARD_RESOURCE_CLASSES:
        _refuse(out, old, Code.PLACEMENT_INVALID, f"Cannot update standard resource class {old}")
        return False
    if old not in placement.resource_classes:
        _refuse(out, old, Code.PLACEMENT_NOT_FOUND, f"No such resource class {old}.")
        return False
    if placement.resource_class_exists(new):
        _refuse(out, old, Code.PLACEMENT_DUPLICATE, f"Resource class already exists: {new}")
        return False
    placement.resource_classes[new] = placement.resource_classes.pop(old)
    placement.touched_names.add(("resource_class", new))
    for provider in placement.providers.values():
        if old in provider.inventories:
            provider.inventories = {
                (new if rc == old else rc): inv for rc, inv in provider.inventories.items()
            }
            _relabel(state, state.providers[provider.uuid], old, new)
            placement.touched_providers.add(provider.uuid)
    for consumer in placement.consumers.values():
        if any(old in amounts for amounts in consumer.allocations.values()):
            consumer.allocations = {
                uuid: {(new if rc == old else rc): n for rc, n in amounts.items()}
                for uuid, amounts in consumer.allocations.items()
            }
            placement.touched_consumers.add(consumer.uuid)
    return True


def _relabel(state: PartitionState, berth: ProviderState, old: str, new: str) -> None:
    """The Berth provider's inventory with one class renamed, its usage kept."""
    limits = dict(zip(berth.own.classes, berth.own.limits, strict=True))
    inventories = {
        (new if rc == old else rc): Inventory(
            total=lim.total,
            reserved=lim.reserved,
            min_unit=lim.min_unit,
            max_unit=lim.max_unit,
            step_size=lim.step_size,
            allocation_ratio=lim.allocation_ratio,
        )
        for rc, lim in limits.items()
    }
    used = {
        (new if rc == old else rc): (berth.held[i], berth.consumed[i])
        for i, rc in enumerate(berth.layout.classes)
    }
    own = state.layout_for(inventories)
    layout = effective_layout(state, berth, own)
    berth.own, berth.layout = own, layout
    berth.held = [used.get(rc, (0, 0))[0] for rc in layout.classes]
    berth.consumed = [used.get(rc, (0, 0))[1] for rc in layout.classes]
    state.reshaped.add(berth.provider_id)


def allocations_set(state: PartitionState, event: PlacementAllocationsSet, out: Emitter) -> None:
    """Replace the allocations of every consumer named, all or none: each
    consumer's generation must be the one written against; each amount a
    class the provider has, within its unit rules and its capacity with
    these consumers' old allocations taken out. Every provider allocated
    from, and every consumer, moves to its next generation."""
    placement = placement_of(state)
    subject = event.consumers[0].consumer
    reason = _consumers_refused(placement, event.consumers) or _allocations_refused(
        state, placement, event.consumers
    )
    if reason is not None:
        out.emit(Kind.REJECTED, subject, (reason,))
        return
    for uuid in sorted(write_allocations(state, placement, event.consumers, event.emptied_touch)):
        changed(state, placement.providers[uuid], generation=True)
    out.emit(Kind.APPLIED, subject)


def check_allocations(
    state: PartitionState,
    placement: PlacementState,
    specs: tuple[PlacementConsumerAllocations, ...],
) -> Reason | None:
    """Why these consumers' allocations cannot be written, or None."""
    return _consumers_refused(placement, specs) or _allocations_refused(state, placement, specs)


def write_allocations(
    state: PartitionState,
    placement: PlacementState,
    specs: tuple[PlacementConsumerAllocations, ...],
    emptied_touch: bool,
) -> set[str]:
    """Replace the consumers' allocations (checked already); the providers
    whose generation moves: those allocated from and, with
    ``emptied_touch``, those a consumer's emptied allocations were on."""
    touched: set[str] = set()
    for spec in specs:
        old = placement.consumers.get(spec.consumer)
        if old is not None:
            _count(state, old.allocations, -1)
            if emptied_touch and not spec.allocations:
                touched.update(old.allocations)
    for spec in specs:
        _replace(state, placement, spec)
        touched.update(spec.allocations)
    return {uuid for uuid in touched if uuid in placement.providers}


def _consumers_refused(
    placement: PlacementState, specs: tuple[PlacementConsumerAllocations, ...]
) -> Reason | None:
    for spec in specs:
        if not spec.check_generation:
            continue
        held = placement.consumers.get(spec.consumer)
        if held is None and spec.generation is not None:
            return Reason(
                Code.PLACEMENT_CONCURRENT_UPDATE,
                detail=f"consumer generation conflict - expected null but got {spec.generation}",
            )
        if held is not None and held.generation != spec.generation:
            return Reason(
                Code.PLACEMENT_CONCURRENT_UPDATE,
                detail=f"consumer generation conflict - expected {held.generation} but got "
                f"{spec.generation}",
            )
    return None


def _allocations_refused(
    state: PartitionState,
    placement: PlacementState,
    specs: tuple[PlacementConsumerAllocations, ...],
) -> Reason | None:
    """The first allocation that cannot be made, after the named consumers'
    old allocations are given back."""
    freed: dict[tuple[str, str], int] = {}
    wanted: dict[tuple[str, str], int] = {}
    for spec in specs:
        old = placement.consumers.get(spec.consumer)
        if old is not None:
            for uuid, amounts in old.allocations.items():
                for rc, amount in amounts.items():
                    freed[uuid, rc] = freed.get((uuid, rc), 0) + amount
        for uuid, amounts in spec.allocations.items():
            for rc, amount in amounts.items():
                wanted[uuid, rc] = wanted.get((uuid, rc), 0) + amount
    for spec in specs:
        for uuid in sorted(spec.allocations):
            if uuid not in placement.providers:
                return Reason(
                    Code.PLACEMENT_NOT_FOUND,
                    uuid,
                    detail=f"Allocation for resource provider '{uuid}' that does not exist.",
                )
    bare = _without_inventory(placement, specs)
    if bare is not None:
        return bare
    for spec in specs:
        for uuid, amounts in sorted(spec.allocations.items()):
            for rc, amount in sorted(amounts.items()):
                reason = _unit_refused(placement, uuid, rc, amount)
                if reason is not None:
                    return reason
    for (uuid, rc), amount in sorted(wanted.items()):
        reason = _fits(state, placement, uuid, rc, amount, freed.get((uuid, rc), 0))
        if reason is not None:
            return reason
    return None


def _without_inventory(
    placement: PlacementState, specs: tuple[PlacementConsumerAllocations, ...]
) -> Reason | None:
    """Placement's first capacity check: providers of the write with no
    inventory of any class the write names, refused naming every class
    (in Placement's order) and every such provider."""
    classes = {rc for spec in specs for amounts in spec.allocations.values() for rc in amounts}
    if not all(placement.resource_class_exists(rc) for rc in classes):
        return None  # _fits names the unknown class
    bare = sorted(
        {
            uuid
            for spec in specs
            for uuid in spec.allocations
            if not classes & placement.providers[uuid].inventories.keys()
        }
    )
    if not bare:
        return None
    named = ", ".join(sorted(classes, key=class_order))
    return Reason(
        Code.PLACEMENT_CAPACITY,
        bare[0],
        detail=f"Inventory for '{named}' on resource provider '{', '.join(bare)}' invalid.",
    )


def _unit_refused(placement: PlacementState, uuid: str, rc: str, amount: int) -> Reason | None:
    inventory = placement.providers[uuid].inventories.get(rc)
    if inventory is None:
        return None  # _fits says why
    if amount < inventory.min_unit or amount > inventory.max_unit or amount % inventory.step_size:
        return Reason(
            Code.PLACEMENT_CAPACITY,
            uuid,
            rc,
            amount,
            detail=f"Unable to create allocation for '{rc}' on resource provider '{uuid}'. "
            "The requested amount would violate inventory constraints.",
        )
    return None


def _fits(
    state: PartitionState, placement: PlacementState, uuid: str, rc: str, amount: int, freed: int
) -> Reason | None:
    berth = state.providers[uuid]
    i = berth.layout.index.get(rc)
    if i is None:
        if not placement.resource_class_exists(rc):
            return Reason(
                Code.PLACEMENT_NOT_FOUND,
                uuid,
                rc,
                detail=f"No such resource class {rc}.",
            )
        return Reason(
            Code.PLACEMENT_CAPACITY,
            uuid,
            rc,
            detail=f"Inventory for '{rc}' on resource provider '{uuid}' invalid.",
        )
    limits = berth.layout.limits[i]
    used = berth.held[i] + berth.consumed[i] - freed
    if used + amount > limits.capacity:
        return Reason(
            Code.PLACEMENT_CAPACITY,
            uuid,
            rc,
            amount,
            max(limits.capacity - used, 0),
            detail=f"Unable to create allocation for '{rc}' on resource provider '{uuid}'. "
            "The requested amount would exceed the capacity.",
        )
    return None


def _count(state: PartitionState, allocations: Allocations, sign: int) -> None:
    """Add (``sign`` 1) or take out (-1) allocations from the providers' consumed."""
    for uuid, amounts in allocations.items():
        berth = state.providers.get(uuid)
        if berth is None:
            continue
        index = berth.layout.index
        for rc, amount in amounts.items():
            i = index.get(rc)
            if i is not None:
                berth.consumed[i] += sign * amount
        state.touched.add(uuid)


def _replace(
    state: PartitionState, placement: PlacementState, spec: PlacementConsumerAllocations
) -> None:
    consumer = placement.consumers.get(spec.consumer)
    placement.touched_consumers.add(spec.consumer)
    allocations = {uuid: dict(amounts) for uuid, amounts in spec.allocations.items() if amounts}
    if not allocations:
        placement.consumers.pop(spec.consumer, None)
        return
    if consumer is None:
        consumer = PlacementConsumer(
            spec.consumer, spec.project_id, spec.user_id, created_ms=state.clock_ms
        )
        placement.consumers[spec.consumer] = consumer
    consumer.project_id, consumer.user_id = spec.project_id, spec.user_id
    if spec.consumer_type is not None:
        consumer.consumer_type = spec.consumer_type
    consumer.generation += 1
    consumer.allocations = allocations
    consumer.updated_ms = state.clock_ms
    _count(state, allocations, 1)
