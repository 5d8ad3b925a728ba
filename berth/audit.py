"""Why a past request landed where it did, from the log alone (``berth
explain --request``, ``GET /v1/explain/{request_id}``).

The answer on ``berth.placements`` names the request's record, the policy
that placed it (``NAME@VERSION``: the offset of its record on
``berth.policies``) and, per partition, the offset up to which the view it
ranked on had applied the log. From those: the writers' states as of
those offsets are decided again in memory (the writers' code, each
partition stopped at its offset), starting from the states of the newest
checkpoint of the view at or before them (:mod:`berth.checkpoints`) or
else from offset 0, and the view's snapshot is made from them
(:mod:`consumers.state_snapshot`); the recorded policy is compiled, and the engine
places the request again, with every provider's story: the filter that
removed it, or its rank and each weigher's part. A request that named a
server group is placed again under the group's rule as the view held it
then (its policy, ``max_server_per_host``, its members' providers), as the
scheduler placed it: the providers the group's filter removed are among
the removed. The recomputed pick is
compared with the recorded one. It can differ for a reason the log does
not hold: a scheduler also counts its own claims proposed after its
snapshot was read, and a retry avoids providers whose claims were refused.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from berth.app import App, Settings, open_log
from berth.checkpoints import Checkpoint, Checkpoints, collector_paused, seed_log
from berth.replay import decide_until
from consumers.policies import POLICY_PARTITION, PolicyError, compile_policy
from consumers.scheduler import engine_request
from consumers.server_groups import GroupRule, group_refusal
from consumers.state_snapshot import rules_of, snapshot_of
from ledger.log import Log, Record
from ledger.partitioner import partition_for
from ledger.topics import Topics
from projections.state import PartitionState
from scheduling.config import SchedulerConfig
from scheduling.engine import Engine, Placement
from scheduling.model import Snapshot
from schemas.ranked import candidates_of
from schemas.requests import BatchRequest, PlacementRequest, request_from_json

READ_BATCH = 5_000


class AuditError(ValueError):
    """The log cannot answer: no such answer, or one that records too little."""


def find_answer(log: Log, topic: str, request_id: str) -> dict[str, Any]:
    """The last answer to ``request_id`` on the placements ``topic`` (its
    request's partition, read from the end back: keys are compared before
    any value is decoded, and a recent request's answer is found first)."""
    partition = partition_for(request_id.encode(), log.partition_count(topic))
    key = request_id.encode()
    end = log.end_offset(topic, partition)
    while end > 0:
        start = max(0, end - READ_BATCH)
        for record in reversed(_between(log, topic, partition, start, end)):
            if record.key == key:
                answer: dict[str, Any] = json.loads(record.value)
                return answer
        end = start
    raise AuditError(f"no answer to request {request_id!r} on {topic}")


def _between(log: Log, topic: str, partition: int, start: int, end: int) -> list[Record]:
    """The records from offset ``start`` up to ``end`` (a read may return
    fewer than asked)."""
    found: list[Record] = []
    offset = start
    while offset < end and (records := log.read(topic, partition, offset, end - offset)):
        found += (r for r in records if r.offset < end)
        offset = records[-1].offset + 1
    return found


def recorded_request(log: Log, topic: str, answer: dict[str, Any]) -> PlacementRequest:
    """The request record an answer names (its ``source``)."""
    partition, offset = answer["source"]
    (record,) = log.read(topic, partition, offset, 1)
    # read as the scheduler worker read it: JSON mode (the models are strict
    # in Python mode, where a list is not a frozenset)
    try:
        request = request_from_json(record.value)
    except ValueError as error:
        raise AuditError(f"{topic} {partition}:{offset} is not a request: {error}") from None
    if isinstance(request, BatchRequest):
        raise AuditError(f"{answer['request_id']} is a batch: explain one of its members' answers")
    return request


def recorded_policy(
    log: Log, topic: str, label: str, configured: SchedulerConfig
) -> tuple[SchedulerConfig, bool]:
    """The configuration ``NAME@VERSION`` names, and whether the log holds it
    (``NAME@configuration``: the scheduler's own file, not in the log;
    ``configured`` stands in for it)."""
    _, _, version = label.rpartition("@")
    if not version.isdigit():
        return configured, False
    (record,) = log.read(topic, POLICY_PARTITION, int(version), 1)
    return compile_policy(json.loads(record.value)["policy"]), True


def view_as_of(
    settings: Settings, offsets: dict[int, int], log: Log | None = None
) -> tuple[Snapshot, Checkpoint | None]:
    """The view as it was when each partition had applied the log up to its
    offset in ``offsets``, as a snapshot; and the checkpoint it was rebuilt
    from (None: from offset 0). ``log``: the log to read, if one is open
    already."""
    snapshot, checkpoint, _ = view_and_groups_as_of(settings, offsets, log)
    return snapshot, checkpoint


def view_and_groups_as_of(
    settings: Settings, offsets: dict[int, int], log: Log | None = None
) -> tuple[Snapshot, Checkpoint | None, dict[str, GroupRule]]:
    """:func:`view_as_of`, and the server groups' rules as of those offsets
    (the snapshot holds their members). The writers' states as of the
    offsets are the newest checkpoint's before them with the records since
    decided on them in memory (or the log decided from offset 0), and the
    view's rows are a function of its writers' states: the snapshot and
    rules are made from the states, no view written or read."""
    # Reading a checkpoint's states makes millions of objects and next to no
    # reference cycles: with the collector on, its young collections
    # traverse them again and again, four times the reading itself
    with collector_paused(), contextlib.ExitStack() as opened:
        if log is None:
            log = opened.enter_context(open_log(settings, read_only=True))
        states, checkpoint = states_as_of(settings, offsets, log)
        made = snapshot_of(states), checkpoint, rules_of(states)
        # freed while the collector is off: the first young collection once
        # it is on would otherwise traverse every object of the states
        # (a fifth of a late request's explain), all of them garbage by then
        states.clear()
        return made


def states_as_of(
    settings: Settings, offsets: Mapping[int, int], log: Log
) -> tuple[list[PartitionState], Checkpoint | None]:
    """Each partition's writer state once it had decided the log up to its
    offset in ``offsets`` (0 for one it does not name), and the checkpoint
    it was decided from (None: from offset 0)."""
    events = settings.topics.events
    states = {p: PartitionState(p, settings.partitions) for p in range(settings.partitions)}
    start: Mapping[int, int] = {}
    restored = Checkpoints(settings).restore_states(offsets)
    checkpoint = None
    if restored is not None:
        checkpoint, loaded = restored
        states |= {s.partition: s for s in loaded}
        start = checkpoint.offsets
        # only the records after the checkpoint are read: check those alone
        seed_log(log, events, checkpoint)
    for p, state in states.items():
        decide_until(log, events, state, start.get(p, 0), offsets.get(p, 0))
    return list(states.values()), checkpoint


def explain_request(
    app: App,
    request_id: str,
    provider: str | None = None,
    configured: SchedulerConfig | None = None,
) -> dict[str, Any]:
    """Why ``request_id`` was placed (or not) as it was, from ``app``'s log;
    with ``provider``, that provider's story too."""
    topics = app.settings.topics
    answer = find_answer(app.log, topics.placements, request_id)
    request = recorded_request(app.log, topics.requests, answer)
    label = answer.get("policy") or "default@configuration"
    config, logged = recorded_policy(
        app.log, topics.policies, label, configured or SchedulerConfig.default()
    )
    if "offsets" not in answer:
        raise AuditError(f"the answer to {request_id!r} does not record its view's offsets")
    offsets = {int(p): o for p, o in answer["offsets"].items()}
    # the app's own log: a server's has checked every record once already
    snapshot, checkpoint, rules = view_and_groups_as_of(app.settings, offsets, app.log)
    group = rules.get(request.group_id) if request.group_id is not None else None
    engine = config.engine()
    again = engine.place(
        snapshot, engine_request(request, request.num_instances, frozenset(), group)
    )
    recorded = [pid for _, pid in answer["reservations"]]
    story = _stories(config.engine(), snapshot, request, provider, group)
    return {
        "request_id": request_id,
        "project_id": request.project_id,
        "placed": answer["placed"],
        "reason": answer.get("reason", ""),
        "policy": label,
        "policy_in_log": logged,
        "offsets": {str(p): o for p, o in sorted(offsets.items())},
        "rebuilt_from": _rebuilt_from(checkpoint, offsets),
        "attempts": answer.get("attempts", 1),
        "recorded": recorded,
        "recomputed": list(again.providers),
        "same": list(again.providers) == recorded if answer["placed"] else not again.placed,
        "candidates": candidates_of(answer),
        **_group_story(snapshot, request, group),
        **story,
    }


def _rebuilt_from(checkpoint: Checkpoint | None, offsets: dict[int, int]) -> dict[str, Any]:
    """Where the view as of ``offsets`` started from, and how many records
    were replayed on top."""
    start = checkpoint.records if checkpoint is not None else 0
    return {
        "checkpoint": checkpoint.path.name if checkpoint is not None else None,
        "replayed": sum(offsets.values()) - start,
    }


def _group_story(
    snapshot: Snapshot, request: PlacementRequest, group: GroupRule | None
) -> dict[str, Any]:
    """The server group the request named, as the view held it then: its
    rule and members per provider, and why the scheduler would have refused
    the request outright ("" when it would not)."""
    gid = request.group_id
    if gid is None:
        return {}
    named: dict[str, Any] = {"group_id": gid, "refused": group_refusal(request, group)}
    if group is not None:
        named |= group.to_dict()
    elif request.group_policy is not None:
        named["policy"] = request.group_policy  # ad hoc: a group the log never created
    named["hosts"] = {
        p.provider_id: p.groups[gid] for p in snapshot.providers if p.groups.get(gid, 0)
    }
    return {"server_group": named}


def _stories(
    engine: Engine,
    snapshot: Snapshot,
    request: PlacementRequest,
    provider: str | None,
    group: GroupRule | None = None,
) -> dict[str, Any]:
    """Every provider ranked (a full scan with its trace), and ``provider``'s
    place in it; under ``group``'s rule, when the request named it."""
    engine.ranked = snapshot.size
    wanted = engine_request(request, 1, frozenset(), group)
    placement: Placement = engine.place(snapshot, wanted, explain=True)
    trace = placement.trace
    story: dict[str, Any] = {
        "considered": trace.considered if trace else snapshot.size,
        "removed": dict(trace.counts) if trace else {},
    }
    if provider is None:
        return story
    # every provider's ranking as dicts: only a named provider's story reads it
    ranking = placement.ranking.to_dicts() if placement.ranking is not None else []
    for elimination in trace.eliminations if trace else ():
        if elimination.provider_id == provider:
            story["provider"] = {
                "provider_id": provider,
                "filtered_by": elimination.filter,
                "why": elimination.reason,
            }
            return story
    for rank, ranked in enumerate(ranking, start=1):
        if ranked["provider_id"] == provider:
            story["provider"] = {"provider_id": provider, "rank": rank, **ranked}
            if ranking:
                story["first"] = ranking[0]
            return story
    story["provider"] = {"provider_id": provider, "absent": "not in the view at those offsets"}
    return story


def verify_policies(log: Log, topics: Topics) -> tuple[int, int, str | None]:
    """``replay --verify``'s check of the policies: every ``policy_set`` on
    the policies topic compiles again (each scheduler folds it so: one that
    no longer does, a plug-in gone say, would now be skipped), and every
    answer's ``NAME@VERSION`` names a ``policy_set`` of NAME at VERSION.
    How many policy records and answers were checked, and the first
    divergence, if any."""
    sets: dict[int, str] = {}
    policies = 0
    for record in _every(log, topics.policies):
        policies += 1
        data = json.loads(record.value)
        if data.get("type") != "policy_set":
            continue
        try:
            compile_policy(data["policy"])
        except PolicyError as error:
            return policies, 0, f"policy {data['name']}@{record.offset} no longer compiles: {error}"
        sets[record.offset] = data["name"]
    answers = 0
    for record in _every(log, topics.placements):
        label = json.loads(record.value).get("policy", "")
        name, _, version = label.rpartition("@")
        if not version.isdigit():
            continue  # no book, or the scheduler's own configuration
        answers += 1
        if sets.get(int(version)) != name:
            where = f"{topics.placements} {record.partition}:{record.offset}"
            return policies, answers, f"answer at {where} names {label}, not a policy set there"
    return policies, answers, None


def _every(log: Log, topic: str) -> Iterator[Record]:
    for partition in range(log.partition_count(topic)):
        offset = 0
        while records := log.read(topic, partition, offset, READ_BATCH):
            yield from records
            offset = records[-1].offset + 1
