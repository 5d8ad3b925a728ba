"""Server groups as the view has them: for the scheduler, which reads a
request's group's policy and rule here (its members are in the snapshot,
``Provider.groups``), and for ``berth group`` and ``/v1/groups``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, select

from ledger.log import Log
from projections.view.commits import read_settled
from projections.view.loader import committed_offsets
from projections.view.tables import reservations, server_group_members, server_groups
from schemas.events import HARD_GROUP_POLICIES, GroupPolicyName
from schemas.requests import PlacementRequest

ACTIVE_MEMBER_STATUSES = ("held", "consumed", "pending")


@dataclass(frozen=True, slots=True)
class GroupRule:
    """A server group's policy and rule, the partition it lives in, and its
    owner (None: the system's, any project may join it)."""

    group_id: str
    policy: GroupPolicyName
    max_server_per_host: int
    partition: int
    project_id: str | None = None
    user_id: str | None = None

    @property
    def hard(self) -> bool:
        return self.policy in HARD_GROUP_POLICIES

    def seen_by(self, project: str | None) -> bool:
        """Whether ``project`` (None: the system, an operator) may see and
        use it: its own groups and the shared ones."""
        return project is None or self.project_id in (None, project)

    def to_dict(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "policy": self.policy,
            "max_server_per_host": self.max_server_per_host,
            "project_id": self.project_id,
            "user_id": self.user_id,
        }


@dataclass(frozen=True, slots=True)
class Member:
    reservation_id: str
    consumer_id: str
    provider_id: str
    status: str


@dataclass(frozen=True, slots=True)
class GroupView:
    """A group and its members (those still held, consumed or pending)."""

    rule: GroupRule
    members: tuple[Member, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        hosts: dict[str, int] = {}
        for m in self.members:
            hosts[m.provider_id] = hosts.get(m.provider_id, 0) + 1
        return {
            **self.rule.to_dict(),
            "partition": self.rule.partition,
            "members": [
                {
                    "consumer_id": m.consumer_id,
                    "provider_id": m.provider_id,
                    "reservation_id": m.reservation_id,
                    "status": m.status,
                }
                for m in self.members
            ],
            "hosts": dict(sorted(hosts.items())),
        }


def read_rules(engine: Engine) -> dict[str, GroupRule]:
    """Every server group's rule, by id."""
    with engine.connect() as conn:
        return {
            row.group_id: _rule(row)
            for row in conn.execute(select(server_groups).order_by(server_groups.c.group_id))
        }


def read_group(engine: Engine, group_id: str) -> GroupView | None:
    """A group and its members, or None when the view has no such group."""
    g, m, r = server_groups.c, server_group_members.c, reservations.c
    with engine.connect() as conn:
        row = conn.execute(select(server_groups).where(g.group_id == group_id)).first()
        if row is None:
            return None
        members = conn.execute(
            select(m.reservation_id, m.consumer_id, m.provider_id, r.status)
            .join(reservations, r.reservation_id == m.reservation_id)
            .where(m.group_id == group_id, r.status.in_(ACTIVE_MEMBER_STATUSES))
            .order_by(m.reservation_id)
        ).all()
    return GroupView(_rule(row), tuple(Member(*member) for member in members))


def read_group_settled(
    engine: Engine, group_id: str, log: Log, topic: str, partitions: int
) -> GroupView | None:
    """:func:`read_group`, read again when the view has no such group but
    is behind what ``topic`` held when asked, once it has committed that: a
    group's decision goes out just before its view commit, so a group asked
    about right after ``create --wait`` is found."""
    return read_settled(
        lambda: read_group(engine, group_id),
        lambda group: group is not None,
        engine,
        log,
        topic,
        partitions,
    )


def _rule(row: Any) -> GroupRule:
    return GroupRule(
        row.group_id,
        row.policy,
        row.max_server_per_host,
        row.partition,
        row.project_id,
        row.user_id,
    )


class LiveRules:
    """The groups' rules, read again only when the view has moved on."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._seen: dict[int, int] | None = None
        self._rules: dict[str, GroupRule] = {}

    def __call__(self) -> Mapping[str, GroupRule]:
        with self.engine.connect() as conn:
            offsets = committed_offsets(conn)
        if offsets != self._seen:
            self._rules = read_rules(self.engine)
            self._seen = offsets
        return self._rules


RuleSource = Callable[[], Mapping[str, GroupRule]]


def group_refusal(request: PlacementRequest, rule: GroupRule | None) -> str:
    """Why a request's server group hint cannot be placed by ("": it can).
    A group the log never created is an ad-hoc one only with a policy given
    (the compute's partition keeps its anti-affinity, as before groups were
    records); without one it names nothing. Another project's group is
    refused as its writer would refuse the membership."""
    if rule is None:
        if request.group_policy is None:
            return f"no server group {request.group_id} (berth group create)"
        return ""
    if not rule.seen_by(request.project_id):
        return (
            f"server group {request.group_id} is another project's, "
            f"not project {request.project_id}'s"
        )
    if request.group_policy is not None and request.group_policy != rule.policy:
        return (
            f"server group {request.group_id} is {rule.policy}, "
            f"the request says {request.group_policy}"
        )
    return ""
