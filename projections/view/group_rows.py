"""The view's server groups and their members' rows.

A group's row is rewritten when it is created and deleted when it goes; a
member's row is written once, when its membership claim is held (the
reservation's own row says whether it still is: it is a member while that is
held, consumed or pending), so a restarted writer rebuilds the membership,
and the claim's fingerprint, from the two.
"""

from __future__ import annotations

from sqlalchemy import delete

from projections.state import PartitionState
from projections.view.plan import Plan
from projections.view.tables import server_groups

_INSERT_GROUP = (
    'INSERT INTO server_groups (group_id, "partition", policy, max_server_per_host, '
    "project_id, user_id, updated_offset) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_MEMBER = (
    'INSERT INTO server_group_members (reservation_id, "partition", group_id, provider_id, '
    "consumer_id) VALUES (?, ?, ?, ?, ?)"
)


def write_server_groups(plan: Plan, state: PartitionState, offset: int) -> None:
    """The groups created or deleted, and the memberships held, since the
    last batch (nothing to do, and no cost, for a batch without any)."""
    partition = state.partition
    if state.groups_touched:
        touched = sorted(state.groups_touched)
        state.groups_touched.clear()
        plan.execute(delete(server_groups).where(server_groups.c.group_id.in_(touched)))
        plan.bulk(
            _INSERT_GROUP,
            [
                (
                    gid,
                    partition,
                    group.policy,
                    group.max_server_per_host,
                    group.project_id,
                    group.user_id,
                    offset,
                )
                for gid in touched
                if (group := state.groups.get(gid)) is not None
            ],
        )
    if state.joined:
        rows = [(rid, partition, *member) for rid, member in sorted(state.joined.items())]
        state.joined.clear()
        plan.bulk(_INSERT_MEMBER, rows)
