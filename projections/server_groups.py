"""Server groups in their partition: the policy, and the members it admits.

A server group lives in the partition of its id. A member joins through a
claim that names the group (``ClaimSpec.server_group``) and the provider the
instance goes to (``group_host``); that claim is a reservation of this
partition, with no amounts, held, consumed, released and expired like any
other, so a member leaves when its placement is released or expires, or when
the group is deleted. A group of a project admits only that project's
claims. A hard policy is checked here, against the members held, consumed
and pending, in log order: two schedulers racing to the same
group cannot both win, whichever partitions their instances' providers are
in (the scheduler claims the compute and the membership in one transaction).
"""

from __future__ import annotations

from projections.emitter import Emitter
from projections.holds import finish, named
from projections.state import PartitionState, ServerGroup
from schemas.events import ClaimSpec, ServerGroupCreated, ServerGroupDeleted
from schemas.outcomes import Code, Kind, Reason


def group_created(state: PartitionState, event: ServerGroupCreated, out: Emitter) -> None:
    gid = event.group_id
    limit = event.max_server_per_host or 1
    known = state.groups.get(gid)
    if known is not None:
        same_owner = (known.project_id, known.user_id) == (event.project_id, event.user_id)
        if known.policy == event.policy and known.max_server_per_host == limit and same_owner:
            out.emit(Kind.NOOP, gid, (Reason(Code.ALREADY_DEFINED, detail=known.policy),))
        else:
            detail = f"exists as {known.policy} (max_server_per_host {known.max_server_per_host})"
            if not same_owner:
                detail += f" of {_owner(known)}"
            out.emit(Kind.REJECTED, gid, (Reason(Code.GROUP_EXISTS, detail=detail),))
        return
    state.groups[gid] = ServerGroup(gid, event.policy, limit, event.project_id, event.user_id)
    state.groups_touched.add(gid)
    out.emit(Kind.APPLIED, gid)


def group_deleted(state: PartitionState, event: ServerGroupDeleted, out: Emitter) -> None:
    """Release the group's memberships here (in reservation id order), then
    forget it; the members' instances keep their own reservations."""
    gid = event.group_id
    if gid not in state.groups:
        out.emit(Kind.NOOP, gid, (Reason(Code.GROUP_NOT_FOUND, detail=gid),))
        return
    gone = (Reason(Code.GROUP_NOT_FOUND, detail=f"server group {gid} deleted"),)
    members = sorted(
        rid
        for rid, r in state.reservations.items()
        if r.membership is not None and r.membership[0] == gid
    )
    for rid in members:
        reservation = state.reservations[rid]
        given = named(reservation) if reservation.identifiers else ()
        finish(state, reservation)
        out.emit(Kind.RELEASED, rid, gone, identifiers=given)
    del state.groups[gid]
    state.groups_touched.add(gid)
    out.emit(Kind.APPLIED, gid)


def membership_refused(state: PartitionState, spec: ClaimSpec) -> Reason | None:
    """Why the group's policy refuses a member on ``spec.group_host``, or None."""
    gid, host = spec.server_group, spec.group_host
    assert gid is not None and host is not None
    group = state.groups.get(gid)
    if group is None:
        return Reason(
            Code.GROUP_NOT_FOUND,
            host,
            detail=f"no server group {gid} in partition {state.partition}",
        )
    if group.project_id is not None and spec.project_id != group.project_id:
        return Reason(
            Code.GROUP_OF_ANOTHER_PROJECT,
            host,
            detail=f"server group {gid} is project {group.project_id}'s, "
            f"the claim is for {spec.project_id}",
        )
    hosts = group.hosts
    if group.policy == "affinity":
        elsewhere = sorted(h for h in hosts if h != host)
        if elsewhere:
            return Reason(
                Code.AFFINITY_CONFLICT,
                host,
                detail=f"affinity group {gid} has its members on {elsewhere[0]}",
            )
    elif group.policy == "anti-affinity":
        here = hosts.get(host, 0)
        if here >= group.max_server_per_host:
            return Reason(
                Code.ANTI_AFFINITY_CONFLICT,
                host,
                requested=1,
                available=0,
                detail=f"anti-affinity group {gid} has {here} member(s) here, "
                f"max_server_per_host {group.max_server_per_host}",
            )
    return None


def _owner(group: ServerGroup) -> str:
    if group.project_id is None:
        return "no project (the system's)"
    user = f", user {group.user_id}" if group.user_id is not None else ""
    return f"project {group.project_id}{user}"
