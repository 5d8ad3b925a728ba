"""Event models: one envelope, a discriminated union of event types.

Events are frozen and strictly validated. Unknown event types and schema
versions newer than this build understands are refused, never guessed at.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)

from schemas.guest_topology import guest_topology, pci_asks, pci_numa_policy, topology_keys
from schemas.pool_space import PoolSpace
from schemas.topology import (
    MAX_CELLS,
    MAX_DEVICES,
    NumaCell,
    PciDevice,
    TopologyFit,
    cells_missing,
    check_cells,
    check_devices,
)

MAX_AMOUNT = 2**31 - 1
"""Largest amount or inventory total (Placement's MAX_INT)."""

MAX_LEASE_MS = 7 * 24 * 3600 * 1000
DEFAULT_LEASE_MS = 5 * 60 * 1000

Identifier = Annotated[str, Field(min_length=1, max_length=255)]
ResourceClass = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Z0-9_]+$")]
Tag = Annotated[str, Field(min_length=1, max_length=255)]
Amount = Annotated[int, Field(ge=1, le=MAX_AMOUNT)]
Count = Annotated[int, Field(ge=0, le=MAX_AMOUNT)]

ProviderStateName = Literal["enabled", "disabled", "offline", "evacuating"]


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class EventBase(Model):
    """The envelope every event carries."""

    event_id: Identifier
    schema_version: Literal[1] = 1
    ts_ms: int = Field(ge=0, description="producer timestamp, ms since the epoch")
    partition_key: Identifier
    correlation_id: Identifier | None = None
    causation_id: Identifier | None = None
    idempotency_key: Identifier | None = None
    acting_project: Identifier | None = Field(
        default=None,
        description="the project that published the event, when one did: its writer "
        "lets it claim, consume, renew and release only that project's reservations",
    )


class ProviderEvent(EventBase):
    provider_id: Identifier

    @model_validator(mode="after")
    def _keyed_by_provider(self) -> Self:
        if self.partition_key != self.provider_id:
            raise ValueError("partition_key must equal provider_id")
        return self


class ProviderRegistered(ProviderEvent):
    type: Literal["provider_registered"] = "provider_registered"
    name: Annotated[str, Field(min_length=1, max_length=255)]


class ProviderRetired(ProviderEvent):
    type: Literal["provider_retired"] = "provider_retired"


class Inventory(Model):
    """One resource class of a provider, with OpenStack Placement's semantics."""

    total: Count
    reserved: Count = 0
    min_unit: Amount = 1
    max_unit: Amount = MAX_AMOUNT
    step_size: Amount = 1
    allocation_ratio: float = Field(default=1.0, gt=0.0, le=1_000_000.0)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.reserved > self.total:
            raise ValueError(f"reserved ({self.reserved}) exceeds total ({self.total})")
        if self.min_unit > self.max_unit:
            raise ValueError(f"min_unit ({self.min_unit}) exceeds max_unit ({self.max_unit})")
        return self

    @property
    def capacity(self) -> int:
        """What allocations may add up to: (total - reserved) x allocation_ratio."""
        return int((self.total - self.reserved) * self.allocation_ratio)


class InventorySet(ProviderEvent):
    """Replaces the provider's whole inventory (like Placement's PUT)."""

    type: Literal["inventory_set"] = "inventory_set"
    inventories: dict[ResourceClass, Inventory] = Field(max_length=64)


class ProviderStateSet(ProviderEvent):
    type: Literal["provider_state_set"] = "provider_state_set"
    state: ProviderStateName


class TraitsSet(ProviderEvent):
    type: Literal["traits_set"] = "traits_set"
    traits: frozenset[Annotated[str, Field(min_length=1, max_length=255)]] = Field(max_length=1024)


class AggregatesSet(ProviderEvent):
    type: Literal["aggregates_set"] = "aggregates_set"
    aggregates: frozenset[Identifier] = Field(max_length=1024)


MetadataKey = Annotated[str, Field(min_length=1, max_length=255)]
MetadataValue = Annotated[str, Field(max_length=255)]
MetricValue = Annotated[float, Field(allow_inf_nan=False)]

MAX_CAPABILITIES_BYTES = 16_384
"""The most a provider's capabilities may take, as compact JSON."""

_CAPABILITY_TYPES: dict[str, tuple[type[Any], ...]] = {
    "hypervisor_type": (str,),
    "hypervisor_hostname": (str,),
    "architecture": (str,),
    "hypervisor_version": (int,),
    "cpu_info": (dict,),
    "supported_instances": (list,),
}
"""The capabilities Berth's filters and weighers read, and their JSON types."""

DescribedField = Literal[
    "availability_zone", "host", "host_ip", "capabilities", "metadata", "numa_cells", "pci_devices"
]
DESCRIBED_FIELDS: tuple[DescribedField, ...] = (
    "availability_zone",
    "host",
    "host_ip",
    "capabilities",
    "metadata",
    "numa_cells",
    "pci_devices",
)


def _check_capabilities(capabilities: dict[str, Any]) -> None:
    """ValueError naming the capability whose type the filters cannot read."""
    for key, types in _CAPABILITY_TYPES.items():
        value = capabilities.get(key)
        if value is None:
            continue
        if not isinstance(value, types) or isinstance(value, bool):
            wanted = " or ".join(t.__name__ for t in types)
            raise ValueError(f"capabilities.{key} must be {wanted}, not {value!r}")
    version = capabilities.get("hypervisor_version")
    if isinstance(version, int) and version < 0:
        raise ValueError("capabilities.hypervisor_version must not be negative")
    for entry in capabilities.get("supported_instances") or ():
        if not (
            isinstance(entry, list) and len(entry) == 3 and all(isinstance(e, str) for e in entry)
        ):
            raise ValueError(
                "capabilities.supported_instances: each entry is [architecture, "
                f"hypervisor_type, vm_mode], not {entry!r}"
            )
    size = len(json.dumps(capabilities, separators=(",", ":")))
    if size > MAX_CAPABILITIES_BYTES:
        raise ValueError(
            f"capabilities take {size} bytes as JSON, at most {MAX_CAPABILITIES_BYTES}"
        )


class ProviderDescribed(ProviderEvent):
    """What the scheduler knows of a provider beyond its inventory: its
    availability zone, host name and address, hypervisor facts, free-form
    metadata, its NUMA cells and its PCI devices (``schemas/topology.py``).
    Only the fields given change (``capabilities``, ``metadata``,
    ``numa_cells`` and ``pci_devices`` each as a whole); ``unset`` names
    those to clear."""

    type: Literal["provider_described"] = "provider_described"
    availability_zone: Identifier | None = None
    host: Identifier | None = None
    host_ip: Annotated[str, Field(min_length=2, max_length=64)] | None = None
    capabilities: dict[MetadataKey, JsonValue] | None = Field(default=None, max_length=64)
    metadata: dict[MetadataKey, MetadataValue] | None = Field(default=None, max_length=128)
    numa_cells: tuple[NumaCell, ...] | None = Field(default=None, max_length=MAX_CELLS)
    pci_devices: tuple[PciDevice, ...] | None = Field(default=None, max_length=MAX_DEVICES)
    unset: frozenset[DescribedField] = frozenset()

    @field_validator("host_ip")
    @classmethod
    def _an_address(cls, host_ip: str | None) -> str | None:
        if host_ip is not None:
            ipaddress.ip_address(host_ip)  # ValueError names the text
        return host_ip

    @field_validator("capabilities")
    @classmethod
    def _readable(cls, capabilities: dict[str, Any] | None) -> dict[str, Any] | None:
        if capabilities is not None:
            _check_capabilities(capabilities)
        return capabilities

    @field_validator("numa_cells")
    @classmethod
    def _cells_apart(cls, cells: tuple[NumaCell, ...] | None) -> tuple[NumaCell, ...] | None:
        if cells is not None:
            check_cells(cells)
            return tuple(sorted(cells, key=lambda cell: cell.cell_id))
        return cells

    @field_validator("pci_devices")
    @classmethod
    def _devices_apart(cls, devices: tuple[PciDevice, ...] | None) -> tuple[PciDevice, ...] | None:
        if devices is not None:
            check_devices(devices)
            return tuple(sorted(devices, key=lambda device: device.address))
        return devices

    @model_validator(mode="after")
    def _says_something(self) -> Self:
        given = {name for name in DESCRIBED_FIELDS if getattr(self, name) is not None}
        both = given & self.unset
        if both:
            raise ValueError(f"{', '.join(sorted(both))}: both given and unset")
        if not given and not self.unset:
            raise ValueError("a description sets or unsets at least one field")
        # given together, cells and devices agree here; given apart, the
        # writer checks them against what the provider holds
        missing = cells_missing(self.numa_cells or (), self.pci_devices or ())
        if missing:
            raise ValueError("; ".join(missing))
        return self


class MetricsReported(ProviderEvent):
    """A provider's report of its metrics, as of the event's ``ts_ms``: the
    report replaces the metrics held (an empty mapping clears them; none
    given keeps them), and sets the I/O operations in flight and the recent
    build failures if it gives them. A report older than the one held
    changes nothing."""

    type: Literal["metrics_reported"] = "metrics_reported"
    metrics: dict[MetadataKey, MetricValue] | None = Field(default=None, max_length=256)
    num_io_ops: Count | None = None
    build_failures: Count | None = None

    @model_validator(mode="after")
    def _reports_something(self) -> Self:
        if self.metrics is None and self.num_io_ops is None and self.build_failures is None:
            raise ValueError("a report gives metrics, num_io_ops or build_failures")
        return self


class AggregateDefined(EventBase):
    """An aggregate's metadata, as a whole (Nova's host aggregate:
    ``availability_zone``, ``filter_tenant_id``, ``instance_type``,
    ``*_weight_multiplier``, ``*_allocation_ratio``, ``trait:NAME=required``
    and anything AggregateInstanceExtraSpecs matches). An aggregate spans
    partitions: the edge appends a copy to every partition, so each writer
    applies its allocation ratios to its own members in its log order."""

    type: Literal["aggregate_defined"] = "aggregate_defined"
    aggregate_id: Identifier
    metadata: dict[MetadataKey, MetadataValue] = Field(default_factory=dict, max_length=128)


class AggregateMemberEvent(ProviderEvent):
    aggregate_id: Identifier


class AggregateMemberAdded(AggregateMemberEvent):
    """The provider joins an aggregate its partition knows."""

    type: Literal["aggregate_member_added"] = "aggregate_member_added"


class AggregateMemberRemoved(AggregateMemberEvent):
    type: Literal["aggregate_member_removed"] = "aggregate_member_removed"


# --- server groups (issue 22 part 3) ---------------------------------------

GroupPolicyName = Literal["affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"]
HARD_GROUP_POLICIES: frozenset[str] = frozenset({"affinity", "anti-affinity"})
MAX_SERVERS_PER_HOST = 1000


class ServerGroupEvent(EventBase):
    """An event of one server group, kept in the partition of its id."""

    group_id: Identifier

    @model_validator(mode="after")
    def _keyed_by_group(self) -> Self:
        if self.partition_key != self.group_id:
            raise ValueError("partition_key must equal group_id")
        return self


class ServerGroupCreated(ServerGroupEvent):
    """A server group (Nova's) and its policy. Its members are the
    reservations whose claims name it (``ClaimSpec.server_group``), decided
    by this group's partition: a hard policy's rule (affinity: every member
    on one provider; anti-affinity: at most ``max_server_per_host`` on one)
    is checked there, in log order, so no race between schedulers breaks
    it. Creating it again with the same policy, rules and owner is a no-op.

    As in Nova, a group belongs to a project (and the user who made it):
    only that project's claims may join it, and only that project, or the
    system, may delete it. A group of no project (the system's) is shared:
    any project's claims may join it."""

    type: Literal["server_group_created"] = "server_group_created"
    policy: GroupPolicyName
    max_server_per_host: int | None = Field(default=None, ge=1, le=MAX_SERVERS_PER_HOST)
    """Anti-affinity's only rule (Nova's, default 1)."""
    project_id: Identifier | None = None
    """The project whose instances may join it (None: any project's)."""
    user_id: Identifier | None = None
    """Who made it, as Nova records it (nothing is decided by it)."""

    @model_validator(mode="after")
    def _rules_of_its_policy(self) -> Self:
        if self.max_server_per_host is not None and self.policy != "anti-affinity":
            raise ValueError("max_server_per_host is a rule of the anti-affinity policy only")
        if self.user_id is not None and self.project_id is None:
            raise ValueError("user_id names a member of the group's project: give project_id")
        return self


class ServerGroupDeleted(ServerGroupEvent):
    """The group goes; its memberships held here are released with it (the
    instances' own reservations stay)."""

    type: Literal["server_group_deleted"] = "server_group_deleted"


# --- end of server groups ----------------------------------------------------


PciNumaPolicy = Literal["required", "legacy", "preferred", "socket"]


class SriovPortSpec(Model):
    """A Neutron SR-IOV port (Nova's PCI request by physical network): a VF
    (``direct``, ``macvtap``) or a PF (``direct-physical``) on
    ``physical_network``, with the port's own NUMA affinity policy if it
    has one."""

    physical_network: Annotated[str, Field(min_length=1, max_length=255)]
    vnic_type: Literal["direct", "macvtap", "direct-physical"] = "direct"
    numa_affinity_policy: PciNumaPolicy | None = None


class GuestAsks(Model):
    """What an instance's request asked of NUMA cells, CPU pinning, huge
    pages and PCI devices (``schemas.guest_topology``: the flavor's and
    image's NUMA and PCI keys, and its SR-IOV ports), kept with the fit it
    was given, so that a move of the instance is fitted again exactly as
    its placement was."""

    extra_specs: dict[str, str] = Field(default_factory=dict, max_length=64)
    image_properties: dict[str, str] = Field(default_factory=dict, max_length=64)
    sriov_ports: tuple[SriovPortSpec, ...] = Field(default=(), max_length=16)


class ClaimItem(Model):
    provider_id: Identifier
    resources: dict[ResourceClass, Amount] = Field(min_length=1, max_length=64)
    fit: TopologyFit | None = None
    """The NUMA cells, pinned CPUs, huge pages and PCI devices of the
    provider the claim takes, as the scheduler fitted them: held only if
    every one is still free (``projections/fitting.py``)."""
    guest: GuestAsks | None = None
    """What the request asked that gave ``fit`` (with a fit only): what a
    balance move of the instance fits again on its destination."""

    @field_validator("guest")
    @classmethod
    def _with_a_fit(cls, guest: GuestAsks | None, info: ValidationInfo) -> GuestAsks | None:
        """Only with a fit, and meaning what a request's asks would (checked
        as the edge checks a request's: a move fits it again)."""
        if guest is None:
            return None
        if info.data.get("fit") is None:
            raise ValueError("guest says what gave a fit: an item without a fit has none")
        flavor, image = guest.extra_specs, guest.image_properties
        if topology_keys(flavor, image) != (flavor, image):
            raise ValueError("guest keeps only the NUMA and PCI keys of a flavor and an image")
        resources = info.data.get("resources", {})
        vcpus = resources.get("VCPU", 0) + resources.get("PCPU", 0)
        guest_topology(flavor, image, vcpus, resources.get("MEMORY_MB", 0))
        pci_asks(flavor)
        pci_numa_policy(flavor, image)
        return guest


class IdentifierItem(Model):
    """One identifier from a pool: ``value`` names a specific one (an address,
    a VNI), or is omitted for the lowest free identifier."""

    pool_id: Identifier
    value: Identifier | None = None


class ClaimSpec(Model):
    """What one reservation asks for: amounts on providers and identifiers from
    pools, all in one partition, all or nothing.

    ``anti_affinity_group`` and the tag requirements are hard rules the
    partition checks against what is already placed there.
    """

    reservation_id: Identifier
    consumer_id: Identifier
    project_id: Identifier
    items: tuple[ClaimItem, ...] = Field(default=(), max_length=64)
    identifiers: tuple[IdentifierItem, ...] = Field(default=(), max_length=64)
    lease_ms: int = Field(default=DEFAULT_LEASE_MS, ge=1, le=MAX_LEASE_MS)
    anti_affinity_group: Identifier | None = None
    tags: frozenset[Tag] = Field(default=frozenset(), max_length=64)
    require_with_tags: frozenset[Tag] = Field(default=frozenset(), max_length=64)
    require_without_tags: frozenset[Tag] = Field(default=frozenset(), max_length=64)
    server_group: Identifier | None = None
    """A membership of this server group, on provider ``group_host``: decided
    by the group's partition (the claim is keyed there), against its policy."""
    group_host: Identifier | None = None

    @field_validator("items")
    @classmethod
    def _distinct_providers(cls, items: tuple[ClaimItem, ...]) -> tuple[ClaimItem, ...]:
        if len(items) > 1 and len({item.provider_id for item in items}) != len(items):
            raise ValueError("items must name each provider at most once")
        return items

    @field_validator("identifiers")
    @classmethod
    def _distinct_identifiers(
        cls, identifiers: tuple[IdentifierItem, ...]
    ) -> tuple[IdentifierItem, ...]:
        named = [(i.pool_id, i.value) for i in identifiers if i.value is not None]
        if len(set(named)) != len(named):
            raise ValueError("identifiers must name each specific identifier at most once")
        return identifiers

    @model_validator(mode="after")
    def _asks_for_something(self) -> Self:
        if (self.server_group is None) != (self.group_host is None):
            raise ValueError("server_group and group_host go together")
        if not self.items and not self.identifiers and self.server_group is None:
            raise ValueError("a claim needs at least one item, identifier or server group")
        return self


class Claim(EventBase, ClaimSpec):
    """A conditional claim: held only if everything still fits, in log order."""

    type: Literal["claim"] = "claim"


class TransactionRef(Model):
    """The transaction a set of claims belongs to. Its claims are held pending
    until the coordinator's decision, and at most until ``deadline_ms`` on the
    partition clock (presumed abort). ``priority`` orders transactions by age
    (smaller is older): an older transaction's claim may abort a younger one's
    pending holds that stand in its way, so the oldest always progresses."""

    transaction_id: Identifier
    priority: int = Field(ge=0)
    deadline_ms: int = Field(ge=0)


class ClaimSet(EventBase):
    """Several reservations decided in one record of one partition.

    ``atomic`` (the default) holds all of them or none; otherwise each is
    decided on its own, in order. With ``transaction`` the holds are pending
    until a :class:`TransactionDecision` commits or aborts them.
    """

    type: Literal["claim_set"] = "claim_set"
    claims: tuple[ClaimSpec, ...] = Field(min_length=1, max_length=1000)
    atomic: bool = True
    transaction: TransactionRef | None = None

    @field_validator("claims")
    @classmethod
    def _distinct_reservations(cls, claims: tuple[ClaimSpec, ...]) -> tuple[ClaimSpec, ...]:
        if len({c.reservation_id for c in claims}) != len(claims):
            raise ValueError("claims must have distinct reservation ids")
        return claims


class TransactionDecision(EventBase):
    """The coordinator's decision, appended to every partition it involved."""

    type: Literal["transaction_decision"] = "transaction_decision"
    transaction_id: Identifier
    commit: bool


PoolKind = Literal["ipv4", "ipv6", "vni", "vlan", "range", "set"]


class PoolDefined(EventBase):
    """A pool of identifiers, kept in the partition of ``pool_id``.

    ``ipv4``/``ipv6`` take ``cidr`` (the network and, for IPv4, the broadcast
    address are never handed out; add the gateway to ``excluded``); ``vni``
    (1 .. 16,777,215) and ``vlan`` (1 .. 4094) may narrow their range with
    ``first``/``last``; ``range`` needs both; ``set`` takes ``members``.
    Redefining a pool replaces it only while none of it is taken.
    """

    type: Literal["pool_defined"] = "pool_defined"
    pool_id: Identifier
    kind: PoolKind
    cidr: str | None = None
    first: int | None = Field(default=None, ge=0)
    last: int | None = Field(default=None, ge=0)
    members: tuple[Identifier, ...] = Field(default=(), max_length=100_000)
    excluded: frozenset[Identifier] = Field(default=frozenset(), max_length=100_000)

    @model_validator(mode="after")
    def _well_formed(self) -> Self:
        if self.partition_key != self.pool_id:
            raise ValueError("partition_key must equal pool_id")
        PoolSpace.of(self)  # raises ValueError on a bad range, CIDR or member
        return self


class ReleaseConsumer(EventBase):
    """Releases every reservation of a consumer in this partition (deleting an
    instance); the client appends one to each partition."""

    type: Literal["release_consumer"] = "release_consumer"
    consumer_id: Identifier


class ReservationEvent(EventBase):
    reservation_id: Identifier


class Consume(ReservationEvent):
    type: Literal["consume"] = "consume"


class Release(ReservationEvent):
    type: Literal["release"] = "release"


class Renew(ReservationEvent):
    type: Literal["renew"] = "renew"
    lease_ms: int = Field(ge=1, le=MAX_LEASE_MS)


class Tick(EventBase):
    """Advances a quiet partition's clock so its expired holds are released."""

    type: Literal["tick"] = "tick"


# --- OpenStack Placement's model (issue 32) -------------------------------
# Every write of the Placement API is one of these events, decided by the
# writer of the partition that holds Placement's model (PLACEMENT_KEY's:
# one writer decides every provider tree, consumer and name, so a write
# spanning trees needs no transaction). A ``generation`` is the provider's
# or consumer's generation the write was made against: the writer refuses it
# when stale (Placement's 409 placement.concurrent_update).

PLACEMENT_KEY = "placement"
"""The partition key of every Placement event."""

PlacementName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Z0-9_]+$")]
Uuid = Annotated[str, Field(min_length=36, max_length=36)]
PlacementAmounts = dict[PlacementName, Amount]


class PlacementEvent(EventBase):
    @model_validator(mode="after")
    def _keyed_to_placement(self) -> Self:
        if self.partition_key != PLACEMENT_KEY:
            raise ValueError(f"partition_key must be {PLACEMENT_KEY!r}")
        return self


class PlacementProviderSaved(PlacementEvent):
    """Creates a resource provider, or (with ``generation``) renames or
    re-parents one; its ``parent`` must exist and not be in its subtree."""

    type: Literal["placement_provider_saved"] = "placement_provider_saved"
    uuid: Uuid
    name: Annotated[str, Field(min_length=1, max_length=200)]
    parent: Uuid | None = None
    create: bool = True


class PlacementProviderDeleted(PlacementEvent):
    type: Literal["placement_provider_deleted"] = "placement_provider_deleted"
    uuid: Uuid


class PlacementInventoriesSet(PlacementEvent):
    """A provider's inventories as a whole, against its generation."""

    type: Literal["placement_inventories_set"] = "placement_inventories_set"
    uuid: Uuid
    generation: int = Field(ge=0)
    inventories: dict[PlacementName, Inventory] = Field(max_length=256)


class PlacementTraitsSet(PlacementEvent):
    type: Literal["placement_traits_set"] = "placement_traits_set"
    uuid: Uuid
    generation: int = Field(ge=0)
    traits: frozenset[PlacementName] = Field(max_length=1024)


class PlacementAggregatesSet(PlacementEvent):
    """A provider's aggregates as a whole; without ``generation`` (before
    microversion 1.19) whatever the provider's generation is, and it stays
    (as Placement's does)."""

    type: Literal["placement_aggregates_set"] = "placement_aggregates_set"
    uuid: Uuid
    generation: int | None = Field(default=None, ge=0)
    aggregates: tuple[Uuid, ...] = Field(max_length=1024)
    """In the order given: Placement answers them in that order."""

    @field_validator("aggregates")
    @classmethod
    def _distinct(cls, aggregates: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(aggregates)) != len(aggregates):
            raise ValueError("aggregates must be distinct")
        return aggregates


class PlacementNameDefined(PlacementEvent):
    """A custom resource class or trait created (``defined``) or deleted; or
    a custom resource class renamed (``renamed_to``, before 1.7), its
    inventories and allocations with it."""

    type: Literal["placement_name_defined"] = "placement_name_defined"
    kind: Literal["resource_class", "trait"]
    name: PlacementName
    defined: bool = True
    renamed_to: PlacementName | None = None

    @model_validator(mode="after")
    def _renames_a_class(self) -> Self:
        if self.renamed_to is not None and (self.kind != "resource_class" or not self.defined):
            raise ValueError("only a resource class that stays defined is renamed")
        return self


class PlacementConsumerAllocations(Model):
    """One consumer's allocations, replacing all it has (none: deleting them).
    ``generation`` None is a new consumer, or any (before 1.28)."""

    consumer: Uuid
    project_id: Identifier
    user_id: Identifier
    consumer_type: Annotated[str, Field(max_length=255)] | None = None
    generation: int | None = Field(default=None, ge=0)
    check_generation: bool = True
    allocations: dict[Uuid, PlacementAmounts] = Field(max_length=1024)


class PlacementAllocationsSet(PlacementEvent):
    """Allocations of one or more consumers, all of them or none."""

    type: Literal["placement_allocations_set"] = "placement_allocations_set"
    consumers: tuple[PlacementConsumerAllocations, ...] = Field(min_length=1, max_length=1000)
    emptied_touch: bool = True
    """A consumer's allocations emptied by a write move the generations of
    the providers they were on (not when deleted: Placement's DELETE)."""


class PlacementProviderInventories(Model):
    generation: int = Field(ge=0)
    inventories: dict[PlacementName, Inventory] = Field(max_length=256)


class PlacementReshaped(PlacementEvent):
    """Inventories of several providers and allocations of several consumers
    replaced in one step (1.30's reshaper): a tree's resources moved from
    one provider to another with the allocations against them."""

    type: Literal["placement_reshaped"] = "placement_reshaped"
    inventories: dict[Uuid, PlacementProviderInventories] = Field(max_length=1000)
    consumers: tuple[PlacementConsumerAllocations, ...] = Field(max_length=1000)


PLACEMENT_EVENTS = (
    PlacementProviderSaved,
    PlacementProviderDeleted,
    PlacementInventoriesSet,
    PlacementTraitsSet,
    PlacementAggregatesSet,
    PlacementNameDefined,
    PlacementAllocationsSet,
    PlacementReshaped,
)
# --- end of OpenStack Placement's model ------------------------------------


Event = Annotated[
    ProviderRegistered
    | ProviderRetired
    | InventorySet
    | ProviderStateSet
    | TraitsSet
    | AggregatesSet
    | ProviderDescribed
    | MetricsReported
    | AggregateDefined
    | AggregateMemberAdded
    | AggregateMemberRemoved
    | ServerGroupCreated
    | ServerGroupDeleted
    | Claim
    | ClaimSet
    | TransactionDecision
    | PoolDefined
    | ReleaseConsumer
    | Consume
    | Release
    | Renew
    | Tick
    # OpenStack Placement's (issue 32)
    | PlacementProviderSaved
    | PlacementProviderDeleted
    | PlacementInventoriesSet
    | PlacementTraitsSet
    | PlacementAggregatesSet
    | PlacementNameDefined
    | PlacementAllocationsSet
    | PlacementReshaped,
    Field(discriminator="type"),
]

NEWEST_SCHEMA_VERSION = 1
"""Every event type is at version 1; an upgrade of an older version will be an
explicit function here, applied before validation."""
