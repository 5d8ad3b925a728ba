"""Berth's own project restriction filter (not a Nova filter).

Providers, and aggregates of providers, can be restricted to some projects,
in the spirit of LXD's project restrictions: metadata ``allowed_projects``
lists project ids, ``allowed_member_groups`` names member groups, each
comma separated. A member group stands for the project ids the filter was
configured with for that name.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

from scheduling.filters.base import Context, HostFilter, frozen
from scheduling.model import Aggregate, Provider, Request

PROJECTS = "allowed_projects"
MEMBER_GROUPS = "allowed_member_groups"


class ProjectRestrictionFilter(HostFilter):
    """Every restriction on a provider must admit the request's project.

    The provider's own metadata and each of its aggregates' metadata is one
    restriction when it carries either key; its allowed set is the listed
    projects plus the projects of the listed member groups. Restrictions
    narrow: a provider restricted by itself and by two aggregates only takes
    projects all three admit (unlike AggregateMultiTenancyIsolation, which
    pools its aggregates' lists). A member group missing from
    ``member_groups`` admits nobody, and a request without a project id
    passes unrestricted providers only.
    """

    name = "ProjectRestrictionFilter"
    cost = 3
    static = True

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return (frozen(provider.metadata), provider.aggregates)

    def __init__(self, member_groups: Mapping[str, Iterable[str]] | None = None) -> None:
        self.member_groups: dict[str, frozenset[str]] = {
            name: frozenset(projects) for name, projects in (member_groups or {}).items()
        }

    def request_key(self, request: Request) -> Hashable:
        return request.project_id

    def reject(self, ctx: Context, row: int) -> str | None:
        project = ctx.request.project_id
        provider = ctx.snapshot.providers[row]
        carriers = [("provider metadata", provider.metadata)] + [
            (f"aggregate {a.name}", a.metadata) for a in ctx.snapshot.aggregates_of(row)
        ]
        for where, metadata in carriers:
            if PROJECTS not in metadata and MEMBER_GROUPS not in metadata:
                continue
            if project not in self._allowed(metadata):
                return f"project {project!r} is not allowed by {where}"
        return None

    def _allowed(self, metadata: Mapping[str, str]) -> set[str]:
        allowed = set(_items(metadata.get(PROJECTS, "")))
        for group in _items(metadata.get(MEMBER_GROUPS, "")):
            allowed.update(self.member_groups.get(group, ()))
        allowed.discard("")
        return allowed


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]
