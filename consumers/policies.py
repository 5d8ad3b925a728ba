"""Scheduling policies as records in the log, picked up by running schedulers.

A policy is a scheduler configuration (filters in order with their options,
weighers and multipliers, sampling, ``max_attempts``, the balance unit and
the placement scriptlet's source), the same mapping a TOML file gives
(:mod:`scheduling.config`), kept under a name on the ``berth.policies``
topic (one partition, so its records have one order). Its version is the
offset of the record that set it. Records:

- ``policy_set``: name, the mapping; validated completely before it is
  appended (a filter that does not load, a scriptlet that does not compile:
  refused with the reason and the scriptlet's line, nothing appended);
- ``policy_deleted``: name;
- ``policy_assigned``: a project or an aggregate, and a policy name (None:
  back to the default).

Which policy places a request: the one the request names, if it is the one
its project may use; else the project's; else that of the aggregate its
availability zone is (oVirt's policy per cluster: Nova's zones are
aggregates with ``availability_zone`` metadata; of several such aggregates
with a policy, the first by id); else ``default``: the policy of that name
in the log, or the configuration the scheduler was started with.

Every scheduler folds the topic as it goes (:class:`PolicyBook`), so a change
reaches it within one step, and builds each version's engine (its scriptlet
compiled) once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger.log import Append, Log, Tail
from ledger.topics import Topics
from scheduling.config import ConfigError, SchedulerConfig
from scheduling.engine import Engine

DEFAULT = "default"
POLICY_PARTITION = 0


class PolicyError(ValueError):
    """A policy record refused at the edge, or a request its policy refuses."""


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    version: int | None
    """The offset of the record that set it; None for the configuration the
    scheduler started with."""
    mapping: Mapping[str, Any]
    config: SchedulerConfig = field(compare=False, repr=False)
    engine: Engine = field(compare=False, repr=False)

    @property
    def label(self) -> str:
        return f"{self.name}@{'configuration' if self.version is None else self.version}"


def compile_policy(mapping: Mapping[str, Any]) -> SchedulerConfig:
    """The configuration ``mapping`` describes, or :class:`PolicyError`. A
    scriptlet travels as ``source``: a ``path`` means nothing to the other
    machines that read the log."""
    scriptlet = mapping.get("scriptlet")
    if isinstance(scriptlet, Mapping) and "path" in scriptlet:
        raise PolicyError("[scriptlet] in a policy takes source, not path")
    try:
        return SchedulerConfig.from_mapping(dict(mapping))
    except ConfigError as error:
        raise PolicyError(str(error)) from None


def _name(name: object) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 255:
        raise PolicyError("a policy name is a string of 1 to 255 characters")
    return name


def publish_policy(log: Log, topics: Topics, record: Mapping[str, Any]) -> int:
    """Validate one policy record and append it; its offset (a policy's
    version)."""
    kind = record.get("type")
    if kind == "policy_set":
        _name(record.get("name"))
        policy = record.get("policy")
        if not isinstance(policy, Mapping):
            raise PolicyError("policy_set needs a policy: the configuration's tables")
        compile_policy(policy)
    elif kind == "policy_deleted":
        if _name(record.get("name")) == DEFAULT:
            raise PolicyError("the default policy cannot be deleted; set it instead")
    elif kind == "policy_assigned":
        whose = [k for k in ("project_id", "aggregate_id") if record.get(k) is not None]
        if len(whose) != 1 or not isinstance(record[whose[0]], str) or not record[whose[0]]:
            raise PolicyError("policy_assigned needs a project_id or an aggregate_id")
        if record.get("name") is not None:
            _name(record["name"])
    else:
        raise PolicyError(f"unknown policy record type {kind!r}")
    unknown = set(record) - {"type", "name", "policy", "project_id", "aggregate_id", "ts_ms"}
    if unknown:
        raise PolicyError(f"unknown fields {sorted(unknown)}")
    key = str(record.get("name") or record.get("project_id") or record["aggregate_id"]).encode()
    value = json.dumps(dict(record), separators=(",", ":"), sort_keys=True).encode()
    (offset,) = log.append(topics.policies, [Append(POLICY_PARTITION, key, value)])
    return offset


class PolicyBook:
    """The policies and assignments as of the records folded so far."""

    def __init__(self, log: Log, topics: Topics, configured: SchedulerConfig) -> None:
        self._tail = Tail(log, topics.policies, from_start=True)
        self._configured = Policy(DEFAULT, None, {}, configured, configured.engine())
        self.policies: dict[str, Policy] = {}
        self.projects: dict[str, str] = {}
        self.aggregates: dict[str, str] = {}
        self.refresh()

    def refresh(self) -> int:
        """Fold the records appended since the last call; how many."""
        folded = 0
        for record in self._tail.records():
            self._fold(record.offset, json.loads(record.value))
            folded += 1
        return folded

    def _fold(self, offset: int, record: dict[str, Any]) -> None:
        kind = record["type"]
        if kind == "policy_set":
            try:
                config = compile_policy(record["policy"])
            except PolicyError:
                return  # refused at the edge; a record that slipped past changes nothing
            name = record["name"]
            self.policies[name] = Policy(name, offset, record["policy"], config, config.engine())
        elif kind == "policy_deleted":
            self.policies.pop(record["name"], None)
        elif kind == "policy_assigned":
            assigned, whose = (
                (self.projects, record["project_id"])
                if record.get("project_id") is not None
                else (self.aggregates, record["aggregate_id"])
            )
            if record.get("name") is None:
                assigned.pop(whose, None)
            else:
                assigned[whose] = record["name"]

    def default(self) -> Policy:
        return self.policies.get(DEFAULT, self._configured)

    def for_request(
        self, project_id: str, asked: str | None = None, aggregates: Sequence[str] = ()
    ) -> Policy:
        """The policy that places a request of ``project_id`` that asked for
        ``asked`` (None: whichever applies), confined to ``aggregates`` (its
        availability zone's); :class:`PolicyError` if it asked for one it
        may not use, or one that does not exist."""
        whose, assigned = f"project {project_id!r}", self.projects.get(project_id)
        if assigned is None:
            chosen = sorted(a for a in aggregates if a in self.aggregates)
            if chosen:
                whose, assigned = f"aggregate {chosen[0]!r}", self.aggregates[chosen[0]]
        assigned = assigned or DEFAULT
        if asked is not None and asked != assigned:
            raise PolicyError(f"policy {asked!r} is not the one {whose} may use ({assigned!r})")
        if assigned == DEFAULT:
            return self.default()
        policy = self.policies.get(assigned)
        if policy is None:
            raise PolicyError(f"{whose} is assigned policy {assigned!r}, not set")
        return policy
