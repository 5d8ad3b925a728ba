"""Outcomes: what the projector decided about each record.

Outcomes are produced on the hot path, so they are named tuples, not pydantic
models; ``to_json``/``from_json`` give their wire form on the outcomes
topic and in the view.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import IntEnum
from functools import partial
from typing import Any, NamedTuple

_compact = json.JSONEncoder(separators=(",", ":")).encode
_string = json.encoder.encode_basestring


class Kind:
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    CONSUMED = "consumed"
    RELEASED = "released"
    EXPIRED = "expired"
    RENEWED = "renewed"
    NOOP = "noop"
    APPLIED = "applied"
    PREPARED = "prepared"
    """Held pending a transaction's decision, until its deadline at the latest."""
    COMMITTED = "committed"
    """A prepared hold the coordinator committed: now an ordinary hold."""
    ABORTED = "aborted"
    """A prepared hold given back: the coordinator aborted, or an older
    transaction needed the capacity (wound-wait)."""


class Code(IntEnum):
    """Why a record did not take effect, in order of precedence: the ladder
    checks them top to bottom and reports, per resource class, the first that
    fails."""

    RESERVATION_ID_CONFLICT = 1
    PROVIDER_NOT_FOUND = 10
    PROVIDER_NOT_ENABLED = 11
    PROVIDER_IN_USE = 12
    PROVIDER_WRONG_PARTITION = 13
    RESOURCE_CLASS_NOT_PROVIDED = 20
    BELOW_MIN_UNIT = 21
    ABOVE_MAX_UNIT = 22
    NOT_A_STEP_MULTIPLE = 23
    INSUFFICIENT_CAPACITY = 24
    INVENTORY_IN_USE = 25
    AGGREGATE_NOT_FOUND = 26
    """No definition of the aggregate has reached this partition."""
    TOPOLOGY_IN_USE = 27
    """A description would remove or change a PCI device, a pinned CPU or
    huge pages that reservations hold."""
    NUMA_CELL_NOT_DESCRIBED = 28
    """A description would leave a PCI device on a NUMA cell the provider
    does not have."""
    TOPOLOGY_TAKEN = 29
    """A claim's fit names a pinned CPU, huge pages or a PCI device another
    reservation holds (another scheduler won it: the scheduler retries)."""
    TOPOLOGY_NOT_PROVIDED = 37
    """A claim's fit names a NUMA cell, a dedicated CPU, a page size or a PCI
    device the provider does not describe."""
    ANTI_AFFINITY_CONFLICT = 30
    # server groups (``server_group_created``): the group's partition decides
    GROUP_NOT_FOUND = 33
    """No server group of that id lives in this partition."""
    AFFINITY_CONFLICT = 34
    """A hard affinity group's members are on another provider."""
    GROUP_EXISTS = 35
    """A server group of that id exists with another policy, rules or owner."""
    GROUP_OF_ANOTHER_PROJECT = 36
    """The server group belongs to another project than the member's."""
    REQUIRED_TAG_ABSENT = 31
    FORBIDDEN_TAG_PRESENT = 32
    POOL_NOT_FOUND = 40
    POOL_WRONG_PARTITION = 41
    IDENTIFIER_NOT_IN_POOL = 42
    IDENTIFIER_TAKEN = 43
    POOL_EXHAUSTED = 44
    POOL_IN_USE = 45
    BATCH_MEMBER_REJECTED = 46
    TRANSACTION_DEADLINE_PASSED = 47
    WOUNDED = 48
    PROJECT_MISMATCH = 49
    """An event published by a project (``acting_project``) that names
    another project's reservation or claim, or is not a project's to publish."""
    # no-op reasons: the record was valid but changed nothing
    DUPLICATE = 50
    UNKNOWN_RESERVATION = 51
    ALREADY_CONSUMED = 52
    ALREADY_FINAL = 53
    NOT_HELD = 54
    ALREADY_REGISTERED = 55
    NO_PENDING_CLAIMS = 56
    OLDER_REPORT = 57
    """A metrics report older than the one the provider's metrics are from."""
    ALREADY_MEMBER = 58
    NOT_A_MEMBER = 59
    # OpenStack Placement's refusals (issue 32); the detail is Placement's message
    PLACEMENT_NOT_FOUND = 60
    """A provider, consumer, resource class or trait the write names does not exist."""
    PLACEMENT_CONCURRENT_UPDATE = 61
    """The provider's or consumer's generation the write was made against is stale."""
    PLACEMENT_DUPLICATE = 62
    """The name or uuid is taken."""
    PLACEMENT_IN_USE = 63
    """Inventory, a resource class, a trait or a provider still in use."""
    PLACEMENT_INVALID = 64
    """A write Placement refuses as a bad request (a parent in the subtree, a
    standard name deleted, amounts outside the unit rules)."""
    PLACEMENT_CAPACITY = 65
    """Allocations beyond a provider's capacity."""
    ALREADY_DEFINED = 66
    """The server group exists already, with the same policy and rules."""


class Reason(NamedTuple):
    code: Code
    provider_id: str | None = None
    resource_class: str | None = None
    requested: int | None = None
    available: int | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"code": self.code.name}
        if self.provider_id is not None:
            data["provider_id"] = self.provider_id
        if self.resource_class is not None:
            data["resource_class"] = self.resource_class
        if self.requested is not None:
            data["requested"] = self.requested
        if self.available is not None:
            data["available"] = self.available
        if self.detail:
            data["detail"] = self.detail
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reason:
        return cls(
            code=Code[data["code"]],
            provider_id=data.get("provider_id"),
            resource_class=data.get("resource_class"),
            requested=data.get("requested"),
            available=data.get("available"),
            detail=data.get("detail", ""),
        )

    def __str__(self) -> str:
        where = f"{self.provider_id}: " if self.provider_id else ""
        what = f"{self.resource_class} " if self.resource_class else ""
        numbers = ""
        if self.requested is not None:
            numbers = f" wanted {self.requested}"
            if self.available is not None:
                numbers += f", free {self.available}"
        detail = f" ({self.detail})" if self.detail else ""
        return f"{where}{what}{self.code.name}{numbers}{detail}"


NO_REASONS: tuple[Reason, ...] = ()


class Outcome(NamedTuple):
    """One decision. ``(partition, offset, seq)`` identifies it: a record may
    produce several (expiries released by its clock, then its own decision)."""

    partition: int
    offset: int
    seq: int
    kind: str
    event_id: str
    subject: str
    clock_ms: int
    reasons: tuple[Reason, ...] = NO_REASONS
    expires_at_ms: int | None = None
    identifiers: tuple[tuple[str, str], ...] = ()
    """(pool id, identifier) pairs a reservation was given, or gave back."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "partition": self.partition,
            "offset": self.offset,
            "seq": self.seq,
            "kind": self.kind,
            "event_id": self.event_id,
            "subject": self.subject,
            "clock_ms": self.clock_ms,
        }
        if self.reasons:
            data["reasons"] = [reason.to_dict() for reason in self.reasons]
        if self.expires_at_ms is not None:
            data["expires_at_ms"] = self.expires_at_ms
        if self.identifiers:
            data["identifiers"] = [list(pair) for pair in self.identifiers]
        return data

    def to_json(self) -> bytes:
        if self.reasons or self.identifiers:
            return _compact(self.to_dict()).encode()
        # the common case by hand: json.dumps costs several times more per outcome
        expires = "" if self.expires_at_ms is None else f',"expires_at_ms":{self.expires_at_ms}'
        return (
            f'{{"partition":{self.partition},"offset":{self.offset},"seq":{self.seq},'
            f'"kind":"{self.kind}","event_id":{_string(self.event_id)},'
            f'"subject":{_string(self.subject)},"clock_ms":{self.clock_ms}{expires}}}'
        ).encode()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        # absent on the topic, NULL in the view's row: none either way
        reasons, identifiers = data.get("reasons"), data.get("identifiers")
        fields = (
            data["partition"],
            data["offset"],
            data["seq"],
            data["kind"],
            data["event_id"],
            data["subject"],
            data["clock_ms"],
            tuple([Reason.from_dict(r) for r in reasons]) if reasons else NO_REASONS,
            data.get("expires_at_ms"),
            tuple([(pool, value) for pool, value in identifiers]) if identifiers else (),
        )
        # a scheduler reads one back for every claim it proposed: built by
        # position, without the keywords' Python-level __new__
        return new_outcome(fields) if cls is Outcome else cls(*fields)

    @classmethod
    def from_json(cls, raw: bytes) -> Outcome:
        return cls.from_dict(json.loads(raw))


new_outcome: Callable[[tuple[Any, ...]], Outcome] = partial(tuple.__new__, Outcome)
"""Builds an outcome from all ten fields in order, without the Python-level
``__new__`` a NamedTuple has (half the cost of an outcome on the hot path)."""
