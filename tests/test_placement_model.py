"""Placement's model as the writer decides it (projections/placement),
record by record through ``apply``: scenario tables of what is applied,
what is refused with which code, and what the generations become."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from projections.projector import apply
from projections.state import PartitionState
from schemas.codec import validate_event
from schemas.events import PLACEMENT_KEY
from schemas.outcomes import Code, Kind

CN1 = "11111111-1111-1111-1111-111111111111"
CN2 = "22222222-2222-2222-2222-222222222222"
CHILD = "33333333-3333-3333-3333-333333333333"
VM1 = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
VM2 = "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"

_ids = itertools.count()


def write(state: PartitionState, **fields: Any) -> tuple[str, Code | None]:
    """Apply one Placement event; its decision and the refusal's code."""
    n = next(_ids)
    event = validate_event(
        {**fields, "event_id": f"e{n}", "ts_ms": 1000 + n, "partition_key": PLACEMENT_KEY}
    )
    [outcome] = apply(state, n, event)
    return outcome.kind, outcome.reasons[0].code if outcome.reasons else None


def provider(state: PartitionState, uuid: str, vcpus: int, parent: str | None = None) -> None:
    name = f"rp-{uuid[:4]}"
    kind, _ = write(state, type="placement_provider_saved", uuid=uuid, name=name, parent=parent)
    assert kind == Kind.APPLIED
    inventories = {"VCPU": {"total": vcpus}}
    kind, _ = write(
        state, type="placement_inventories_set", uuid=uuid, generation=0, inventories=inventories
    )
    assert kind == Kind.APPLIED


def allocate(state: PartitionState, *specs: tuple[str, int | None, dict[str, int]]) -> Any:
    consumers = [
        {
            "consumer": consumer,
            "project_id": "p",
            "user_id": "u",
            "generation": generation,
            "allocations": {rp: {"VCPU": n} for rp, n in amounts.items()},
        }
        for consumer, generation, amounts in specs
    ]
    return write(state, type="placement_allocations_set", consumers=consumers)


def test_generations_move_as_placements_do_and_a_stale_write_is_refused() -> None:
    state = PartitionState(partition=0, partitions=1)
    provider(state, CN1, vcpus=8)
    placement = state.placement
    assert placement is not None
    assert placement.providers[CN1].generation == 1
    assert allocate(state, (VM1, None, {CN1: 2})) == (Kind.APPLIED, None)
    assert placement.providers[CN1].generation == 2
    assert placement.consumers[VM1].generation == 1
    # the consumer exists: null is stale; so is the provider's old generation
    assert allocate(state, (VM1, None, {CN1: 3})) == (
        Kind.REJECTED,
        Code.PLACEMENT_CONCURRENT_UPDATE,
    )
    stale = write(state, type="placement_traits_set", uuid=CN1, generation=1, traits=[])
    assert stale == (Kind.REJECTED, Code.PLACEMENT_CONCURRENT_UPDATE)
    assert allocate(state, (VM1, 1, {CN1: 3})) == (Kind.APPLIED, None)
    assert state.providers[CN1].consumed == [3]
    # a rename changes no generation
    renamed = write(state, type="placement_provider_saved", uuid=CN1, name="big", create=False)
    assert renamed == (Kind.APPLIED, None)
    assert placement.providers[CN1].generation == 3


def test_several_consumers_are_written_all_or_none() -> None:
    state = PartitionState(partition=0, partitions=1)
    provider(state, CN1, vcpus=4)
    provider(state, CN2, vcpus=4)
    # the second consumer does not fit: neither is written
    refused = allocate(state, (VM1, None, {CN1: 2}), (VM2, None, {CN2: 5}))
    assert refused == (Kind.REJECTED, Code.PLACEMENT_CAPACITY)
    assert state.placement is not None and not state.placement.consumers
    assert state.providers[CN1].consumed == [0]
    # a move: the source consumer's allocation goes as the destination's comes
    assert allocate(state, (VM1, None, {CN1: 4})) == (Kind.APPLIED, None)
    moved = allocate(state, (VM1, 1, {}), (VM2, None, {CN1: 4}))
    assert moved == (Kind.APPLIED, None)
    assert state.providers[CN1].consumed == [4]
    assert VM1 not in state.placement.consumers


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"type": "placement_provider_deleted", "uuid": CN1}, Code.PLACEMENT_IN_USE),
        ({"type": "placement_provider_deleted", "uuid": VM1}, Code.PLACEMENT_NOT_FOUND),
        (
            {
                "type": "placement_provider_saved",
                "uuid": CN1,
                "name": "x",
                "parent": CHILD,
                "create": False,
            },
            Code.PLACEMENT_INVALID,
        ),
        (
            {"type": "placement_provider_saved", "uuid": CN2, "name": "rp-3333"},
            Code.PLACEMENT_DUPLICATE,
        ),
        (
            {
                "type": "placement_inventories_set",
                "uuid": CN1,
                "generation": 1,
                "inventories": {"CUSTOM_NOPE": {"total": 1}},
            },
            Code.PLACEMENT_INVALID,
        ),
        (
            {
                "type": "placement_name_defined",
                "kind": "trait",
                "name": "HW_CPU_X86_AVX",
                "defined": False,
            },
            Code.PLACEMENT_INVALID,
        ),
    ],
)
def test_refusals_change_nothing(fields: dict[str, Any], code: Code) -> None:
    """A parent with a child, a loop in the tree, a name taken, an unknown
    class, a standard trait deleted: refused, and the state stays."""
    state = PartitionState(partition=0, partitions=1)
    provider(state, CN1, vcpus=4)
    provider(state, CHILD, vcpus=2, parent=CN1)
    assert state.placement is not None
    before = {u: (p.name, p.generation, p.parent) for u, p in state.placement.providers.items()}
    assert write(state, **fields) == (Kind.REJECTED, code)
    after = {u: (p.name, p.generation, p.parent) for u, p in state.placement.providers.items()}
    assert after == before


def test_a_renamed_class_keeps_its_inventory_and_usage() -> None:
    state = PartitionState(partition=0, partitions=1)
    assert (
        write(state, type="placement_name_defined", kind="resource_class", name="CUSTOM_A")[0]
        == Kind.APPLIED
    )
    write(state, type="placement_provider_saved", uuid=CN1, name="cn1")
    inventories = {"CUSTOM_A": {"total": 5}, "VCPU": {"total": 2}}
    write(state, type="placement_inventories_set", uuid=CN1, generation=0, inventories=inventories)
    consumer = {
        "consumer": VM1,
        "project_id": "p",
        "user_id": "u",
        "allocations": {CN1: {"CUSTOM_A": 3}},
    }
    assert write(state, type="placement_allocations_set", consumers=[consumer])[0] == Kind.APPLIED
    renamed = write(
        state,
        type="placement_name_defined",
        kind="resource_class",
        name="CUSTOM_A",
        renamed_to="CUSTOM_B",
    )
    assert renamed == (Kind.APPLIED, None)
    berth = state.providers[CN1]
    assert berth.free("CUSTOM_B") == 2
    assert berth.free("CUSTOM_A") == 0
    assert state.placement is not None
    assert state.placement.consumers[VM1].allocations == {CN1: {"CUSTOM_B": 3}}


def test_a_reshape_moves_inventory_and_allocations_or_changes_nothing() -> None:
    state = PartitionState(partition=0, partitions=1)
    provider(state, CN1, vcpus=8)
    write(state, type="placement_provider_saved", uuid=CHILD, name="numa0", parent=CN1)
    assert allocate(state, (VM1, None, {CN1: 6})) == (Kind.APPLIED, None)
    assert state.placement is not None
    gen = state.placement.providers[CN1].generation

    def reshape(child_vcpus: int) -> tuple[str, Code | None]:
        return write(
            state,
            type="placement_reshaped",
            inventories={
                CN1: {"generation": gen, "inventories": {}},
                CHILD: {"generation": 0, "inventories": {"VCPU": {"total": child_vcpus}}},
            },
            consumers=[
                {
                    "consumer": VM1,
                    "project_id": "p",
                    "user_id": "u",
                    "generation": 1,
                    "allocations": {CHILD: {"VCPU": 6}},
                }
            ],
        )

    # the child is too small for the allocation: refused, and nothing moved
    assert reshape(4) == (Kind.REJECTED, Code.PLACEMENT_CAPACITY)
    assert state.providers[CN1].consumed == [6]
    assert state.placement.providers[CN1].generation == gen
    assert state.placement.consumers[VM1].allocations == {CN1: {"VCPU": 6}}
    assert reshape(8) == (Kind.APPLIED, None)
    assert state.providers[CN1].layout.classes == ()
    assert state.providers[CHILD].consumed == [6]
    assert state.placement.consumers[VM1].generation == 2


def test_aggregates_move_the_generation_only_when_written_against_one() -> None:
    """Before 1.19 a PUT of aggregates names no generation and moves none."""
    state = PartitionState(partition=0, partitions=1)
    provider(state, CN1, vcpus=1)
    assert state.placement is not None
    agg = "44444444-4444-4444-4444-444444444444"
    assert (
        write(state, type="placement_aggregates_set", uuid=CN1, aggregates=[agg])[0] == Kind.APPLIED
    )
    assert state.placement.providers[CN1].generation == 1
    assert write(state, type="placement_aggregates_set", uuid=CN1, generation=1, aggregates=[]) == (
        Kind.APPLIED,
        None,
    )
    assert state.placement.providers[CN1].generation == 2
