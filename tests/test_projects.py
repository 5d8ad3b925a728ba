"""Projects that cannot touch each other, decided by the partition writer:
an event that carries the project that published it (``acting_project``)
claims only for that project and consumes, renews or releases only that
project's reservations. Checked on the pure core, then through the real
ledger: a publisher that writes to the log directly, a restart that rebuilds
the state from the view, and a replay that decides it all again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from berth.app import App, Settings
from berth.client import Publisher
from berth.replay import replay
from consumers.partition_writer import catch_up_all
from projections.state import PartitionState
from schemas.events import ClaimSet, ClaimSpec, Event, ReleaseConsumer
from schemas.outcomes import Code, Kind
from tests.builders import (
    briefs,
    claim,
    consume,
    fresh_state,
    provider,
    release,
    renew,
    retire,
    run,
    set_state,
    tick,
)


def by(project: str | None, event: Event, key: str | None = None) -> Event:
    """``event`` as published by ``project`` (to the partition of ``key``)."""
    update = {"acting_project": project} | ({} if key is None else {"partition_key": key})
    acted: Event = event.model_copy(update=update)
    return acted


def _decided(state: PartitionState, *events: Event) -> list[str]:
    return [briefs(outcomes) for outcomes in run(events, state, first_offset=100)]


@pytest.fixture
def state() -> PartitionState:
    """A provider, with one reservation of project a (a1, consumer vm-a) and
    one of project b (b1, consumer vm-b)."""
    state = fresh_state()
    run(
        [
            *provider("n1", VCPU=16),
            claim("a1", "n1", VCPU=1, project="a", consumer="vm-a", lease_ms=60_000),
            claim("b1", "n1", VCPU=1, project="b", consumer="vm-b", lease_ms=60_000),
        ],
        state,
    )
    return state


MISMATCH = "rejected {} PROJECT_MISMATCH"


def _renew(rid: str) -> Event:
    return renew(rid, 5_000)


@pytest.mark.parametrize("make", [consume, release, _renew], ids=["consume", "release", "renew"])
def test_a_project_acts_only_on_its_own_reservations(
    state: PartitionState, make: Callable[[str], Event]
) -> None:
    held = state.reservations["b1"].expires_at_ms
    assert _decided(state, by("a", make("b1"))) == [MISMATCH.format("b1")]
    assert state.reservations["b1"].expires_at_ms == held  # untouched
    assert state.providers["n1"].held == [2]
    # its own, as anyone else would; and the system's events are not checked
    assert _decided(state, by("a", make("a1")))[0].split()[0] in ("consumed", "released", "renewed")
    assert _decided(state, make("b1"))[0].split()[0] in ("consumed", "released", "renewed")


def test_the_reason_does_not_name_the_owner(state: PartitionState) -> None:
    (outcome,) = run([by("a", release("b1"))], state)[0]
    assert outcome.kind == Kind.REJECTED
    (reason,) = outcome.reasons
    assert reason.code == Code.PROJECT_MISMATCH and "b" not in reason.detail.split()


def test_an_unknown_reservation_is_a_noop_as_ever(state: PartitionState) -> None:
    assert _decided(state, by("a", release("nobody"))) == ["noop nobody UNKNOWN_RESERVATION"]


def test_a_project_claims_only_for_itself(state: PartitionState) -> None:
    assert _decided(state, by("a", claim("x", "n1", VCPU=1, project="b"))) == [MISMATCH.format("x")]
    assert "x" not in state.reservations
    assert _decided(state, by("a", claim("y", "n1", VCPU=1, project="a"))) == [
        "accepted y until 1000"
    ]
    assert state.reservations["y"].project_id == "a"


def test_a_claim_set_with_another_projects_claim_is_refused_whole(state: PartitionState) -> None:
    specs = tuple(
        ClaimSpec(
            reservation_id=rid,
            consumer_id="vm",
            project_id=project,
            items=claim(rid, "n1", VCPU=1).items,
        )
        for rid, project in (("s1", "a"), ("s2", "b"))
    )
    event = ClaimSet(event_id="cs", ts_ms=0, partition_key="n1", claims=specs, acting_project="a")
    assert _decided(state, event) == [f"{MISMATCH.format('s1')} | {MISMATCH.format('s2')}"]
    assert not {"s1", "s2"} & state.reservations.keys()


def test_a_consumer_holding_another_projects_reservation_is_not_released(
    state: PartitionState,
) -> None:
    def release_consumer(consumer: str, project: str) -> ReleaseConsumer:
        return ReleaseConsumer(
            event_id=f"rc-{consumer}-{project}",
            ts_ms=0,
            partition_key="n1",
            consumer_id=consumer,
            acting_project=project,
        )

    assert _decided(state, release_consumer("vm-b", "a")) == [MISMATCH.format("vm-b")]
    assert "b1" in state.reservations
    assert _decided(state, release_consumer("vm-a", "a")) == ["released a1"]


@pytest.mark.parametrize(
    "event",
    [set_state("n1", "disabled"), retire("n1"), tick(0)],
    ids=["provider_state_set", "provider_retired", "tick"],
)
def test_a_project_may_not_publish_the_operators_events(
    state: PartitionState, event: Event
) -> None:
    (outcomes,) = run([by("a", event)], state)
    assert [(o.kind, o.reasons[0].code) for o in outcomes] == [
        (Kind.REJECTED, Code.PROJECT_MISMATCH)
    ]
    assert state.providers["n1"].state == "enabled"


def test_through_the_ledger_a_restart_and_a_replay(tmp_path: Path) -> None:
    """A publisher on the log itself (no API in between) gets the same
    answers; a writer restarted from the view still knows whose each
    reservation is; a replay decides every record again identically."""
    settings = Settings(data_dir=tmp_path / "data", partitions=2)
    with App(settings) as app:
        publisher = Publisher(app.log, settings.topics)
        publisher.publish(
            [
                *provider("n1", VCPU=8),
                claim("a1", "n1", VCPU=1, project="a", lease_ms=600_000),
                claim("b1", "n1", VCPU=1, project="b", lease_ms=600_000),
            ]
        )
        catch_up_all(app.writers())
    with App(settings) as app:  # the writers' state loaded from the view
        publisher = Publisher(app.log, settings.topics)
        publisher.publish([by("a", release("b1"), "n1"), by("b", consume("b1"), "n1")])
        catch_up_all(app.writers())
        with app.engine.connect() as conn:
            statuses: dict[str, str] = dict(
                conn.exec_driver_sql("SELECT reservation_id, status FROM reservations").all()
            )
            mismatched = conn.exec_driver_sql(
                "SELECT subject FROM outcomes WHERE reasons LIKE '%PROJECT_MISMATCH%'"
            ).all()
    assert statuses == {"a1": "held", "b1": "consumed"}
    assert mismatched == [("b1",)]
    result = replay(settings, verify=True)
    assert result.divergence is None and result.verified == result.outcomes
