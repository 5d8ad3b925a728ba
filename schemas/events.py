"""Event models: one envelope, a discriminated union of event types.

Events are frozen and strictly validated. Unknown event types and schema
versions newer than this build understands are refused, never guessed at.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.pool_space import PoolSpace

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


class ClaimItem(Model):
    provider_id: Identifier
    resources: dict[ResourceClass, Amount] = Field(min_length=1, max_length=64)


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
        if not self.items and not self.identifiers:
            raise ValueError("a claim needs at least one item or identifier")
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


Event = Annotated[
    ProviderRegistered
    | ProviderRetired
    | InventorySet
    | ProviderStateSet
    | TraitsSet
    | AggregatesSet
    | Claim
    | ClaimSet
    | TransactionDecision
    | PoolDefined
    | ReleaseConsumer
    | Consume
    | Release
    | Renew
    | Tick,
    Field(discriminator="type"),
]

NEWEST_SCHEMA_VERSION = 1
"""Every event type is at version 1; an upgrade of an older version will be an
explicit function here, applied before validation."""
