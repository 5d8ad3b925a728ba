"""Who may do what: Placement's policy, by its rule names and defaults,
enforced by oslo.policy (the evaluator every OpenStack service uses, so an
operator's policy file means here what it means to Placement).

Each route and method is one of Placement's rules (``placement:...``);
their defaults are Placement's: ``admin_or_service_api`` for almost all,
``service_api`` for the reshaper, and for ``GET /usages`` an admin, a
service or a reader of the project asked about. Until ``secure`` (oslo's
``enforce_new_defaults``), each base rule also passes its deprecated
default, ``role:admin``: Placement's legacy policy. A policy file in
oslo.policy's format (YAML or JSON) overrides any rule."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from oslo_config import cfg
from oslo_context import context as oslo_context
from oslo_policy import policy as oslo_policy

from berth.placement_api.errors import PlacementError
from berth.placement_api.http import Caller

_ADMIN = oslo_policy.DeprecatedRule(
    name="rule:admin_api",
    check_str="role:admin",
    deprecated_reason="Placement's defaults with roles and scopes replace role:admin alone.",
    deprecated_since="W",
)
_ADMIN_OR_SERVICE = "rule:admin_or_service_api"

_BASE = [
    oslo_policy.RuleDefault("admin_api", "role:admin", scope_types=["project"]),
    oslo_policy.RuleDefault(
        "service_api", "role:service", scope_types=["project"], deprecated_rule=_ADMIN
    ),
    oslo_policy.RuleDefault(
        "admin_or_service_api",
        "role:admin or role:service",
        scope_types=["project"],
        deprecated_rule=_ADMIN,
    ),
    oslo_policy.RuleDefault(
        "project_reader_api",
        "role:reader and project_id:%(project_id)s",
        deprecated_rule=_ADMIN,
    ),
    oslo_policy.RuleDefault(
        "admin_or_project_reader_or_service_api",
        "role:admin or rule:project_reader_api or role:service",
        scope_types=["project"],
        deprecated_rule=_ADMIN,
    ),
]

_P = "placement:"
RULES: dict[tuple[str, str], str] = {
    ("GET", "/resource_providers"): _P + "resource_providers:list",
    ("POST", "/resource_providers"): _P + "resource_providers:create",
    ("GET", "/resource_providers/{uuid}"): _P + "resource_providers:show",
    ("PUT", "/resource_providers/{uuid}"): _P + "resource_providers:update",
    ("DELETE", "/resource_providers/{uuid}"): _P + "resource_providers:delete",
    ("GET", "/resource_classes"): _P + "resource_classes:list",
    ("POST", "/resource_classes"): _P + "resource_classes:create",
    ("GET", "/resource_classes/{name}"): _P + "resource_classes:show",
    ("PUT", "/resource_classes/{name}"): _P + "resource_classes:update",
    ("DELETE", "/resource_classes/{name}"): _P + "resource_classes:delete",
    ("GET", "/resource_providers/{uuid}/inventories"): _P + "resource_providers:inventories:list",
    ("POST", "/resource_providers/{uuid}/inventories"): _P
    + "resource_providers:inventories:create",
    ("PUT", "/resource_providers/{uuid}/inventories"): _P + "resource_providers:inventories:update",
    ("DELETE", "/resource_providers/{uuid}/inventories"): _P
    + "resource_providers:inventories:delete",
    ("GET", "/resource_providers/{uuid}/inventories/{rc}"): _P
    + "resource_providers:inventories:show",
    ("PUT", "/resource_providers/{uuid}/inventories/{rc}"): _P
    + "resource_providers:inventories:update",
    ("DELETE", "/resource_providers/{uuid}/inventories/{rc}"): _P
    + "resource_providers:inventories:delete",
    ("GET", "/resource_providers/{uuid}/aggregates"): _P + "resource_providers:aggregates:list",
    ("PUT", "/resource_providers/{uuid}/aggregates"): _P + "resource_providers:aggregates:update",
    ("GET", "/resource_providers/{uuid}/usages"): _P + "resource_providers:usages",
    ("GET", "/usages"): _P + "usages",
    ("GET", "/traits"): _P + "traits:list",
    ("GET", "/traits/{name}"): _P + "traits:show",
    ("PUT", "/traits/{name}"): _P + "traits:update",
    ("DELETE", "/traits/{name}"): _P + "traits:delete",
    ("GET", "/resource_providers/{uuid}/traits"): _P + "resource_providers:traits:list",
    ("PUT", "/resource_providers/{uuid}/traits"): _P + "resource_providers:traits:update",
    ("DELETE", "/resource_providers/{uuid}/traits"): _P + "resource_providers:traits:delete",
    ("POST", "/allocations"): _P + "allocations:manage",
    ("GET", "/allocations/{consumer_uuid}"): _P + "allocations:list",
    ("PUT", "/allocations/{consumer_uuid}"): _P + "allocations:update",
    ("DELETE", "/allocations/{consumer_uuid}"): _P + "allocations:delete",
    ("GET", "/resource_providers/{uuid}/allocations"): _P + "resource_providers:allocations:list",
    ("GET", "/allocation_candidates"): _P + "allocation_candidates:list",
    ("POST", "/reshaper"): _P + "reshaper:reshape",
}
"""Placement's rule for each route and method."""

_DEFAULTS = {
    _P + "usages": "rule:admin_or_project_reader_or_service_api",
    _P + "reshaper:reshape": "rule:service_api",
}


def rule_defaults() -> list[oslo_policy.RuleDefault]:
    """Placement's rules with their defaults, the base rules first."""
    named = [
        oslo_policy.RuleDefault(
            name, _DEFAULTS.get(name, _ADMIN_OR_SERVICE), scope_types=["project"]
        )
        for name in dict.fromkeys(RULES.values())
    ]
    return [*_BASE, *named]


_MOST_VERDICTS = 4096
"""Verdicts kept at most (callers by target): then they are worked out again."""


class Policy:
    """oslo.policy's enforcer with Placement's rules, for one server."""

    def __init__(self, secure: bool = False, policy_file: Path | None = None) -> None:
        conf = cfg.ConfigOpts()
        conf([], project="berth-placement", default_config_files=[])
        self.enforcer = oslo_policy.Enforcer(
            # absolute: oslo.policy looks a relative name up in its config dirs
            conf,
            policy_file=str(policy_file.resolve()) if policy_file else None,
        )
        conf.set_override("enforce_new_defaults", secure, group="oslo_policy")
        self.enforcer.suppress_default_change_warnings = True
        self.enforcer.suppress_deprecation_warnings = True
        self.enforcer.register_defaults(rule_defaults())
        self.enforcer.load_rules()
        self._verdicts: dict[tuple[str, Caller, tuple[tuple[str, str | None], ...]], bool] | None
        self._verdicts = None
        if policy_file is None:
            # the defaults alone, loaded once: otherwise every request looks
            # for a policy file and policy.d in oslo.config's directories
            # again (a tenth of a write's CPU); a policy file given is
            # reloaded when it changes, as Placement reloads it. Rules that
            # never change give a caller the same verdict on the same
            # target every time: each is worked out once
            self.enforcer.use_conf = False
            self._verdicts = {}

    def authorize(self, rule: str, caller: Caller, target: Mapping[str, str | None]) -> None:
        """403 unless ``caller`` passes ``rule`` on ``target``."""
        verdicts = self._verdicts
        if verdicts is None:
            allowed = self._allowed(rule, caller, target)
        else:
            key = (rule, caller, tuple(sorted(target.items())))
            found = verdicts.get(key)
            if found is None:
                if len(verdicts) >= _MOST_VERDICTS:
                    verdicts.clear()
                found = verdicts[key] = self._allowed(rule, caller, target)
            allowed = found
        if not allowed:
            raise PlacementError(403, f"Policy does not allow {rule} to be performed.")

    def _allowed(self, rule: str, caller: Caller, target: Mapping[str, str | None]) -> bool:
        credentials = oslo_context.RequestContext(
            user_id=caller.user,
            project_id=caller.project,
            roles=sorted(caller.roles),
            system_scope=caller.system_scope,
        )
        try:
            return bool(self.enforcer.authorize(rule, dict(target), credentials, do_raise=False))
        except oslo_policy.InvalidScope:
            return False
