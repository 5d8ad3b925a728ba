"""The explicit registry of filters and weighers, by their Nova names, and
the operator's own, by import path.

A name of the form ``package.module:ClassName`` is an operator's plug-in
(Nova's custom filters and weighers, oVirt's external policy units): the
class is imported when the configuration loads and must subclass the port it
plugs into. Like the built-in ones it should read only the snapshot and the
request: no clock, no randomness, no I/O, so the same inputs place the same.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from scheduling.filters.aggregate_image_properties import AggregateImagePropertiesIsolation
from scheduling.filters.aggregate_instance_extra_specs import AggregateInstanceExtraSpecsFilter
from scheduling.filters.all_hosts import AllHostsFilter
from scheduling.filters.availability_zone import AvailabilityZoneFilter
from scheduling.filters.base import HostFilter
from scheduling.filters.cidr_affinity import SimpleCIDRAffinityFilter
from scheduling.filters.compute import ComputeFilter
from scheduling.filters.compute_capabilities import ComputeCapabilitiesFilter
from scheduling.filters.different_host import DifferentHostFilter
from scheduling.filters.image_properties import ImagePropertiesFilter
from scheduling.filters.image_type import ImageTypeSupportFilter
from scheduling.filters.io_ops import IoOpsFilter
from scheduling.filters.isolated_aggregates import IsolatedAggregatesFilter
from scheduling.filters.isolated_hosts import IsolatedHostsFilter
from scheduling.filters.json_filter import JsonFilter
from scheduling.filters.metrics import MetricsFilter
from scheduling.filters.multi_tenancy import AggregateMultiTenancyIsolation
from scheduling.filters.num_instances import NumInstancesFilter
from scheduling.filters.numa_topology import NUMATopologyFilter
from scheduling.filters.pci_passthrough import PciPassthroughFilter
from scheduling.filters.project_restriction import ProjectRestrictionFilter
from scheduling.filters.resources import ResourceFilter
from scheduling.filters.retry import RetryFilter
from scheduling.filters.same_host import SameHostFilter
from scheduling.filters.server_group import (
    ServerGroupAffinityFilter,
    ServerGroupAntiAffinityFilter,
)
from scheduling.filters.tags import TagRequirementsFilter
from scheduling.filters.traits import TraitsFilter
from scheduling.filters.type_affinity import AggregateTypeAffinityFilter
from scheduling.weighers.affinity import (
    ServerGroupSoftAffinityWeigher,
    ServerGroupSoftAntiAffinityWeigher,
)
from scheduling.weighers.base import Weigher
from scheduling.weighers.build_failure import BuildFailureWeigher
from scheduling.weighers.cpu import CPUWeigher
from scheduling.weighers.cross_cell import CrossCellWeigher
from scheduling.weighers.disk import DiskWeigher
from scheduling.weighers.hypervisor_version import HypervisorVersionWeigher
from scheduling.weighers.io_ops import IoOpsWeigher
from scheduling.weighers.metrics import MetricsWeigher
from scheduling.weighers.num_instances import NumInstancesWeigher
from scheduling.weighers.pci import PCIWeigher
from scheduling.weighers.ram import RAMWeigher
from scheduling.weighers.tag_affinity import TagAffinityWeigher

FILTERS: dict[str, type[HostFilter]] = {
    cls.name: cls
    for cls in (
        AggregateImagePropertiesIsolation,
        AggregateInstanceExtraSpecsFilter,
        AggregateMultiTenancyIsolation,
        AllHostsFilter,
        AggregateTypeAffinityFilter,
        AvailabilityZoneFilter,
        ComputeCapabilitiesFilter,
        ComputeFilter,
        DifferentHostFilter,
        ImagePropertiesFilter,
        ImageTypeSupportFilter,
        IoOpsFilter,
        IsolatedAggregatesFilter,
        IsolatedHostsFilter,
        JsonFilter,
        MetricsFilter,
        NumInstancesFilter,
        NUMATopologyFilter,
        PciPassthroughFilter,
        ProjectRestrictionFilter,
        ResourceFilter,
        RetryFilter,
        SameHostFilter,
        ServerGroupAffinityFilter,
        ServerGroupAntiAffinityFilter,
        SimpleCIDRAffinityFilter,
        TagRequirementsFilter,
        TraitsFilter,
    )
}

DEFAULT_FILTERS: tuple[str, ...] = (
    "RetryFilter",
    "ComputeFilter",
    "ResourceFilter",
    "AvailabilityZoneFilter",
    "TraitsFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "TagRequirementsFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
    "SameHostFilter",
    "DifferentHostFilter",
)
"""Nova's defaults (ComputeFilter, AvailabilityZoneFilter,
ComputeCapabilitiesFilter, ImagePropertiesFilter, the server-group filters),
with the resource fit, the traits, the Retry filter and Berth's hard tag
rules."""

WEIGHERS: dict[str, type[Weigher]] = {
    cls.name: cls
    for cls in (
        BuildFailureWeigher,
        CPUWeigher,
        CrossCellWeigher,
        DiskWeigher,
        HypervisorVersionWeigher,
        IoOpsWeigher,
        MetricsWeigher,
        NumInstancesWeigher,
        PCIWeigher,
        RAMWeigher,
        ServerGroupSoftAffinityWeigher,
        ServerGroupSoftAntiAffinityWeigher,
        TagAffinityWeigher,
    )
}

DEFAULT_WEIGHERS: dict[str, float] = {
    "RAMWeigher": 1.0,
    "CPUWeigher": 1.0,
    "DiskWeigher": 1.0,
    "IoOpsWeigher": -1.0,
    "ServerGroupSoftAffinityWeigher": 1.0,
    "ServerGroupSoftAntiAffinityWeigher": 1.0,
    "BuildFailureWeigher": 1_000_000.0,
    "HypervisorVersionWeigher": 1.0,
    "TagAffinityWeigher": 1.0,
}
"""Nova's default multipliers (MetricsWeigher needs a weight_setting, and
NumInstancesWeigher is off by default, so neither is in), plus Berth's tag
affinity."""


_T = TypeVar("_T")


def resolve(
    name: str,
    known: Mapping[str, type[_T]],
    port: type[Any],
    what: str,
    also: Sequence[str] = (),
) -> type[_T]:
    """The class ``name`` stands for: one of ``known``, or a plug-in's
    ``module:Class`` that subclasses ``port``. ValueError says why not, and
    lists the names ``also`` accepted by the caller first."""
    cls = known.get(name)
    if cls is not None:
        return cls
    module_name, colon, class_name = name.partition(":")
    if not colon:
        names = ", ".join([*also, *sorted(known)])
        raise ValueError(
            f"unknown {what} {name!r}; known: {names}, or a plug-in's package.module:ClassName"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"{what} {name!r}: cannot import {module_name}: {error}") from None
    found = getattr(module, class_name, None)
    if not (isinstance(found, type) and issubclass(found, port)):
        got = "nothing" if found is None else repr(found)
        raise ValueError(
            f"{what} {name!r}: {module_name}.{class_name} is {got}, not a {port.__name__}"
        )
    plugged: type[_T] = found
    return plugged


def describe(cls: type[Any]) -> dict[str, Any]:
    """A unit as oVirt's ``/schedulingpolicyunits`` lists one: its name, what
    it does (its docstring's first paragraph) and the options its
    constructor takes, each with its default."""
    options: dict[str, Any] = {}
    for parameter in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        given = parameter.default is not parameter.empty
        default = parameter.default if given else None
        options[parameter.name] = {
            "required": not given,
            "default": default if isinstance(default, str | int | float | bool | None) else None,
        }
    summary = (inspect.getdoc(cls) or "").split("\n\n", 1)[0].replace("\n", " ")
    return {"name": getattr(cls, "name", cls.__name__), "description": summary, "options": options}


def catalogue(plugins: Sequence[str] = ()) -> dict[str, list[dict[str, Any]]]:
    """Every built-in filter and weigher, and the operator's plug-ins named
    in ``plugins`` (``module:Class``) that load, each described."""
    found: dict[str, list[dict[str, Any]]] = {
        "filters": [describe(FILTERS[n]) for n in sorted(FILTERS)],
        "weighers": [describe(WEIGHERS[n]) for n in sorted(WEIGHERS)],
        "plugins": [],
    }
    for name in sorted(set(plugins)):
        for known, port, what in ((FILTERS, HostFilter, "filter"), (WEIGHERS, Weigher, "weigher")):
            try:
                cls = resolve(name, known, port, what)
            except ValueError:
                continue
            found["plugins"].append({**describe(cls), "name": name, "kind": what})
            break
    return found
