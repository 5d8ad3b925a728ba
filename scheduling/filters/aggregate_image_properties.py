"""Nova's AggregateImagePropertiesIsolation: a provider in an aggregate whose
metadata names an image property takes only images whose value of it is
one of the aggregate's (comma separated, as Nova splits metadata). An image
without the property, and a provider in no such aggregate, pass.

``namespace`` and ``separator`` are Nova's
``aggregate_image_properties_isolation_namespace`` and ``_separator``: with
a namespace, only the metadata keys ``NAMESPACE`` + ``SEPARATOR`` + ... are
read (the whole key is matched against the image's property names)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Aggregate, Provider, Request


class AggregateImagePropertiesIsolation(HostFilter):
    name = "AggregateImagePropertiesIsolation"
    cost = 3
    static = True

    def __init__(self, namespace: str | None = None, separator: str = ".") -> None:
        self.prefix = None if not namespace else namespace + separator

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return tuple(
            sorted(
                (name, tuple(sorted(aggregates[name].metadata.items())))
                for name in provider.aggregates
                if name in aggregates
            )
        )

    def applies(self, request: Request) -> bool:
        return bool(request.image_properties)

    def reject(self, ctx: Context, row: int) -> str | None:
        image = ctx.request.image_properties
        for aggregate in ctx.snapshot.aggregates_of(row):
            for key, values in sorted(aggregate.metadata.items()):
                if self.prefix is not None and not key.startswith(self.prefix):
                    continue
                wanted = image.get(key)
                if wanted is None:
                    continue
                allowed = [v.strip() for v in values.split(",")]
                if wanted not in allowed:
                    return f"image {key}={wanted!r}, aggregate {aggregate.name} allows {values!r}"
        return None
