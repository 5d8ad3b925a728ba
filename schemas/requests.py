"""Placement requests: what a service asks the scheduler for, before any claim."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from schemas.events import (
    DEFAULT_LEASE_MS,
    MAX_LEASE_MS,
    Amount,
    Identifier,
    Model,
    ResourceClass,
    Tag,
)

GroupPolicyName = Literal["affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"]
Names = frozenset[Annotated[str, Field(min_length=1, max_length=255)]]


class PlacementRequest(Model):
    """``num_instances`` instances of one shape, with Nova-style constraints."""

    request_id: Identifier
    ts_ms: int = Field(ge=0)
    project_id: Identifier
    user_id: Identifier | None = None
    resources: dict[ResourceClass, Amount] = Field(min_length=1, max_length=64)
    num_instances: int = Field(default=1, ge=1, le=1000)
    lease_ms: int = Field(default=DEFAULT_LEASE_MS, ge=1, le=MAX_LEASE_MS)
    flavor_name: str = ""
    extra_specs: dict[str, str] = Field(default_factory=dict)
    image_properties: dict[str, str] = Field(default_factory=dict)
    availability_zone: Identifier | None = None
    required_traits: Names = frozenset()
    forbidden_traits: Names = frozenset()
    same_host: frozenset[Identifier] = frozenset()
    different_host: frozenset[Identifier] = frozenset()
    query: str | None = None
    group_id: Identifier | None = None
    group_policy: GroupPolicyName | None = None
    tags: frozenset[Tag] = frozenset()
    require_with_tags: frozenset[Tag] = frozenset()
    require_without_tags: frozenset[Tag] = frozenset()
    prefer_with_tags: frozenset[Tag] = frozenset()
    prefer_without_tags: frozenset[Tag] = frozenset()
    explain: bool = False
