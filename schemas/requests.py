"""Placement requests: what a service asks the scheduler for, before any claim."""

from __future__ import annotations

import ipaddress
import json
from typing import Annotated, Literal, Self

from pydantic import Field, field_validator, model_validator

from schemas.events import (
    DEFAULT_LEASE_MS,
    MAX_LEASE_MS,
    Amount,
    GroupPolicyName,
    GuestAsks,
    Identifier,
    IdentifierItem,
    Model,
    ResourceClass,
    SriovPortSpec,
    Tag,
)
from schemas.guest_topology import guest_topology, pci_asks, pci_numa_policy, topology_keys

PlacementReason = Literal["new", "evacuation", "relocation"]
Names = frozenset[Annotated[str, Field(min_length=1, max_length=255)]]


class PlacementRequest(Model):
    """``num_instances`` instances of one shape, with Nova-style constraints."""

    request_id: Identifier
    ts_ms: int = Field(ge=0)
    project_id: Identifier
    user_id: Identifier | None = None
    name: Annotated[str, Field(max_length=255)] = ""
    """The instance's name (LXD's ``request.name``), for the placement scriptlet."""
    reason: PlacementReason = "new"
    """Why it is placed: a new instance, or one moved off an evacuating
    provider or to balance load (the placement scriptlet sees it)."""
    source_provider: Identifier | None = None
    """On a move (a reason other than ``new``), the provider the instance
    leaves: CrossCellWeigher prefers destinations in its cell."""
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
    build_near_host_ip: Annotated[str, Field(min_length=2, max_length=64)] | None = None
    """Nova's hint: only providers whose host_ip is in this address's network
    of prefix ``cidr`` (default /24)."""
    cidr: Annotated[str, Field(pattern=r"^/?[0-9]{1,3}$")] | None = None
    query: str | None = Field(default=None, max_length=65_536)
    group_id: Identifier | None = None
    group_policy: GroupPolicyName | None = None
    tags: frozenset[Tag] = frozenset()
    require_with_tags: frozenset[Tag] = frozenset()
    require_without_tags: frozenset[Tag] = frozenset()
    prefer_with_tags: frozenset[Tag] = frozenset()
    prefer_without_tags: frozenset[Tag] = frozenset()
    sriov_ports: tuple[SriovPortSpec, ...] = Field(default=(), max_length=16)
    """SR-IOV ports each instance has: a device on each one's physical
    network (PciPassthroughFilter)."""
    identifiers: tuple[IdentifierItem, ...] = Field(default=(), max_length=16)
    """Identifiers each instance also takes from pools (an address, a VNI):
    claimed together with its compute, all or nothing."""
    explain: bool = False
    policy: Identifier | None = None
    """The scheduling policy to place it by: only the one its project may
    use (see consumers/policies.py); by default, whichever that is."""

    @field_validator("build_near_host_ip")
    @classmethod
    def _an_address(cls, near: str | None) -> str | None:
        if near is not None:
            ipaddress.ip_address(near)  # ValueError names the text
        return near

    @field_validator("query")
    @classmethod
    def _a_json_query(cls, query: str | None) -> str | None:
        if query is None:
            return None
        try:
            parsed = json.loads(query)
        except json.JSONDecodeError as error:
            raise ValueError(f"not JSON: {error}") from None
        if not isinstance(parsed, list) or not parsed or not isinstance(parsed[0], str):
            raise ValueError('a JsonFilter query is a list such as ["=", "$free_ram_mb", 1024]')
        return query

    @model_validator(mode="after")
    def _hints_name_something(self) -> Self:
        if self.cidr is not None and self.build_near_host_ip is None:
            raise ValueError("cidr without build_near_host_ip says nothing")
        if self.cidr is not None:
            prefix = int(self.cidr.lstrip("/"))
            assert self.build_near_host_ip is not None
            most = ipaddress.ip_address(self.build_near_host_ip).max_prefixlen
            if prefix > most:
                raise ValueError(f"cidr /{prefix} is longer than an address ({most} bits)")
        if self.source_provider is not None and self.reason == "new":
            raise ValueError("source_provider is for a move: reason evacuation or relocation")
        if self.group_policy is not None and self.group_id is None:
            raise ValueError("group_policy without group_id names no group")
        return self

    @model_validator(mode="after")
    def _numa_and_pci_mean_something(self) -> Self:
        """Nova's NUMA, pinning, page-size and PCI asks, parsed once here
        so a request that cannot mean anything is refused at the edge."""
        vcpus = self.resources.get("VCPU", 0) + self.resources.get("PCPU", 0)
        memory = self.resources.get("MEMORY_MB", 0)
        guest_topology(self.extra_specs, self.image_properties, vcpus, memory)
        pci_asks(self.extra_specs)
        pci_numa_policy(self.extra_specs, self.image_properties)
        return self

    def guest_asks(self) -> GuestAsks:
        """What it asks of NUMA cells and PCI devices, as a claim with a fit
        keeps it (for a move of the instance to be fitted again)."""
        flavor, image = topology_keys(self.extra_specs, self.image_properties)
        return GuestAsks(extra_specs=flavor, image_properties=image, sriov_ports=self.sriov_ports)


BatchMode = Literal["all_or_nothing", "at_least", "queue"]

DEFAULT_PREPARE_TIMEOUT_MS = 30_000
DEFAULT_QUEUE_TIMEOUT_MS = 10 * 60 * 1000


class BatchRequest(Model):
    """Several instance specs placed together (a CI job's 50 VMs).

    - ``all_or_nothing``: every instance is reserved or none is.
    - ``at_least``: as many as fit between ``min_count`` and ``max_count``
      (Nova's multi-create), all or nothing below ``min_count``.
    - ``queue``: all or nothing, but a batch that does not fit now waits, in
      order of ``priority`` (higher first) then arrival, until capacity frees
      or ``queue_timeout_ms`` passes.
    """

    type: Literal["batch"] = "batch"
    batch_id: Identifier
    ts_ms: int = Field(ge=0)
    members: tuple[PlacementRequest, ...] = Field(min_length=1, max_length=1000)
    mode: BatchMode = "all_or_nothing"
    min_count: int | None = Field(default=None, ge=1)
    max_count: int | None = Field(default=None, ge=1)
    priority: int = 0
    prepare_timeout_ms: int = Field(default=DEFAULT_PREPARE_TIMEOUT_MS, ge=100, le=MAX_LEASE_MS)
    queue_timeout_ms: int = Field(default=DEFAULT_QUEUE_TIMEOUT_MS, ge=0, le=MAX_LEASE_MS)
    explain: bool = False

    @property
    def instances(self) -> int:
        return sum(m.num_instances for m in self.members)

    @model_validator(mode="after")
    def _counts(self) -> Self:
        if self.mode != "at_least":
            if self.min_count is not None or self.max_count is not None:
                raise ValueError("min_count and max_count apply to mode at_least only")
            return self
        low = self.min_count or 1
        high = self.max_count or self.instances
        if not low <= high <= self.instances:
            raise ValueError(
                f"need 1 <= min_count ({low}) <= max_count ({high}) <= instances ({self.instances})"
            )
        return self

    @property
    def bounds(self) -> tuple[int, int]:
        """(fewest, most) instances that make a success."""
        if self.mode != "at_least":
            return self.instances, self.instances
        return self.min_count or 1, self.max_count or self.instances


def request_from_json(text: str | bytes) -> PlacementRequest | BatchRequest:
    """A placement request or, with ``"type": "batch"``, a batch, from JSON
    (:class:`ValueError` when it is not JSON, pydantic's ValidationError,
    also a ValueError, when it is not a valid request)."""
    data = json.loads(text)
    batch = isinstance(data, dict) and data.get("type") == "batch"
    return (BatchRequest if batch else PlacementRequest).model_validate_json(text)


def request_key(request: PlacementRequest | BatchRequest) -> str:
    """Its id: the batch's for a batch. Its key on the requests topic, and
    the ``request_id`` of its answer."""
    return request.batch_id if isinstance(request, BatchRequest) else request.request_id
