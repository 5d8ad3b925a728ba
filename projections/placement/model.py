"""Placement's part of a partition's decision state."""

from __future__ import annotations

from dataclasses import dataclass, field

import os_resource_classes
import os_traits

from schemas.events import Inventory

STANDARD_RESOURCE_CLASSES: frozenset[str] = frozenset(os_resource_classes.STANDARDS)
"""The standard classes of the installed ``os-resource-classes``; a later
release only adds names, so a log decided with an older one replays alike."""
STANDARD_TRAITS: frozenset[str] = frozenset(os_traits.get_traits())

_STANDARD_ORDER = {name: i for i, name in enumerate(os_resource_classes.STANDARDS)}


def class_order(name: str) -> tuple[int, str]:
    """Resource classes as Placement lists them: standard ones in their
    package's order, then custom ones by name."""
    return (_STANDARD_ORDER.get(name, len(_STANDARD_ORDER)), name)


Allocations = dict[str, dict[str, int]]
"""Provider uuid -> resource class -> amount."""


@dataclass(slots=True, eq=False)
class PlacementProvider:
    uuid: str
    name: str
    root: str
    parent: str | None = None
    generation: int = 0
    traits: frozenset[str] = frozenset()
    aggregates: tuple[str, ...] = ()
    inventories: dict[str, Inventory] = field(default_factory=dict)
    created_ms: int = 0
    updated_ms: int = 0


@dataclass(slots=True, eq=False)
class PlacementConsumer:
    uuid: str
    project_id: str
    user_id: str
    consumer_type: str | None = None
    generation: int = 0
    allocations: Allocations = field(default_factory=dict)
    created_ms: int = 0
    updated_ms: int = 0


@dataclass(slots=True, eq=False)
class PlacementState:
    """Providers by uuid (and their names, children), consumers by uuid, the
    custom resource classes and traits with when each was made; and what
    changed since the view last drained it."""

    providers: dict[str, PlacementProvider] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    children: dict[str, set[str]] = field(default_factory=dict)
    consumers: dict[str, PlacementConsumer] = field(default_factory=dict)
    resource_classes: dict[str, int] = field(default_factory=dict)
    traits: dict[str, int] = field(default_factory=dict)
    touched_providers: set[str] = field(default_factory=set)
    touched_consumers: set[str] = field(default_factory=set)
    touched_names: set[tuple[str, str]] = field(default_factory=set)

    def resource_class_exists(self, name: str) -> bool:
        return name in STANDARD_RESOURCE_CLASSES or name in self.resource_classes

    def trait_exists(self, name: str) -> bool:
        return name in STANDARD_TRAITS or name in self.traits

    def subtree(self, uuid: str) -> set[str]:
        """``uuid`` and every provider below it."""
        found = {uuid}
        stack = [uuid]
        while stack:
            for child in self.children.get(stack.pop(), ()):
                if child not in found:
                    found.add(child)
                    stack.append(child)
        return found
