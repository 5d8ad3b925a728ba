"""Nova's image type support prefilter (``query_placement_for_image_type_support``):
only providers that can boot the image's disk format.

A provider that can boot ``qcow2`` images reports the trait
``COMPUTE_IMAGE_TYPE_QCOW2``; a request whose image properties give a
``disk_format`` passes only on providers with that format's trait (a ceph
backed host without ``COMPUTE_IMAGE_TYPE_QCOW2`` is spared a costly
conversion). A request without one is not restricted.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import numpy as np

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Aggregate, BoolArray, IntArray, Provider, Request


def image_type_trait(request: Request) -> str | None:
    disk_format = request.image_properties.get("disk_format")
    return f"COMPUTE_IMAGE_TYPE_{disk_format.upper()}" if disk_format else None


class ImageTypeSupportFilter(HostFilter):
    name = "ImageTypeSupportFilter"
    cost = 2
    static = True

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return provider.traits

    def __init__(self) -> None:
        # which providers have a trait depends on the snapshot's records only
        self._having: tuple[tuple[Provider, ...], str, BoolArray] | None = None

    def applies(self, request: Request) -> bool:
        return image_type_trait(request) is not None

    def reject(self, ctx: Context, row: int) -> str | None:
        trait = image_type_trait(ctx.request)
        if trait is None or trait in ctx.snapshot.providers[row].traits:
            return None
        disk_format = ctx.request.image_properties["disk_format"]
        return f"cannot boot {disk_format} images (no trait {trait})"

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        trait = image_type_trait(ctx.request)
        if trait is None:
            return np.ones(len(rows), dtype=np.bool_)
        providers = ctx.snapshot.providers
        known = self._having
        if known is None or known[0] is not providers or known[1] != trait:
            having = np.fromiter((trait in p.traits for p in providers), np.bool_, len(providers))
            known = self._having = (providers, trait, having)
        keep: BoolArray = known[2][rows]
        return keep
