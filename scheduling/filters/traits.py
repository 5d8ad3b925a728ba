"""Required and forbidden traits, as placement checks them for Nova."""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Aggregate, Provider, Request

# "trait:NAME", or a granular group's "trait1:NAME" / "trait_foo:NAME"; a flat
# provider has to satisfy every group itself, so the suffix does not matter.
_TRAIT_SPEC = re.compile(r"trait(?:[1-9][0-9]*|_[A-Za-z0-9_-]{1,64})?:(?P<name>.+)")


def wanted_traits(request: Request) -> tuple[frozenset[str], frozenset[str]]:
    """(required, forbidden) traits from the request's fields and its
    ``trait:NAME=required|forbidden`` extra specs (other values are ignored,
    as Nova ignores them)."""
    required, forbidden = set(request.required_traits), set(request.forbidden_traits)
    for key, value in request.extra_specs.items():
        found = _TRAIT_SPEC.fullmatch(key)
        if found is None:
            continue
        if value == "required":
            required.add(found["name"])
        elif value == "forbidden":
            forbidden.add(found["name"])
    return frozenset(required), frozenset(forbidden)


class TraitsFilter(HostFilter):
    """A provider must have every required trait and none of the forbidden ones."""

    name = "TraitsFilter"
    cost = 2
    static = True

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return provider.traits

    def applies(self, request: Request) -> bool:
        if not (request.required_traits or request.forbidden_traits or request.extra_specs):
            return False  # most requests: no need to scan the extra specs
        return any(wanted_traits(request))

    def request_key(self, request: Request) -> Hashable:
        return wanted_traits(request)

    def reject(self, ctx: Context, row: int) -> str | None:
        required, forbidden = wanted_traits(ctx.request)
        traits = ctx.snapshot.providers[row].traits
        missing = sorted(required - traits)
        if missing:
            return f"missing trait {', '.join(missing)}"
        present = sorted(forbidden & traits)
        if present:
            return f"has forbidden trait {', '.join(present)}"
        return None
