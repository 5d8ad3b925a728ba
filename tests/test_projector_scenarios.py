"""Scenario tables for the projector.

Each scenario is a list of steps ``(event, expected)``: the events are applied
in order to a fresh partition (offsets 0, 1, ...), and ``expected`` is what
that record must produce, written with :func:`tests.builders.briefs`
(``kind subject [until T] [CODE@CLASS=requested/available]``, outcomes joined
by ``" | "``; ``""`` means no outcome at all). ``None`` means "don't care"
(setup). Claims made by the builders have a 1000 ms lease unless they say
otherwise, and every event is at ``ts=0`` unless it says otherwise.
"""

from __future__ import annotations

import pytest

from projections.projector import apply
from projections.state import PartitionState
from schemas.events import Event, ProviderStateName
from schemas.outcomes import Code, Kind, Outcome, Reason
from tests.builders import (
    InventorySpec,
    aggregates,
    briefs,
    claim,
    claim_items,
    consume,
    fresh_state,
    inventory,
    provider,
    register,
    release,
    renew,
    retire,
    run,
    set_state,
    tick,
    traits,
)

Step = tuple[Event, str | None]


def given(*events: Event | list[Event]) -> list[Step]:
    """Setup steps whose outcomes are not checked."""
    steps: list[Step] = []
    for item in events:
        if isinstance(item, list):
            steps.extend((event, None) for event in item)
        else:
            steps.append((item, None))
    return steps


def node(pid: str, **classes: InventorySpec) -> list[Step]:
    """A registered provider with an inventory (setup)."""
    return given(provider(pid, classes))


def check_well_formed(
    outcomes: list[Outcome], state: PartitionState, offset: int, event: Event
) -> None:
    """What every record's outcomes must satisfy, whatever they decide."""
    for seq, outcome in enumerate(outcomes):
        assert outcome.seq == seq
        assert outcome.partition == state.partition
        assert outcome.offset == offset
        assert outcome.event_id == event.event_id
        assert outcome.clock_ms == state.clock_ms
    # expiries come first, then at most one decision about the record itself
    kinds = [outcome.kind for outcome in outcomes]
    own = [kind for kind in kinds if kind != Kind.EXPIRED]
    assert kinds[: len(kinds) - len(own)] == [Kind.EXPIRED] * (len(kinds) - len(own))
    assert len(own) <= 1


def play(steps: list[Step], state: PartitionState | None = None) -> PartitionState:
    state = state if state is not None else fresh_state()
    for offset, (event, expected) in enumerate(steps):
        outcomes = apply(state, offset, event)
        check_well_formed(outcomes, state, offset, event)
        if expected is not None:
            got = briefs(outcomes)
            assert got == expected, f"step {offset} ({event.type} {event.event_id})"
    return state


def scenarios(*params: tuple[str, list[Step]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(
        "steps", [pytest.param(steps, id=name) for name, steps in params]
    )


# --- capacity --------------------------------------------------------------


@scenarios(
    (
        "allocation_ratio multiplies capacity",
        [
            *node("n1", VCPU=(4, 2.0)),
            (claim("r1", "n1", VCPU=8), "accepted r1 until 1000"),
            (claim("r2", "n1", VCPU=1), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=1/0"),
        ],
    ),
    (
        "one over the ratio is rejected",
        [
            *node("n1", VCPU=(4, 2.0)),
            (claim("r1", "n1", VCPU=9), "rejected r1 INSUFFICIENT_CAPACITY@VCPU=9/8"),
        ],
    ),
    (
        "reserved is subtracted before the ratio",
        [
            *node("n1", VCPU=(10, 1.5, 2)),
            (claim("r1", "n1", VCPU=13), "rejected r1 INSUFFICIENT_CAPACITY@VCPU=13/12"),
            (claim("r2", "n1", VCPU=12), "accepted r2 until 1000"),
        ],
    ),
    (
        "reserved without a ratio",
        [
            *node("n1", VCPU={"total": 8, "reserved": 2}),
            (claim("r1", "n1", VCPU=6), "accepted r1 until 1000"),
            (claim("r2", "n1", VCPU=1), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=1/0"),
        ],
    ),
    (
        "fractional capacity rounds down",
        [
            *node("n1", VCPU=(3, 0.5)),
            (claim("r1", "n1", VCPU=2), "rejected r1 INSUFFICIENT_CAPACITY@VCPU=2/1"),
            (claim("r2", "n1", VCPU=1), "accepted r2 until 1000"),
        ],
    ),
    (
        "all reserved leaves nothing",
        [
            *node("n1", VCPU={"total": 4, "reserved": 4}),
            (claim("r1", "n1", VCPU=1), "rejected r1 INSUFFICIENT_CAPACITY@VCPU=1/0"),
        ],
    ),
    (
        "zero total",
        [
            *node("n1", VCPU=0),
            (claim("r1", "n1", VCPU=1), "rejected r1 INSUFFICIENT_CAPACITY@VCPU=1/0"),
        ],
    ),
    (
        "held capacity counts",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=3), "accepted r1 until 1000"),
            (claim("r2", "n1", VCPU=2), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=2/1"),
            (claim("r3", "n1", VCPU=1), "accepted r3 until 1000"),
        ],
    ),
    (
        "consumed capacity counts",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=3), "accepted r1 until 1000"),
            (consume("r1"), "consumed r1"),
            (claim("r2", "n1", VCPU=2), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=2/1"),
        ],
    ),
    (
        "classes are independent",
        [
            *node("n1", VCPU=4, MEMORY_MB=1024),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (claim("r2", "n1", MEMORY_MB=1024), "accepted r2 until 1000"),
            (claim("r3", "n1", MEMORY_MB=1), "rejected r3 INSUFFICIENT_CAPACITY@MEMORY_MB=1/0"),
        ],
    ),
    (
        "every failing class is reported, sorted, fitting ones are not",
        [
            *node("n1", VCPU=4, MEMORY_MB=1024, DISK_GB=10),
            (
                claim("r1", "n1", VCPU=5, MEMORY_MB=2048, DISK_GB=10),
                "rejected r1 INSUFFICIENT_CAPACITY@MEMORY_MB=2048/1024"
                " INSUFFICIENT_CAPACITY@VCPU=5/4",
            ),
        ],
    ),
    (
        "each class reports its own first failing check",
        [
            *node(
                "n1",
                VCPU={"total": 8, "min_unit": 2},
                MEMORY_MB={"total": 1024, "step_size": 256},
                DISK_GB=10,
            ),
            (
                claim("r1", "n1", VCPU=1, MEMORY_MB=100, PCI_DEVICE=1, DISK_GB=11),
                "rejected r1 INSUFFICIENT_CAPACITY@DISK_GB=11/10"
                " NOT_A_STEP_MULTIPLE@MEMORY_MB=100/1024"
                " RESOURCE_CLASS_NOT_PROVIDED@PCI_DEVICE=1/0"
                " BELOW_MIN_UNIT@VCPU=1/8",
            ),
        ],
    ),
)
def test_capacity(steps: list[Step]) -> None:
    play(steps)


# --- min_unit / max_unit / step_size ---------------------------------------


@scenarios(
    (
        "below min_unit",
        [
            *node("n1", VCPU={"total": 8, "min_unit": 2}),
            (claim("r1", "n1", VCPU=1), "rejected r1 BELOW_MIN_UNIT@VCPU=1/8"),
            (claim("r2", "n1", VCPU=2), "accepted r2 until 1000"),
        ],
    ),
    (
        "above max_unit",
        [
            *node("n1", VCPU={"total": 8, "max_unit": 4}),
            (claim("r1", "n1", VCPU=5), "rejected r1 ABOVE_MAX_UNIT@VCPU=5/8"),
            (claim("r2", "n1", VCPU=4), "accepted r2 until 1000"),
            (claim("r3", "n1", VCPU=4), "accepted r3 until 1000"),
        ],
    ),
    (
        "not a step multiple",
        [
            *node("n1", MEMORY_MB={"total": 1024, "step_size": 256}),
            (
                claim("r1", "n1", MEMORY_MB=300),
                "rejected r1 NOT_A_STEP_MULTIPLE@MEMORY_MB=300/1024",
            ),
            (claim("r2", "n1", MEMORY_MB=512), "accepted r2 until 1000"),
        ],
    ),
    (
        "min_unit is checked before step_size",
        [
            *node("n1", VCPU={"total": 8, "min_unit": 4, "step_size": 4}),
            (claim("r1", "n1", VCPU=2), "rejected r1 BELOW_MIN_UNIT@VCPU=2/8"),
        ],
    ),
    (
        "max_unit is checked before capacity",
        [
            *node("n1", VCPU={"total": 2, "max_unit": 4}),
            (claim("r1", "n1", VCPU=5), "rejected r1 ABOVE_MAX_UNIT@VCPU=5/2"),
        ],
    ),
    (
        "step_size is checked before capacity",
        [
            *node("n1", VCPU={"total": 2, "step_size": 4}),
            (claim("r1", "n1", VCPU=6), "rejected r1 NOT_A_STEP_MULTIPLE@VCPU=6/2"),
            (claim("r2", "n1", VCPU=4), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=4/2"),
        ],
    ),
    (
        "units are judged on the request, not on what is left",
        [
            *node("n1", VCPU={"total": 8, "min_unit": 2, "step_size": 2}),
            (claim("r1", "n1", VCPU=6), "accepted r1 until 1000"),
            (claim("r2", "n1", VCPU=2), "accepted r2 until 1000"),
        ],
    ),
)
def test_units(steps: list[Step]) -> None:
    play(steps)


# --- providers: state, existence, classes ----------------------------------


@scenarios(
    (
        "disabled",
        [
            *node("n1", VCPU=4),
            (set_state("n1", "disabled"), "applied n1"),
            (claim("r1", "n1", VCPU=1), "rejected r1 PROVIDER_NOT_ENABLED"),
        ],
    ),
    (
        "offline",
        [
            *node("n1", VCPU=4),
            (set_state("n1", "offline"), "applied n1"),
            (claim("r1", "n1", VCPU=1), "rejected r1 PROVIDER_NOT_ENABLED"),
        ],
    ),
    (
        "evacuating",
        [
            *node("n1", VCPU=4),
            (set_state("n1", "evacuating"), "applied n1"),
            (claim("r1", "n1", VCPU=1), "rejected r1 PROVIDER_NOT_ENABLED"),
        ],
    ),
    (
        "enabled again",
        [
            *node("n1", VCPU=4),
            (set_state("n1", "disabled"), "applied n1"),
            (set_state("n1", "enabled"), "applied n1"),
            (claim("r1", "n1", VCPU=1), "accepted r1 until 1000"),
        ],
    ),
    (
        "disabling keeps existing reservations, which still count and can finish",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=3), "accepted r1 until 1000"),
            (claim("r2", "n1", VCPU=1), "accepted r2 until 1000"),
            (set_state("n1", "disabled"), "applied n1"),
            (consume("r1"), "consumed r1"),
            (release("r2"), "released r2"),
            (set_state("n1", "enabled"), "applied n1"),
            (claim("r3", "n1", VCPU=2), "rejected r3 INSUFFICIENT_CAPACITY@VCPU=2/1"),
        ],
    ),
    (
        "not enabled is reported instead of capacity",
        [
            *node("n1", VCPU=1),
            (set_state("n1", "offline"), "applied n1"),
            (claim("r1", "n1", VCPU=5, GPU=1), "rejected r1 PROVIDER_NOT_ENABLED"),
        ],
    ),
    (
        "unknown provider",
        [
            (claim("r1", "ghost", VCPU=1), "rejected r1 PROVIDER_NOT_FOUND"),
        ],
    ),
    (
        "retired provider is unknown",
        [
            *node("n1", VCPU=4),
            (retire("n1"), "applied n1"),
            (claim("r1", "n1", VCPU=1), "rejected r1 PROVIDER_NOT_FOUND"),
        ],
    ),
    (
        "provider events for an unknown provider",
        [
            (inventory("ghost", VCPU=4), "rejected ghost PROVIDER_NOT_FOUND"),
            (set_state("ghost", "disabled"), "rejected ghost PROVIDER_NOT_FOUND"),
            (traits("ghost", "HW_CPU_X86_AVX2"), "rejected ghost PROVIDER_NOT_FOUND"),
            (aggregates("ghost", "agg1"), "rejected ghost PROVIDER_NOT_FOUND"),
            (retire("ghost"), "rejected ghost PROVIDER_NOT_FOUND"),
        ],
    ),
    (
        "resource class not provided",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", GPU=1), "rejected r1 RESOURCE_CLASS_NOT_PROVIDED@GPU=1/0"),
            (
                claim("r2", "n1", GPU=1, VCPU=5),
                "rejected r2 RESOURCE_CLASS_NOT_PROVIDED@GPU=1/0 INSUFFICIENT_CAPACITY@VCPU=5/4",
            ),
        ],
    ),
    (
        "registered without inventory provides nothing",
        [
            (register("n1"), "applied n1"),
            (claim("r1", "n1", VCPU=1), "rejected r1 RESOURCE_CLASS_NOT_PROVIDED@VCPU=1/0"),
        ],
    ),
    (
        "an emptied inventory provides nothing",
        [
            *node("n1", VCPU=4),
            (inventory("n1"), "applied n1"),
            (claim("r1", "n1", VCPU=1), "rejected r1 RESOURCE_CLASS_NOT_PROVIDED@VCPU=1/0"),
        ],
    ),
    (
        "registration is idempotent, a new name renames",
        [
            (register("n1", "node-1"), "applied n1"),
            (register("n1", "node-1"), "noop n1 ALREADY_REGISTERED"),
            (register("n1", "node-one"), "applied n1"),
            (register("n1", "node-one"), "noop n1 ALREADY_REGISTERED"),
        ],
    ),
    (
        "re-registering keeps inventory and usage",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (register("n1", "renamed"), "applied n1"),
            (claim("r2", "n1", VCPU=1), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=1/0"),
        ],
    ),
    (
        "traits and aggregates apply",
        [
            *node("n1", VCPU=4),
            (traits("n1", "HW_CPU_X86_AVX2", "CUSTOM_FAST"), "applied n1"),
            (aggregates("n1", "rack-1"), "applied n1"),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
        ],
    ),
)
def test_providers(steps: list[Step]) -> None:
    play(steps)


@pytest.mark.parametrize("name", ["disabled", "offline", "evacuating"])
def test_not_enabled_reason_names_the_state(name: ProviderStateName) -> None:
    state = fresh_state()
    run([*provider("n1", VCPU=4), set_state("n1", name)], state)
    (outcome,) = apply(state, 9, claim("r1", "n1", VCPU=1))
    assert outcome.reasons == (Reason(Code.PROVIDER_NOT_ENABLED, "n1", detail=name),)


# --- multi-item claims -----------------------------------------------------


@scenarios(
    (
        "all items fit",
        [
            *node("n1", VCPU=4),
            *node("n2", VCPU=4, MEMORY_MB=512),
            (
                claim_items("r1", {"n1": {"VCPU": 4}, "n2": {"VCPU": 4, "MEMORY_MB": 512}}),
                "accepted r1 until 1000",
            ),
            (claim("r2", "n1", VCPU=1), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=1/0"),
            (claim("r3", "n2", MEMORY_MB=1), "rejected r3 INSUFFICIENT_CAPACITY@MEMORY_MB=1/0"),
        ],
    ),
    (
        "one failing item rejects all and holds nothing",
        [
            *node("n1", VCPU=4),
            *node("n2", VCPU=4),
            (
                claim_items("r1", {"n1": {"VCPU": 2}, "n2": {"VCPU": 5}}),
                "rejected r1 INSUFFICIENT_CAPACITY@VCPU=5/4",
            ),
            (claim("r2", "n1", VCPU=4), "accepted r2 until 1000"),
            (claim("r3", "n2", VCPU=4), "accepted r3 until 1000"),
        ],
    ),
    (
        "every failing item is reported, in item order",
        [
            *node("n1", VCPU=4),
            *node("n2", VCPU=4),
            (set_state("n2", "disabled"), None),
            *node("n3", VCPU=4),
            (
                claim_items(
                    "r1",
                    [
                        ("ghost", {"VCPU": 1}),
                        ("n3", {"VCPU": 9}),
                        ("n1", {"VCPU": 1}),
                        ("n2", {"VCPU": 1}),
                    ],
                ),
                "rejected r1 PROVIDER_NOT_FOUND INSUFFICIENT_CAPACITY@VCPU=9/4"
                " PROVIDER_NOT_ENABLED",
            ),
            (claim("r2", "n1", VCPU=4), "accepted r2 until 1000"),
            (claim("r3", "n3", VCPU=4), "accepted r3 until 1000"),
        ],
    ),
    (
        "releasing a multi-item claim frees every item",
        [
            *node("n1", VCPU=4),
            *node("n2", VCPU=4),
            (claim_items("r1", {"n1": {"VCPU": 4}, "n2": {"VCPU": 4}}), "accepted r1 until 1000"),
            (release("r1"), "released r1"),
            (claim("r2", "n1", VCPU=4), "accepted r2 until 1000"),
            (claim("r3", "n2", VCPU=4), "accepted r3 until 1000"),
        ],
    ),
    (
        "a multi-item claim expires as one, then frees every item",
        [
            *node("n1", VCPU=4),
            *node("n2", VCPU=4),
            (claim_items("r1", {"n1": {"VCPU": 4}, "n2": {"VCPU": 4}}), "accepted r1 until 1000"),
            (consume("r1", ts=1001), "expired r1 until 1000 | noop r1 ALREADY_FINAL"),
            (claim("r2", "n1", VCPU=4, ts=1001), "accepted r2 until 2001"),
            (claim("r3", "n2", VCPU=4, ts=1001), "accepted r3 until 2001"),
        ],
    ),
    (
        "consuming a multi-item claim consumes every item",
        [
            *node("n1", VCPU=4),
            *node("n2", VCPU=4),
            (claim_items("r1", {"n1": {"VCPU": 4}, "n2": {"VCPU": 4}}), "accepted r1 until 1000"),
            (consume("r1"), "consumed r1"),
            (tick(50_000), ""),
            (claim("r2", "n2", VCPU=1), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=1/0"),
            (release("r1"), "released r1"),
            (claim("r3", "n2", VCPU=4), "accepted r3 until 51000"),
        ],
    ),
)
def test_multi_item(steps: list[Step]) -> None:
    play(steps)


# --- idempotency -----------------------------------------------------------

_R1 = claim("r1", "n1", VCPU=3, tags=["web"], group="g")


@scenarios(
    (
        "a duplicate is a noop and holds nothing more",
        [
            *node("n1", VCPU=4),
            (_R1, "accepted r1 until 1000"),
            (claim("r1", "n1", VCPU=3, tags=["web"], group="g"), "noop r1 DUPLICATE"),
            (_R1, "noop r1 DUPLICATE"),
            (claim("r2", "n1", VCPU=1), "accepted r2 until 1000"),
        ],
    ),
    (
        "a duplicate at another time is still a duplicate",
        [
            *node("n1", VCPU=4),
            (_R1, "accepted r1 until 1000"),
            (claim("r1", "n1", VCPU=3, tags=["web"], group="g", ts=500), "noop r1 DUPLICATE"),
            (tick(1001), "expired r1 until 1000"),
        ],
    ),
    (
        "a duplicate of a consumed claim",
        [
            *node("n1", VCPU=4),
            (_R1, "accepted r1 until 1000"),
            (consume("r1"), "consumed r1"),
            (claim("r1", "n1", VCPU=3, tags=["web"], group="g"), "noop r1 DUPLICATE"),
        ],
    ),
    (
        "a late duplicate of a released claim is not held again",
        [
            *node("n1", VCPU=4),
            (_R1, "accepted r1 until 1000"),
            (release("r1"), "released r1"),
            (claim("r1", "n1", VCPU=3, tags=["web"], group="g"), "noop r1 DUPLICATE"),
            (claim("r2", "n1", VCPU=4), "accepted r2 until 1000"),
        ],
    ),
    (
        "a late duplicate of an expired claim is not held again",
        [
            *node("n1", VCPU=4),
            (_R1, "accepted r1 until 1000"),
            (
                claim("r1", "n1", VCPU=3, tags=["web"], group="g", ts=2000),
                "expired r1 until 1000 | noop r1 DUPLICATE",
            ),
            (claim("r2", "n1", VCPU=4, ts=2000), "accepted r2 until 3000"),
        ],
    ),
    (
        "reusing an id for other amounts",
        [
            *node("n1", VCPU=4),
            (_R1, "accepted r1 until 1000"),
            (
                claim("r1", "n1", VCPU=1, tags=["web"], group="g"),
                "rejected r1 RESERVATION_ID_CONFLICT",
            ),
            (claim("r2", "n1", VCPU=2), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=2/1"),
            (consume("r1"), "consumed r1"),
        ],
    ),
    (
        "reusing an id for another provider, lease, tag set, group or consumer",
        [
            *node("n1", VCPU=4),
            *node("n2", VCPU=4),
            (_R1, "accepted r1 until 1000"),
            (
                claim("r1", "n2", VCPU=3, tags=["web"], group="g"),
                "rejected r1 RESERVATION_ID_CONFLICT",
            ),
            (
                claim("r1", "n1", VCPU=3, tags=["web"], group="g", lease_ms=5),
                "rejected r1 RESERVATION_ID_CONFLICT",
            ),
            (claim("r1", "n1", VCPU=3, group="g"), "rejected r1 RESERVATION_ID_CONFLICT"),
            (claim("r1", "n1", VCPU=3, tags=["web"]), "rejected r1 RESERVATION_ID_CONFLICT"),
            (
                claim("r1", "n1", VCPU=3, tags=["web"], group="g", consumer="other"),
                "rejected r1 RESERVATION_ID_CONFLICT",
            ),
            (
                claim("r1", "n1", VCPU=3, tags=["web"], group="g", with_tags=["x"]),
                "rejected r1 RESERVATION_ID_CONFLICT",
            ),
        ],
    ),
    (
        "reusing a finished id is a conflict, even when it would fit",
        [
            *node("n1", VCPU=4),
            (_R1, "accepted r1 until 1000"),
            (release("r1"), "released r1"),
            (claim("r1", "n1", VCPU=4), "rejected r1 RESERVATION_ID_CONFLICT"),
            (claim("r2", "n1", VCPU=4), "accepted r2 until 1000"),
        ],
    ),
)
def test_idempotency(steps: list[Step]) -> None:
    play(steps)


# --- consume / release / renew ---------------------------------------------


@scenarios(
    (
        "consume a hold, then again",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=1), "accepted r1 until 1000"),
            (consume("r1"), "consumed r1"),
            (consume("r1"), "noop r1 ALREADY_CONSUMED"),
        ],
    ),
    (
        "unknown reservations",
        [
            (consume("r9"), "noop r9 UNKNOWN_RESERVATION"),
            (release("r9"), "noop r9 UNKNOWN_RESERVATION"),
            (renew("r9"), "noop r9 UNKNOWN_RESERVATION"),
        ],
    ),
    (
        "a rejected claim leaves nothing to consume",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=5), "rejected r1 INSUFFICIENT_CAPACITY@VCPU=5/4"),
            (consume("r1"), "noop r1 UNKNOWN_RESERVATION"),
            (release("r1"), "noop r1 UNKNOWN_RESERVATION"),
        ],
    ),
    (
        "after release everything is final",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=1), "accepted r1 until 1000"),
            (release("r1"), "released r1"),
            (release("r1"), "noop r1 ALREADY_FINAL"),
            (consume("r1"), "noop r1 ALREADY_FINAL"),
            (renew("r1"), "noop r1 ALREADY_FINAL"),
        ],
    ),
    (
        "after expiry everything is final",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=1), "accepted r1 until 1000"),
            (consume("r1", ts=1001), "expired r1 until 1000 | noop r1 ALREADY_FINAL"),
            (renew("r1"), "noop r1 ALREADY_FINAL"),
            (release("r1"), "noop r1 ALREADY_FINAL"),
        ],
    ),
    (
        "after consume-then-release everything is final",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=1), "accepted r1 until 1000"),
            (consume("r1"), "consumed r1"),
            (release("r1"), "released r1"),
            (consume("r1"), "noop r1 ALREADY_FINAL"),
            (release("r1"), "noop r1 ALREADY_FINAL"),
        ],
    ),
    (
        "renew of a consumed reservation is NOT_HELD",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=1), "accepted r1 until 1000"),
            (consume("r1"), "consumed r1"),
            (renew("r1", 5000), "noop r1 NOT_HELD"),
        ],
    ),
    (
        "release of a held reservation frees it",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (release("r1"), "released r1"),
            (claim("r2", "n1", VCPU=4), "accepted r2 until 1000"),
        ],
    ),
    (
        "release of a consumed reservation frees consumed capacity",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (consume("r1"), "consumed r1"),
            (claim("r2", "n1", VCPU=1), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=1/0"),
            (release("r1"), "released r1"),
            (claim("r3", "n1", VCPU=4), "accepted r3 until 1000"),
        ],
    ),
    (
        "consumed reservations never expire",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4, lease_ms=10), "accepted r1 until 10"),
            (consume("r1", ts=5), "consumed r1"),
            (tick(1_000_000), ""),
            (claim("r2", "n1", VCPU=1), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=1/0"),
            (consume("r1"), "noop r1 ALREADY_CONSUMED"),
        ],
    ),
    (
        "consume exactly at expires_at still consumes",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (consume("r1", ts=1000), "consumed r1"),
            (tick(5000), ""),
        ],
    ),
    (
        "renew extends the lease from the partition clock",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (renew("r1", 1000, ts=500), "renewed r1 until 1500"),
            (tick(1001), ""),
            (claim("r2", "n1", VCPU=1, ts=1500), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=1/0"),
            (tick(1501), "expired r1 until 1500"),
        ],
    ),
    (
        "renew never shortens a lease",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (renew("r1", 10, ts=100), "renewed r1 until 1000"),
            (tick(999), ""),
            (tick(1001), "expired r1 until 1000"),
        ],
    ),
    (
        "stale heap entries of a twice-renewed hold do not expire it",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (renew("r1", 1000, ts=400), "renewed r1 until 1400"),
            (renew("r1", 1000, ts=800), "renewed r1 until 1800"),
            (tick(1001), ""),
            (tick(1401), ""),
            (release("r1", ts=1700), "released r1"),
            (tick(1801), ""),
        ],
    ),
    (
        "a stale heap entry does not expire a renewed hold that was then consumed",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (renew("r1", 1000, ts=500), "renewed r1 until 1500"),
            (consume("r1", ts=600), "consumed r1"),
            (tick(10_000), ""),
            (claim("r2", "n1", VCPU=1), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=1/0"),
        ],
    ),
)
def test_lifecycle(steps: list[Step]) -> None:
    play(steps)


# --- expiry and the clock --------------------------------------------------


@scenarios(
    (
        "clock == expires_at does not expire, clock > expires_at does",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (tick(1000), ""),
            (claim("r2", "n1", VCPU=1, ts=1000), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=1/0"),
            (tick(1001), "expired r1 until 1000"),
            (claim("r3", "n1", VCPU=4, ts=1001), "accepted r3 until 2001"),
        ],
    ),
    (
        "when something is overdue, a hold due exactly now still survives",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=1, lease_ms=500), "accepted r1 until 500"),
            (claim("r2", "n1", VCPU=1, lease_ms=1000), "accepted r2 until 1000"),
            (tick(1000), "expired r1 until 500"),
            (tick(1001), "expired r2 until 1000"),
        ],
    ),
    (
        "expiry frees capacity for the claim in the same record",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (claim("r2", "n1", VCPU=4, ts=1001), "expired r1 until 1000 | accepted r2 until 2001"),
        ],
    ),
    (
        "expiry frees an anti-affinity slot for the claim in the same record",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=1, group="g"), "accepted r1 until 1000"),
            (
                claim("r2", "n1", VCPU=1, group="g", ts=1001),
                "expired r1 until 1000 | accepted r2 until 2001",
            ),
        ],
    ),
    (
        "a tick expires holds in a quiet partition, earliest first",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=1, lease_ms=300), "accepted r1 until 300"),
            (claim("r2", "n1", VCPU=1, lease_ms=100), "accepted r2 until 100"),
            (claim("r3", "n1", VCPU=1, lease_ms=5000), "accepted r3 until 5000"),
            (claim("r0", "n1", VCPU=1, lease_ms=300), "accepted r0 until 300"),
            (tick(1000), "expired r2 until 100 | expired r0 until 300 | expired r1 until 300"),
            (tick(5000), ""),
            (tick(5001), "expired r3 until 5000"),
        ],
    ),
    (
        "any record expires what is due, even a provider event",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (retire("n1", ts=2000), "expired r1 until 1000 | applied n1"),
        ],
    ),
    (
        "the clock never goes back",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=1, ts=5000), "accepted r1 until 6000"),
            (claim("r2", "n1", VCPU=1, ts=10), "accepted r2 until 6000"),
            (renew("r1", 500, ts=0), "renewed r1 until 6000"),
            (tick(6001), "expired r1 until 6000 | expired r2 until 6000"),
            (claim("r3", "n1", VCPU=1, ts=0), "accepted r3 until 7001"),
        ],
    ),
    (
        "an event from the past does not expire anything",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=1, ts=5000), "accepted r1 until 6000"),
            (tick(100), ""),
            (claim("r2", "n1", VCPU=3, ts=7000), "expired r1 until 6000 | accepted r2 until 8000"),
        ],
    ),
)
def test_expiry(steps: list[Step]) -> None:
    play(steps)


def test_outcomes_are_numbered_per_record_and_carry_the_clock() -> None:
    state = fresh_state()
    run([*provider("n1", VCPU=4)], state)
    for n, lease in enumerate((30, 10, 20)):
        apply(state, 10 + n, claim(f"r{n}", "n1", VCPU=1, lease_ms=lease, ts=100))
    event = claim("r9", "n1", VCPU=4, ts=500)
    outcomes = apply(state, 42, event)
    assert [(o.seq, o.kind, o.subject, o.expires_at_ms) for o in outcomes] == [
        (0, Kind.EXPIRED, "r1", 110),
        (1, Kind.EXPIRED, "r2", 120),
        (2, Kind.EXPIRED, "r0", 130),
        (3, Kind.ACCEPTED, "r9", 1500),
    ]
    assert {(o.partition, o.offset, o.event_id, o.clock_ms) for o in outcomes} == {
        (0, 42, event.event_id, 500)
    }
    # a record from the past is stamped with the partition clock, not its own ts
    (late,) = apply(state, 43, consume("r9", ts=7))
    assert (late.seq, late.kind, late.clock_ms) == (0, Kind.CONSUMED, 500)


def test_outcomes_round_trip_through_json() -> None:
    outcomes = run(
        [
            *provider("n1", VCPU=4),
            claim("r1", "n1", VCPU=5, GPU=1),
            claim("r2", "n1", VCPU=4),
            tick(5000),
        ]
    )
    for outcome in (o for record in outcomes for o in record):
        assert Outcome.from_json(outcome.to_json()) == outcome


# --- anti-affinity and tags ------------------------------------------------


@scenarios(
    (
        "anti-affinity group: one member per provider",
        [
            *node("n1", VCPU=8),
            *node("n2", VCPU=8),
            (claim("r1", "n1", VCPU=1, group="g"), "accepted r1 until 1000"),
            (claim("r2", "n1", VCPU=1, group="g"), "rejected r2 ANTI_AFFINITY_CONFLICT"),
            (claim("r3", "n2", VCPU=1, group="g"), "accepted r3 until 1000"),
            (claim("r4", "n1", VCPU=1, group="other"), "accepted r4 until 1000"),
            (claim("r5", "n1", VCPU=1), "accepted r5 until 1000"),
        ],
    ),
    (
        "anti-affinity across items of one multi-item claim",
        [
            *node("n1", VCPU=8),
            *node("n2", VCPU=8),
            (claim("r1", "n2", VCPU=1, group="g"), "accepted r1 until 1000"),
            (
                claim_items("r2", {"n1": {"VCPU": 1}, "n2": {"VCPU": 1}}, group="g"),
                "rejected r2 ANTI_AFFINITY_CONFLICT",
            ),
            (claim("r3", "n1", VCPU=1, group="g"), "accepted r3 until 1000"),
        ],
    ),
    (
        "a consumed member still counts; release frees the slot",
        [
            *node("n1", VCPU=8),
            (claim("r1", "n1", VCPU=1, group="g"), "accepted r1 until 1000"),
            (consume("r1"), "consumed r1"),
            (claim("r2", "n1", VCPU=1, group="g"), "rejected r2 ANTI_AFFINITY_CONFLICT"),
            (release("r1"), "released r1"),
            (claim("r3", "n1", VCPU=1, group="g"), "accepted r3 until 1000"),
            (claim("r4", "n1", VCPU=1, group="g"), "rejected r4 ANTI_AFFINITY_CONFLICT"),
        ],
    ),
    (
        "a rejected claim does not take the slot",
        [
            *node("n1", VCPU=2),
            (claim("r1", "n1", VCPU=3, group="g"), "rejected r1 INSUFFICIENT_CAPACITY@VCPU=3/2"),
            (claim("r2", "n1", VCPU=1, group="g"), "accepted r2 until 1000"),
        ],
    ),
    (
        "require_with_tags needs an active reservation carrying the tag",
        [
            *node("n1", VCPU=8),
            (claim("r1", "n1", VCPU=1, with_tags=["db"]), "rejected r1 REQUIRED_TAG_ABSENT"),
            (claim("r2", "n1", VCPU=1, tags=["db", "x"]), "accepted r2 until 1000"),
            (claim("r3", "n1", VCPU=1, with_tags=["db"]), "accepted r3 until 1000"),
            (release("r2"), "released r2"),
            (claim("r4", "n1", VCPU=1, with_tags=["db"]), "rejected r4 REQUIRED_TAG_ABSENT"),
        ],
    ),
    (
        "require_with_tags counts consumed reservations and every holder of the tag",
        [
            *node("n1", VCPU=8),
            (claim("r1", "n1", VCPU=1, tags=["db"]), "accepted r1 until 1000"),
            (claim("r2", "n1", VCPU=1, tags=["db"]), "accepted r2 until 1000"),
            (consume("r2"), "consumed r2"),
            (release("r1"), "released r1"),
            (claim("r3", "n1", VCPU=1, with_tags=["db"]), "accepted r3 until 1000"),
            (release("r2"), "released r2"),
            (claim("r4", "n1", VCPU=1, with_tags=["db"]), "rejected r4 REQUIRED_TAG_ABSENT"),
        ],
    ),
    (
        "require_with_tags looks only at that provider",
        [
            *node("n1", VCPU=8),
            *node("n2", VCPU=8),
            (claim("r1", "n1", VCPU=1, tags=["db"]), "accepted r1 until 1000"),
            (claim("r2", "n2", VCPU=1, with_tags=["db"]), "rejected r2 REQUIRED_TAG_ABSENT"),
        ],
    ),
    (
        "require_without_tags forbids a tag until its holder is gone",
        [
            *node("n1", VCPU=8),
            (claim("r1", "n1", VCPU=1, tags=["noisy"]), "accepted r1 until 1000"),
            (
                claim("r2", "n1", VCPU=1, without_tags=["noisy"]),
                "rejected r2 FORBIDDEN_TAG_PRESENT",
            ),
            (claim("r3", "n1", VCPU=1, without_tags=["quiet"]), "accepted r3 until 1000"),
            (
                claim("r4", "n1", VCPU=1, without_tags=["noisy"], ts=1001),
                "expired r1 until 1000 | expired r3 until 1000 | accepted r4 until 2001",
            ),
        ],
    ),
    (
        "every failing constraint is reported",
        [
            *node("n1", VCPU=8),
            (claim("r1", "n1", VCPU=1, group="g", tags=["noisy"]), "accepted r1 until 1000"),
            (
                claim(
                    "r2",
                    "n1",
                    VCPU=1,
                    group="g",
                    with_tags=["db", "cache"],
                    without_tags=["noisy"],
                ),
                "rejected r2 ANTI_AFFINITY_CONFLICT REQUIRED_TAG_ABSENT REQUIRED_TAG_ABSENT"
                " FORBIDDEN_TAG_PRESENT",
            ),
        ],
    ),
    (
        "a claim's own tags do not satisfy its own requirement",
        [
            *node("n1", VCPU=8),
            (
                claim("r1", "n1", VCPU=1, tags=["db"], with_tags=["db"]),
                "rejected r1 REQUIRED_TAG_ABSENT",
            ),
            (claim("r2", "n1", VCPU=1, tags=["x"], without_tags=["x"]), "accepted r2 until 1000"),
        ],
    ),
)
def test_constraints(steps: list[Step]) -> None:
    play(steps)


def test_constraint_reasons_name_the_provider_and_tag() -> None:
    state = fresh_state()
    run([*provider("n1", VCPU=8), claim("r1", "n1", VCPU=1, group="g", tags=["t"])], state)
    (outcome,) = apply(
        state, 9, claim("r2", "n1", VCPU=1, group="g", with_tags=["a"], without_tags=["t"])
    )
    assert [(r.code, r.provider_id, r.detail) for r in outcome.reasons] == [
        (Code.ANTI_AFFINITY_CONFLICT, "n1", "group g already has a member here"),
        (Code.REQUIRED_TAG_ABSENT, "n1", "a"),
        (Code.FORBIDDEN_TAG_PRESENT, "n1", "t"),
    ]


# --- inventory changes and retirement ----------------------------------------


@scenarios(
    (
        "shrinking below what is held is rejected and changes nothing",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=3), "accepted r1 until 1000"),
            (inventory("n1", VCPU=2), "rejected n1 INVENTORY_IN_USE@VCPU=3/2"),
            (claim("r2", "n1", VCPU=1), "accepted r2 until 1000"),
        ],
    ),
    (
        "shrinking to exactly what is used is allowed",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=3), "accepted r1 until 1000"),
            (inventory("n1", VCPU=3), "applied n1"),
            (claim("r2", "n1", VCPU=1), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=1/0"),
            (release("r1"), "released r1"),
            (claim("r3", "n1", VCPU=3), "accepted r3 until 1000"),
        ],
    ),
    (
        "consumed usage counts against a shrink",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=2), "accepted r1 until 1000"),
            (consume("r1"), "consumed r1"),
            (claim("r2", "n1", VCPU=1), "accepted r2 until 1000"),
            (inventory("n1", VCPU=2), "rejected n1 INVENTORY_IN_USE@VCPU=3/2"),
            (inventory("n1", VCPU=3), "applied n1"),
        ],
    ),
    (
        "lowering the ratio or raising reserved is a shrink too",
        [
            *node("n1", VCPU=(4, 2.0)),
            (claim("r1", "n1", VCPU=6), "accepted r1 until 1000"),
            (inventory("n1", VCPU=(4, 1.0)), "rejected n1 INVENTORY_IN_USE@VCPU=6/4"),
            (inventory("n1", VCPU=(4, 2.0, 2)), "rejected n1 INVENTORY_IN_USE@VCPU=6/4"),
            (inventory("n1", VCPU=(4, 1.5)), "applied n1"),
        ],
    ),
    (
        "removing a class in use is rejected, every class in use is reported",
        [
            *node("n1", VCPU=4, MEMORY_MB=1024, DISK_GB=10),
            (claim("r1", "n1", VCPU=2, MEMORY_MB=512), "accepted r1 until 1000"),
            (
                inventory("n1", DISK_GB=10),
                "rejected n1 INVENTORY_IN_USE@MEMORY_MB=512/0 INVENTORY_IN_USE@VCPU=2/0",
            ),
            (inventory("n1", VCPU=4, MEMORY_MB=1024), "applied n1"),
            (claim("r2", "n1", DISK_GB=1), "rejected r2 RESOURCE_CLASS_NOT_PROVIDED@DISK_GB=1/0"),
        ],
    ),
    (
        "growing and adding classes keeps usage",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (inventory("n1", VCPU=6, GPU=1), "applied n1"),
            (claim("r2", "n1", VCPU=3), "rejected r2 INSUFFICIENT_CAPACITY@VCPU=3/2"),
            (claim("r3", "n1", VCPU=2, GPU=1), "accepted r3 until 1000"),
            (release("r1"), "released r1"),
            (claim("r4", "n1", VCPU=4), "accepted r4 until 1000"),
        ],
    ),
    (
        "usage survives a change that reorders classes",
        [
            *node("n1", MEMORY_MB=100),
            (claim("r1", "n1", MEMORY_MB=60), "accepted r1 until 1000"),
            (inventory("n1", AAA=5, MEMORY_MB=100, ZZZ=5), "applied n1"),
            (claim("r2", "n1", MEMORY_MB=41), "rejected r2 INSUFFICIENT_CAPACITY@MEMORY_MB=41/40"),
            (claim("r3", "n1", AAA=5, ZZZ=5), "accepted r3 until 1000"),
            (
                inventory("n1", MEMORY_MB=100),
                "rejected n1 INVENTORY_IN_USE@AAA=5/0 INVENTORY_IN_USE@ZZZ=5/0",
            ),
            (release("r3"), "released r3"),
            (inventory("n1", MEMORY_MB=60), "applied n1"),
            (release("r1"), "released r1"),
            (claim("r4", "n1", MEMORY_MB=60), "accepted r4 until 1000"),
        ],
    ),
    (
        "a rejected shrink of one class does not apply the others",
        [
            *node("n1", VCPU=4, MEMORY_MB=100),
            (claim("r1", "n1", VCPU=4), "accepted r1 until 1000"),
            (inventory("n1", VCPU=2, MEMORY_MB=500), "rejected n1 INVENTORY_IN_USE@VCPU=4/2"),
            (
                claim("r2", "n1", MEMORY_MB=101),
                "rejected r2 INSUFFICIENT_CAPACITY@MEMORY_MB=101/100",
            ),
        ],
    ),
    (
        "retire without reservations",
        [
            *node("n1", VCPU=4),
            (retire("n1"), "applied n1"),
            (retire("n1"), "rejected n1 PROVIDER_NOT_FOUND"),
        ],
    ),
    (
        "retire with a held or consumed reservation is rejected",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=1), "accepted r1 until 1000"),
            (claim("r2", "n1", VCPU=1), "accepted r2 until 1000"),
            (consume("r2"), "consumed r2"),
            (retire("n1"), "rejected n1 PROVIDER_IN_USE"),
            (release("r1"), "released r1"),
            (retire("n1"), "rejected n1 PROVIDER_IN_USE"),
            (claim("r3", "n1", VCPU=1), "accepted r3 until 1000"),
            (release("r2"), "released r2"),
            (release("r3"), "released r3"),
            (retire("n1"), "applied n1"),
        ],
    ),
    (
        "retire of a provider in a multi-item claim",
        [
            *node("n1", VCPU=4),
            *node("n2", VCPU=4),
            (claim_items("r1", {"n1": {"VCPU": 1}, "n2": {"VCPU": 1}}), "accepted r1 until 1000"),
            (retire("n2"), "rejected n2 PROVIDER_IN_USE"),
            (release("r1"), "released r1"),
            (retire("n2"), "applied n2"),
            (retire("n1"), "applied n1"),
        ],
    ),
    (
        "a retired provider comes back empty",
        [
            *node("n1", VCPU=4),
            (claim("r1", "n1", VCPU=4, group="g", tags=["t"]), "accepted r1 until 1000"),
            (release("r1"), "released r1"),
            (retire("n1"), "applied n1"),
            (register("n1"), "applied n1"),
            (claim("r2", "n1", VCPU=1), "rejected r2 RESOURCE_CLASS_NOT_PROVIDED@VCPU=1/0"),
            (inventory("n1", VCPU=4), "applied n1"),
            (claim("r3", "n1", VCPU=4, group="g", without_tags=["t"]), "accepted r3 until 1000"),
        ],
    ),
)
def test_inventory_and_retire(steps: list[Step]) -> None:
    play(steps)


def test_in_use_reasons_carry_details() -> None:
    state = fresh_state()
    run([*provider("n1", VCPU=4), claim("r1", "n1", VCPU=3), claim("r2", "n1", VCPU=1)], state)
    (shrink,) = apply(state, 10, inventory("n1", VCPU=1))
    assert shrink.reasons == (
        Reason(
            Code.INVENTORY_IN_USE,
            "n1",
            "VCPU",
            4,
            1,
            "new capacity is below what is held and consumed",
        ),
    )
    (retired,) = apply(state, 11, retire("n1"))
    assert retired.reasons == (Reason(Code.PROVIDER_IN_USE, "n1", detail="2 active reservations"),)


# --- partitions --------------------------------------------------------------

# with two partitions, "home" lives in partition 0 and "away" in partition 1


@scenarios(
    (
        "a provider of another partition cannot be registered or used",
        [
            (register("away"), "rejected away PROVIDER_WRONG_PARTITION"),
            (inventory("away", VCPU=4), "rejected away PROVIDER_WRONG_PARTITION"),
            (retire("away"), "rejected away PROVIDER_WRONG_PARTITION"),
            (claim("r1", "away", VCPU=1), "rejected r1 PROVIDER_WRONG_PARTITION"),
            (register("home"), "applied home"),
            (inventory("home", VCPU=4), "applied home"),
            (claim("r2", "home", VCPU=1), "accepted r2 until 1000"),
            (
                claim_items("r3", {"home": {"VCPU": 1}, "away": {"VCPU": 1}}),
                "rejected r3 PROVIDER_WRONG_PARTITION",
            ),
            (claim("r4", "home", VCPU=3), "accepted r4 until 1000"),
        ],
    ),
)
def test_partitions(steps: list[Step]) -> None:
    play(steps, PartitionState(0, 2))


def test_wrong_partition_reason_names_the_home_partition() -> None:
    state = PartitionState(1, 2)
    (outcome,) = apply(state, 0, register("home"))
    assert outcome.kind == Kind.REJECTED
    assert outcome.partition == 1
    assert outcome.reasons == (
        Reason(
            Code.PROVIDER_WRONG_PARTITION, "home", detail="provider belongs to partition 0, not 1"
        ),
    )
    (ok,) = apply(state, 1, register("away"))
    assert ok.kind == Kind.APPLIED
    assert "home" not in state.providers
