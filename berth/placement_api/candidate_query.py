"""``GET /allocation_candidates``'s query read as Placement reads it: the
request groups (the unsuffixed one, and from 1.25 the granular ones whose
keys end in a suffix: a number, from 1.33 up to 64 of ``[a-zA-Z0-9_-]``)
and the parameters of the request as a whole (``limit``, ``group_policy``,
``root_required`` from 1.35, ``same_subtree`` from 1.36), each checked in
Placement's order and refused with its words."""

from __future__ import annotations

import re
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

from berth.placement_api.errors import (
    ILLEGAL_DUPLICATE_QUERYPARAM,
    QUERYPARAM_BAD_VALUE,
    QUERYPARAM_MISSING_VALUE,
    bad_request,
)
from berth.placement_api.filters import Wanted, parse_member_of, parse_required, parse_resources
from berth.placement_api.http import Req

_GROUP = r"[1-9][0-9]*"
_GROUP_1_33 = r"[a-zA-Z0-9_-]{1,64}"
_PREFIXES = "resources|required|member_of|in_tree"


@dataclass
class Group:
    """One request group: ``suffix`` '' is the unsuffixed group, whose
    resources may come from several providers of a tree and sharing
    providers; a granular group's all come from one provider."""

    suffix: str
    wanted: Wanted = field(default_factory=Wanted)
    in_tree: str | None = None

    @property
    def same_provider(self) -> bool:
        return self.suffix != ""


@dataclass
class Query:
    groups: dict[str, Group]
    limit: int | None = None
    group_policy: str | None = None
    root_required: set[str] = field(default_factory=set)
    root_forbidden: set[str] = field(default_factory=set)
    same_subtrees: list[set[str]] = field(default_factory=list)


def schema(req: Req) -> dict[str, Any]:
    """The query's schema at the request's microversion, as Placement's."""
    properties: dict[str, Any] = {}
    patterns: dict[str, Any] = {}
    if req.at_least(16):
        properties["limit"] = {"type": "string", "pattern": "^[1-9][0-9]*$"}
    if not req.at_least(25):
        properties["resources"] = {"type": "string"}
        if req.at_least(17):
            properties["required"] = {"type": "string"}
        if req.at_least(21):
            properties["member_of"] = {"type": "string"}
        return {
            "type": "object",
            "properties": properties,
            "required": ["resources"],
            "additionalProperties": False,
        }
    properties["group_policy"] = {"type": "string", "enum": ["none", "isolate"]}
    prefixes = ["resources", "required", "member_of"]
    if req.at_least(31):
        prefixes.append("in_tree")
    suffix = _GROUP_1_33 if req.at_least(33) else _GROUP
    for prefix in prefixes:
        patterns[f"^{prefix}({suffix})?$"] = {"type": "string"}
    if req.at_least(35):
        properties["root_required"] = {"type": "string"}
    if req.at_least(36):
        properties["same_subtree"] = {"type": "string"}
    return {
        "type": "object",
        "properties": properties,
        "patternProperties": patterns,
        "additionalProperties": False,
    }


def parse(req: Req) -> Query:
    req.params(schema(req))
    query = Query(groups=_groups(req))
    values = req.query.get("limit")
    # the first of several, as Placement takes it (the schema checked the form)
    query.limit = int(values[0]) if values else None
    policies = req.query.get("group_policy")
    query.group_policy = policies[0] if policies else None
    _root_required(req, query)
    for value in req.query.get("same_subtree", []):
        suffixes = {part.strip() for part in value.split(",")}
        if "" in suffixes:
            raise bad_request(
                "Empty string (unsuffixed group) can not be specified in `same_subtree` ",
                QUERYPARAM_BAD_VALUE,
            )
        query.same_subtrees.append(suffixes)
    _check_groups(req, query)
    granular = [g for g in query.groups.values() if g.same_provider]
    if query.group_policy is None and len(granular) > 1:
        raise bad_request(
            'The "group_policy" parameter is required when specifying more than one '
            '"resources{N}" parameter.'
        )
    return query


def _groups(req: Req) -> dict[str, Group]:
    suffix_pattern = _GROUP_1_33 if req.at_least(33) else _GROUP
    key = re.compile(f"^({_PREFIXES})({suffix_pattern})?$")
    groups: dict[str, Group] = {}
    for name, values in req.query.items():
        found = key.match(name)
        if found is None:
            continue
        prefix, suffix = found.group(1), found.group(2) or ""
        group = groups.setdefault(suffix, Group(suffix))
        if prefix == "resources":
            group.wanted.resources = parse_resources(values[-1])
        elif prefix == "required":
            parse_required(req, values, group.wanted)
        elif prefix == "member_of":
            parse_member_of(req, values, group.wanted, suffix)
        else:
            group.in_tree = _in_tree(values[-1])
    return groups


def _in_tree(value: str) -> str:
    try:
        return str(uuidlib.UUID(value.strip()))
    except ValueError:
        raise bad_request(
            "Invalid query string parameters: Expected 'in_tree' parameter to be a format "
            f"of uuid. Got: {value}"
        ) from None


def _root_required(req: Req, query: Query) -> None:
    values = req.query.get("root_required")
    if not values:
        return
    if len(values) > 1:
        raise bad_request(
            "Query parameter 'root_required' may be specified only once.",
            ILLEGAL_DUPLICATE_QUERYPARAM,
        )
    names = [t.strip() for t in values[0].split(",")]
    if not all(names) or not all(n.lstrip("!") for n in names):
        raise bad_request(
            "Invalid query string parameters: Expected 'root_required' parameter value of "
            f"the form: HW_CPU_X86_VMX,!CUSTOM_MAGIC. Got an empty trait in: {values[0]}"
        )
    query.root_forbidden = {n.lstrip("!") for n in names if n.startswith("!")}
    query.root_required = {n for n in names if not n.startswith("!")}
    conflicts = sorted(query.root_forbidden & query.root_required)
    if conflicts:
        raise bad_request(
            "Conflicting required and forbidden traits found in root_required: "
            + ", ".join(conflicts),
            QUERYPARAM_BAD_VALUE,
        )


def _check_groups(req: Req, query: Query) -> None:
    groups = query.groups
    if req.at_least(36):
        resourceless = [s for s, g in groups.items() if not g.wanted.resources]
        if len(resourceless) == len(groups):
            raise bad_request(
                "There must be at least one resources or resources[$S] parameter.",
                QUERYPARAM_MISSING_VALUE,
            )
        in_subtrees = set().union(*query.same_subtrees)
        bad = [s for s in resourceless if s not in in_subtrees]
        if bad:
            raise bad_request(
                "Resourceless suffixed group request should be specified in `same_subtree` "
                f"query param: bad group(s) - {bad}.",
                QUERYPARAM_BAD_VALUE,
            )
        unknown = [s for s in in_subtrees if s not in groups]
        if unknown:
            raise bad_request(
                f"Real suffixes should be specified in `same_subtree`: {unknown} not found "
                f"in {list(groups)}.",
                QUERYPARAM_BAD_VALUE,
            )
    else:
        _check_orphans(groups)
    if req.at_least(22):
        conflicts = sorted(
            f"required{s}: ({', '.join(sorted(any_of))})"
            for s, g in groups.items()
            for any_of in g.wanted.required
            if any_of <= g.wanted.forbidden
        )
        if conflicts:
            raise bad_request(
                "Conflicting required and forbidden traits found in the following traits "
                f"keys: {', '.join(conflicts)}"
            )


def _check_orphans(groups: dict[str, Group]) -> None:
    orphans = [
        f"required{s}" for s, g in groups.items() if g.wanted.required and not g.wanted.resources
    ]
    if orphans:
        raise bad_request(
            "All traits parameters must be associated with resources.  Found the following "
            f"orphaned traits keys: {', '.join(orphans)}"
        )
    orphans = [
        f"member_of{s}"
        for s, g in groups.items()
        if not g.wanted.resources and (g.wanted.member_of or g.wanted.not_member_of)
    ]
    if orphans:
        raise bad_request(
            "All member_of parameters must be associated with resources. Found the following "
            f"orphaned member_of keys: {', '.join(orphans)}"
        )
    if not all(g.wanted.resources for g in groups.values()):
        raise bad_request("All request groups must specify resources.")
    if not groups:
        raise bad_request(
            "At least one request group (`resources` or `resources{$S}`) is required."
        )
