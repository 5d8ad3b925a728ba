"""The rest of the Nova seed's list (issue 31 part 5), as scenario tables:
AggregateImagePropertiesIsolation with its namespace and separator,
MetricsFilter, AllHostsFilter, ComputeCapabilitiesFilter on Nova's host
state, and the maxphysaddr bits in ImagePropertiesFilter and
ComputeCapabilitiesFilter; and a request naming host state is placed by a
full scan in bounded mode, so usage counts as it is."""

from __future__ import annotations

import numpy as np
import pytest

from scheduling.engine import Bounded, Engine
from scheduling.filters.aggregate_image_properties import AggregateImagePropertiesIsolation
from scheduling.filters.all_hosts import AllHostsFilter
from scheduling.filters.compute_capabilities import ComputeCapabilitiesFilter
from scheduling.filters.image_properties import ImagePropertiesFilter
from scheduling.filters.metrics import MetricsFilter
from scheduling.filters.resources import ResourceFilter
from scheduling.model import Provider, Request, Snapshot
from tests.test_filters_host import Case, ask, check, host, ids

AIPI = AggregateImagePropertiesIsolation()
NAMESPACED = AggregateImagePropertiesIsolation(namespace="os", separator="_")
CPU46 = {"cpu_info": {"maxphysaddr": {"bits": 46}}}
CASES = [
    Case("not in an aggregate", AIPI, host(), ask(image_properties={"os_distro": "windows"})),
    Case(
        "aggregate allows it",
        AIPI,
        host(),
        ask(image_properties={"os_distro": "windows"}),
        aggregates={"win": {"os_distro": "linux, windows"}},
    ),
    Case(
        "aggregate refuses it",
        AIPI,
        host(),
        ask(image_properties={"os_distro": "windows"}),
        aggregates={"lin": {"os_distro": "linux"}},
        expected="image os_distro='windows', aggregate lin allows 'linux'",
    ),
    Case(
        "image without the property",
        AIPI,
        host(),
        ask(image_properties={"hw_architecture": "x86_64"}),
        aggregates={"lin": {"os_distro": "linux"}},
    ),
    Case(
        "outside the namespace: not read",
        NAMESPACED,
        host(),
        ask(image_properties={"hw_architecture": "arm"}),
        aggregates={"x": {"hw_architecture": "x86_64"}},
    ),
    Case(
        "inside the namespace",
        NAMESPACED,
        host(),
        ask(image_properties={"os_distro": "windows"}),
        aggregates={"lin": {"os_distro": "linux"}},
        expected="image os_distro='windows', aggregate lin allows 'linux'",
    ),
    Case("all hosts", AllHostsFilter(), host(state="disabled")),
    Case(
        "every metric reported",
        MetricsFilter("cpu.idle=1.0, io.wait=-2"),
        host(metrics={"cpu.idle": 1.0, "io.wait": 0.0}),
    ),
    Case(
        "a metric missing",
        MetricsFilter("cpu.idle=1.0, io.wait=-2"),
        host(metrics={"cpu.idle": 1.0}),
        expected="does not report io.wait",
    ),
    Case(
        "host state, unscoped",
        ComputeCapabilitiesFilter(),
        host(host="compute-07"),
        ask(extra_specs={"host": "<in> compute", "num_io_ops": "<= 0"}),
    ),
    Case(
        "host state, scoped",
        ComputeCapabilitiesFilter(),
        host(num_io_ops=6),
        ask(extra_specs={"capabilities:num_io_ops": "<= 5"}),
        expected="capabilities:num_io_ops is '6', wanted '<= 5'",
    ),
    Case(
        "flavor maxphysaddr fits",
        ComputeCapabilitiesFilter(),
        host(capabilities=CPU46),
        ask(extra_specs={"hw:maxphysaddr_bits": "46"}),
    ),
    Case(
        "flavor maxphysaddr too many",
        ComputeCapabilitiesFilter(),
        host(capabilities=CPU46),
        ask(extra_specs={"hw:maxphysaddr_bits": "48"}),
        expected="hw:maxphysaddr_bits 48: the host CPU has 46 physical address bits",
    ),
    Case(
        "image maxphysaddr unreported",
        ImagePropertiesFilter(),
        host(),
        ask(image_properties={"hw_maxphysaddr_bits": "40"}),
        expected="hw_maxphysaddr_bits 40: the host reports no cpu_info maxphysaddr bits",
    ),
    Case(
        "image maxphysaddr not a number",
        ImagePropertiesFilter(),
        host(capabilities=CPU46),
        ask(image_properties={"hw_maxphysaddr_bits": "many"}),
        expected="hw_maxphysaddr_bits 'many' is not a number of bits",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_the_rest_of_the_seed_list(case: Case) -> None:
    check(case)


def test_host_state_counts_usage_even_in_bounded_mode() -> None:
    """Providers alike in everything the static filters read, but for their
    free memory: bounded placement would judge them as one group, so a
    request naming free_ram_mb is left to a full scan."""
    providers = [Provider(f"p{i}", host=f"p{i}") for i in range(40)]
    inventories = {
        p.provider_id: {"MEMORY_MB": {"total": 8192, "used": 0 if i == 37 else 7168}}
        for i, p in enumerate(providers)
    }
    snapshot = Snapshot.build(providers, inventories)
    engine = Engine(
        [ResourceFilter(), ComputeCapabilitiesFilter()],
        bounded=Bounded("bounded", candidates=4),
    )
    request = Request("r", {"MEMORY_MB": 512}, extra_specs={"free_ram_mb": ">= 4096"})
    assert engine.place(snapshot, request).providers == ("p37",)
    rows = engine.feasible(snapshot, request)
    assert np.array_equal(rows, [37])
