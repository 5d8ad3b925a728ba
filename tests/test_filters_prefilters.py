"""Nova's prefilters as Berth filters: image type support and isolated
aggregates, on a snapshot of four providers."""

from __future__ import annotations

import numpy as np
import pytest

from scheduling.config import SchedulerConfig
from scheduling.filters.base import Context, HostFilter
from scheduling.filters.image_type import ImageTypeSupportFilter
from scheduling.filters.isolated_aggregates import IsolatedAggregatesFilter
from scheduling.model import Aggregate, Provider, Request, Snapshot

AGGREGATES = {
    "gpu": Aggregate("gpu", {"trait:CUSTOM_GPU": "required"}),
    "fast": Aggregate("fast", {"trait:CUSTOM_NVME": "required", "ssd": "true"}),
    "plain": Aggregate("plain", {"trait:CUSTOM_X": "forbidden"}),  # isolates nothing
}
PROVIDERS = (
    Provider("p0", traits=frozenset({"COMPUTE_IMAGE_TYPE_QCOW2"}), aggregates=frozenset({"gpu"})),
    Provider("p1", traits=frozenset({"COMPUTE_IMAGE_TYPE_RAW"}), aggregates=frozenset({"plain"})),
    Provider("p2", aggregates=frozenset({"gpu", "fast"})),
    Provider("p3"),
)
SNAPSHOT = Snapshot.build(
    PROVIDERS, {p.provider_id: {"VCPU": {"total": 4}} for p in PROVIDERS}, AGGREGATES
)


def verdicts(f: HostFilter, request: Request) -> list[str | None]:
    """Each provider's rejection (None: passes), checking that the mask, on
    all rows and on the last two, says the same."""
    ctx = Context.start(SNAPSHOT, request)
    reasons = [f.reject(ctx, row) for row in range(SNAPSHOT.size)]
    passes = [r is None for r in reasons]
    assert f.mask(ctx, np.arange(4, dtype=np.int64)).tolist() == passes
    assert f.mask(ctx, np.array([2, 3], dtype=np.int64)).tolist() == passes[2:]
    return reasons


QCOW2 = "cannot boot qcow2 images (no trait COMPUTE_IMAGE_TYPE_QCOW2)"


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (Request("r", {}), [None, None, None, None]),
        (Request("r", {}, image_properties={"disk_format": "qcow2"}), [None, QCOW2, QCOW2, QCOW2]),
        (
            Request("r", {}, image_properties={"disk_format": "raw"}),
            [
                "cannot boot raw images (no trait COMPUTE_IMAGE_TYPE_RAW)",
                None,
                "cannot boot raw images (no trait COMPUTE_IMAGE_TYPE_RAW)",
                "cannot boot raw images (no trait COMPUTE_IMAGE_TYPE_RAW)",
            ],
        ),
    ],
)
def test_image_type_support(request_: Request, expected: list[str | None]) -> None:
    f = ImageTypeSupportFilter()
    assert f.applies(request_) is (request_.image_properties != {})
    assert verdicts(f, request_) == expected


GPU = "aggregate gpu admits only requests requiring CUSTOM_GPU"
BOTH = "aggregate fast,gpu admits only requests requiring CUSTOM_GPU, CUSTOM_NVME"


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (
            Request("r", {}),
            [
                GPU,
                None,
                "aggregate fast,gpu admits only requests requiring CUSTOM_GPU, CUSTOM_NVME",
                None,
            ],
        ),
        (
            Request("r", {}, required_traits=frozenset({"CUSTOM_GPU"})),
            [None, None, "aggregate fast,gpu admits only requests requiring CUSTOM_NVME", None],
        ),
        (
            Request(
                "r",
                {},
                extra_specs={"trait:CUSTOM_GPU": "required", "trait:CUSTOM_NVME": "required"},
            ),
            [None, None, None, None],
        ),
        (
            Request("r", {}, image_properties={"trait:CUSTOM_GPU": "required"}),
            [None, None, "aggregate fast,gpu admits only requests requiring CUSTOM_NVME", None],
        ),
        (
            Request("r", {}, extra_specs={"trait:CUSTOM_GPU": "forbidden"}),
            [
                GPU,
                None,
                "aggregate fast,gpu admits only requests requiring CUSTOM_GPU, CUSTOM_NVME",
                None,
            ],
        ),
    ],
)
def test_isolated_aggregates(request_: Request, expected: list[str | None]) -> None:
    assert verdicts(IsolatedAggregatesFilter(), request_) == expected


def test_the_prefilters_are_named_in_the_configuration_and_explain_themselves() -> None:
    config = SchedulerConfig.from_mapping(
        {
            "filters": {
                "enabled": ["ComputeFilter", "ImageTypeSupportFilter", "IsolatedAggregatesFilter"]
            }
        }
    )
    request = Request("r", {"VCPU": 1}, image_properties={"disk_format": "qcow2"})
    placement = config.engine().place(SNAPSHOT, request, explain=True)
    # p0 boots qcow2 but is kept for GPU requests; nothing else boots qcow2
    assert not placement.placed and placement.trace is not None
    assert dict(placement.trace.counts) == {
        "ImageTypeSupportFilter": 3,
        "IsolatedAggregatesFilter": 1,
    }
    gpu = Request(
        "g", {"VCPU": 1}, image_properties={"disk_format": "qcow2", "trait:CUSTOM_GPU": "required"}
    )
    assert config.engine().place(SNAPSHOT, gpu).providers == ("p0",)
