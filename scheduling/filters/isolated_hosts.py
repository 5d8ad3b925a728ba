"""Nova's IsolatedHostsFilter: reserve some hosts for some images."""

from __future__ import annotations

from scheduling.filters.base import Context, HostFilter


class IsolatedHostsFilter(HostFilter):
    """Isolated images run only on isolated hosts; with
    ``restrict_isolated_hosts_to_isolated_images`` (the default) isolated hosts
    also run nothing else.

    A provider is isolated when ``provider.host`` is in ``isolated_hosts``; the
    image is ``request.image_properties["image_id"]``, and a request without
    one (a volume-backed server) counts as a non-isolated image, so with the
    restriction on it is kept off isolated hosts.

    ====================  ==============  ==================
    restrict = True       isolated image  other image / none
    ====================  ==============  ==================
    isolated host         pass            reject
    other host            reject          pass
    ====================  ==============  ==================

    With the restriction off, only "isolated image on other host" is rejected.
    As in Nova, an empty ``isolated_images`` still applies the restriction to
    ``isolated_hosts``, and an empty ``isolated_hosts`` with isolated images
    leaves those images nowhere to run.
    """

    name = "IsolatedHostsFilter"
    cost = 1

    def __init__(
        self,
        isolated_hosts: frozenset[str],
        isolated_images: frozenset[str],
        restrict_isolated_hosts_to_isolated_images: bool = True,
    ) -> None:
        self.isolated_hosts = frozenset(isolated_hosts)
        self.isolated_images = frozenset(isolated_images)
        self.restrict = restrict_isolated_hosts_to_isolated_images

    def reject(self, ctx: Context, row: int) -> str | None:
        host = ctx.snapshot.providers[row].host
        host_isolated = host in self.isolated_hosts
        image = ctx.request.image_properties.get("image_id")
        image_isolated = image is not None and image in self.isolated_images
        if image_isolated and not host_isolated:
            return f"image {image} is isolated and host {host!r} is not an isolated host"
        if host_isolated and not image_isolated and self.restrict:
            shown = "no image" if image is None else f"image {image}"
            return f"isolated host {host!r} takes isolated images only, not {shown}"
        return None
