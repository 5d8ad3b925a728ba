"""The per-provider filters other than ResourceFilter, as scenario tables: one
provider, its aggregates, a request, and the reason expected (None: passes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

from scheduling.filters.aggregate_instance_extra_specs import AggregateInstanceExtraSpecsFilter
from scheduling.filters.availability_zone import AvailabilityZoneFilter
from scheduling.filters.base import Context, HostFilter
from scheduling.filters.compute import ComputeFilter
from scheduling.filters.compute_capabilities import ComputeCapabilitiesFilter
from scheduling.filters.image_properties import (
    ImagePropertiesFilter,
    int_to_version,
    parse_requirement,
    satisfies,
    version_to_int,
)
from scheduling.filters.io_ops import IoOpsFilter
from scheduling.filters.num_instances import NumInstancesFilter
from scheduling.filters.tags import TagRequirementsFilter
from scheduling.filters.traits import TraitsFilter
from scheduling.model import Aggregate, Provider, Request, Snapshot, TagRules


@dataclass(frozen=True)
class Case:
    id: str
    filter: HostFilter
    provider: Provider
    request: Request = field(default_factory=lambda: Request("r", {}))
    aggregates: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Aggregates by name; the provider is in all of them."""
    picked: Sequence[int] = ()
    """Rows earlier picks of the request went to (0 is the provider, 1 another)."""
    expected: str | None = None


def host(**kwargs: Any) -> Provider:
    return Provider("p", **kwargs)


def ask(**kwargs: Any) -> Request:
    return Request("r", {}, **kwargs)


def run(case: Case) -> tuple[str | None, bool]:
    aggregates = {name: Aggregate(name, dict(meta)) for name, meta in case.aggregates.items()}
    member = replace(case.provider, aggregates=frozenset(aggregates))
    snap = Snapshot.build([member, Provider("other")], {}, aggregates)
    ctx = Context.start(snap, case.request)
    ctx.picked.extend(case.picked)
    return case.filter.reject(ctx, 0), bool(case.filter.mask(ctx, np.array([0]))[0])


def check(case: Case) -> None:
    reason, passed = run(case)
    assert reason == case.expected
    assert passed is (case.expected is None)


def ids(cases: Sequence[Case]) -> list[str]:
    return [c.id for c in cases]


COMPUTE = ComputeFilter()
COMPUTE_CASES = [
    Case("enabled", COMPUTE, host()),
    Case("disabled", COMPUTE, host(state="disabled"), expected="disabled"),
    Case("offline", COMPUTE, host(state="offline"), expected="offline"),
    Case("evacuating", COMPUTE, host(state="evacuating"), expected="evacuating"),
    Case("unknown state", COMPUTE, host(state="draining"), expected="draining"),
    Case("empty state", COMPUTE, host(state=""), expected="no state"),
    Case("case matters", COMPUTE, host(state="Enabled"), expected="Enabled"),
]


@pytest.mark.parametrize("case", COMPUTE_CASES, ids=ids(COMPUTE_CASES))
def test_compute(case: Case) -> None:
    check(case)


AZ = AvailabilityZoneFilter()
AZ_NO_DEFAULT = AvailabilityZoneFilter(default_zone=None)
AZ_CASES = [
    Case("no zone asked", AZ, host(availability_zone="az1")),
    Case("empty zone asked", AZ, host(availability_zone="az1"), ask(availability_zone="")),
    Case("provider zone", AZ, host(availability_zone="az1"), ask(availability_zone="az1")),
    Case(
        "other provider zone",
        AZ,
        host(availability_zone="az1"),
        ask(availability_zone="az2"),
        expected="zone 'az2' wanted, provider is in az1",
    ),
    Case(
        "aggregate zone",
        AZ,
        host(),
        ask(availability_zone="az2"),
        {"agg": {"availability_zone": "az2"}},
    ),
    Case(
        "comma separated aggregate zones",
        AZ,
        host(),
        ask(availability_zone="az3"),
        {"agg": {"availability_zone": "az2, az3"}},
    ),
    Case(
        "several aggregates, one matches",
        AZ,
        host(),
        ask(availability_zone="az3"),
        {"a": {"availability_zone": "az2"}, "b": {"availability_zone": "az3"}},
    ),
    Case(
        "provider zone joins aggregate zones",
        AZ,
        host(availability_zone="az1"),
        ask(availability_zone="az1"),
        {"agg": {"availability_zone": "az2"}},
    ),
    Case("no zone: in the default", AZ, host(), ask(availability_zone="nova")),
    Case(
        "no zone: only the default",
        AZ,
        host(),
        ask(availability_zone="az1"),
        expected="zone 'az1' wanted, provider is in nova",
    ),
    Case(
        "aggregate without the key: default",
        AZ,
        host(),
        ask(availability_zone="nova"),
        {"agg": {"ssd": "true"}},
    ),
    Case(
        "a zone replaces the default",
        AZ,
        host(),
        ask(availability_zone="nova"),
        {"agg": {"availability_zone": "az2"}},
        expected="zone 'nova' wanted, provider is in az2",
    ),
    Case(
        "custom default",
        AvailabilityZoneFilter(default_zone="internal"),
        host(),
        ask(availability_zone="internal"),
    ),
    Case(
        "no default zone",
        AZ_NO_DEFAULT,
        host(),
        ask(availability_zone="nova"),
        expected="zone 'nova' wanted, provider is in no zone",
    ),
    Case(
        "no default, own zone",
        AZ_NO_DEFAULT,
        host(availability_zone="x"),
        ask(availability_zone="x"),
    ),
    Case(
        "zone names are exact",
        AZ,
        host(availability_zone="AZ1"),
        ask(availability_zone="az1"),
        expected="zone 'az1' wanted, provider is in AZ1",
    ),
]


@pytest.mark.parametrize("case", AZ_CASES, ids=ids(AZ_CASES))
def test_availability_zone(case: Case) -> None:
    check(case)


def test_availability_zone_ignores_unknown_aggregates() -> None:
    provider = Provider("p", aggregates=frozenset({"ghost"}))
    snap = Snapshot.build([provider], {})
    ctx = Context.start(snap, ask(availability_zone="nova"))
    assert AZ.reject(ctx, 0) is None


CAPS = ComputeCapabilitiesFilter()
KVM = {
    "hypervisor_type": "QEMU",
    "hypervisor_version": 6000001,
    "cpu_info": '{"arch": "x86_64", "features": ["aes", "avx"]}',
    "stats": {"gpu_model": "A100"},
    "supported_instances": [("x86_64", "kvm", "hvm")],
}


def specs(**kwargs: str) -> Request:
    return Request("r", {}, extra_specs={k.replace("__", ":"): v for k, v in kwargs.items()})


CAPS_CASES = [
    Case("no extra specs", CAPS, host(capabilities=KVM)),
    Case("scoped match", CAPS, host(capabilities=KVM), specs(capabilities__hypervisor_type="QEMU")),
    Case(
        "scoped mismatch",
        CAPS,
        host(capabilities=KVM),
        specs(capabilities__hypervisor_type="KVM"),
        expected="capabilities:hypervisor_type is 'QEMU', wanted 'KVM'",
    ),
    Case(
        "scoped missing fails",
        CAPS,
        host(capabilities={}),
        specs(capabilities__hypervisor_type="QEMU"),
        expected="capabilities:hypervisor_type not reported",
    ),
    Case("unscoped missing is skipped", CAPS, host(capabilities={}), specs(hypervisor_type="QEMU")),
    Case(
        "unscoped present is checked",
        CAPS,
        host(capabilities=KVM),
        specs(hypervisor_type="xen"),
        expected="hypervisor_type is 'QEMU', wanted 'xen'",
    ),
    Case(
        "other scopes are skipped", CAPS, host(capabilities={}), specs(hw__cpu_policy="dedicated")
    ),
    Case(
        "numeric operator",
        CAPS,
        host(capabilities=KVM),
        specs(capabilities__hypervisor_version=">= 6000000"),
    ),
    Case(
        "numeric operator fails",
        CAPS,
        host(capabilities=KVM),
        specs(capabilities__hypervisor_version=">= 7000000"),
        expected="capabilities:hypervisor_version is '6000001', wanted '>= 7000000'",
    ),
    Case(
        "nested JSON text",
        CAPS,
        host(capabilities=KVM),
        specs(capabilities__cpu_info__features="<in> avx"),
    ),
    Case(
        "nested missing",
        CAPS,
        host(capabilities=KVM),
        specs(capabilities__cpu_info__vendor="Intel"),
        expected="capabilities:cpu_info:vendor not reported",
    ),
    Case("stats fallback", CAPS, host(capabilities=KVM), specs(capabilities__gpu_model="A100")),
    Case("unscoped stats", CAPS, host(capabilities=KVM), specs(gpu_model="<or> H100 <or> A100")),
    Case(
        "first failing spec in key order",
        CAPS,
        host(capabilities=KVM),
        specs(capabilities__hypervisor_type="x", capabilities__gpu_model="y"),
        expected="capabilities:gpu_model is 'A100', wanted 'y'",
    ),
]


@pytest.mark.parametrize("case", CAPS_CASES, ids=ids(CAPS_CASES))
def test_compute_capabilities(case: Case) -> None:
    check(case)


AIES = AggregateInstanceExtraSpecsFilter()
AIES_CASES = [
    Case("no extra specs", AIES, host()),
    Case("unscoped match", AIES, host(), specs(ssd="true"), {"a": {"ssd": "true"}}),
    Case(
        "scoped match",
        AIES,
        host(),
        specs(aggregate_instance_extra_specs__ssd="true"),
        {"a": {"ssd": "true"}},
    ),
    Case(
        "no aggregate",
        AIES,
        host(),
        specs(ssd="true"),
        expected="no aggregate sets ssd",
    ),
    Case(
        "aggregates lack the key",
        AIES,
        host(),
        specs(aggregate_instance_extra_specs__ssd="true"),
        {"a": {"gpu": "true"}},
        expected="no aggregate sets ssd",
    ),
    Case(
        "value mismatch",
        AIES,
        host(),
        specs(ssd="true"),
        {"a": {"ssd": "false"}},
        expected="aggregate ssd is false, wanted 'true'",
    ),
    Case(
        "any aggregate's value will do",
        AIES,
        host(),
        specs(ssd="true"),
        {"a": {"ssd": "false"}, "b": {"ssd": "true"}},
    ),
    Case(
        "values split on commas",
        AIES,
        host(),
        specs(tier="gold"),
        {"a": {"tier": "silver, gold"}},
    ),
    Case(
        "operators apply per value",
        AIES,
        host(),
        specs(aggregate_instance_extra_specs__speed=">= 10"),
        {"a": {"speed": "1,25"}},
    ),
    Case(
        "no value satisfies",
        AIES,
        host(),
        specs(aggregate_instance_extra_specs__speed=">= 100"),
        {"a": {"speed": "1,25"}},
        expected="aggregate speed is 1, 25, wanted '>= 100'",
    ),
    Case(
        "other scopes are skipped",
        AIES,
        host(),
        specs(capabilities__hypervisor_type="QEMU", hw__mem_page_size="large"),
    ),
    Case(
        "only the first colon scopes",
        AIES,
        host(),
        specs(aggregate_instance_extra_specs__a__b="1"),
        {"x": {"a:b": "1"}},
    ),
]


@pytest.mark.parametrize("case", AIES_CASES, ids=ids(AIES_CASES))
def test_aggregate_instance_extra_specs(case: Case) -> None:
    check(case)


IMAGE = ImagePropertiesFilter()
X86_KVM = {"supported_instances": [("x86_64", "kvm", "hvm")], "hypervisor_version": 6000000}
MIXED = {"supported_instances": [["i686", "xen", "xen"], ["x86_64", "qemu", "hvm"]]}


def image(**props: str) -> Request:
    return Request("r", {}, image_properties=props)


IMAGE_CASES = [
    Case("no properties", IMAGE, host(capabilities={})),
    Case("matching triple", IMAGE, host(capabilities=X86_KVM), image(hw_architecture="x86_64")),
    Case(
        "all three",
        IMAGE,
        host(capabilities=X86_KVM),
        image(hw_architecture="x86_64", img_hv_type="kvm", hw_vm_mode="hvm"),
    ),
    Case(
        "wrong architecture",
        IMAGE,
        host(capabilities=X86_KVM),
        image(hw_architecture="aarch64"),
        expected="no supported instance matches aarch64/*/*",
    ),
    Case(
        "every named property in one entry",
        IMAGE,
        host(capabilities=MIXED),
        image(hw_architecture="x86_64", img_hv_type="xen"),
        expected="no supported instance matches x86_64/xen/*",
    ),
    Case("any entry may match", IMAGE, host(capabilities=MIXED), image(img_hv_type="xen")),
    Case(
        "host reports nothing",
        IMAGE,
        host(capabilities={}),
        image(img_hv_type="kvm"),
        expected="reports no supported_instances",
    ),
    Case(
        "position matters",
        IMAGE,
        host(capabilities={"supported_instances": [("x86_64", "xen", "hvm")]}),
        image(hw_vm_mode="xen"),
        expected="no supported instance matches */*/xen",
    ),
    Case("uppercase", IMAGE, host(capabilities=X86_KVM), image(hw_architecture="X86_64")),
    Case("amd64 alias", IMAGE, host(capabilities=X86_KVM), image(hw_architecture="amd64")),
    Case("x86_32 alias", IMAGE, host(capabilities=MIXED), image(hw_architecture="x86_32")),
    Case("i386 alias", IMAGE, host(capabilities=MIXED), image(hw_architecture="i386")),
    Case("xapi alias", IMAGE, host(capabilities=MIXED), image(img_hv_type="xapi")),
    Case("pv alias", IMAGE, host(capabilities=MIXED), image(hw_vm_mode="pv")),
    Case("hv alias", IMAGE, host(capabilities=X86_KVM), image(hw_vm_mode="hv")),
    Case("baremetal alias", IMAGE, host(capabilities=X86_KVM), image(hw_vm_mode="baremetal")),
    Case("legacy names", IMAGE, host(capabilities=X86_KVM), image(architecture="x86_64")),
    Case("empty value is absent", IMAGE, host(capabilities={}), image(img_hv_type="")),
    Case(
        "version alone is not checked",
        IMAGE,
        host(capabilities={"hypervisor_version": 1000}),
        image(img_hv_requested_version=">= 9.0"),
    ),
    Case(
        "version in range",
        IMAGE,
        host(capabilities=X86_KVM),
        image(img_hv_type="kvm", img_hv_requested_version=">=6.0,<6.2"),
    ),
    Case(
        "version too new",
        IMAGE,
        host(capabilities={**X86_KVM, "hypervisor_version": 6002000}),
        image(img_hv_type="kvm", img_hv_requested_version=">=6.0,<6.2"),
        expected="hypervisor version 6.2.0 does not satisfy '>=6.0,<6.2'",
    ),
    Case(
        "version too old",
        IMAGE,
        host(capabilities={**X86_KVM, "hypervisor_version": 5000}),
        image(img_hv_type="kvm", img_hv_requested_version=">= 6.0"),
        expected="hypervisor version 5.0 does not satisfy '>= 6.0'",
    ),
    Case(
        "legacy version name",
        IMAGE,
        host(capabilities={**X86_KVM, "hypervisor_version": 5000}),
        image(hypervisor_type="kvm", hypervisor_version_requires=">=6.0"),
        expected="hypervisor version 5.0 does not satisfy '>=6.0'",
    ),
    Case(
        "no host version: not checked",
        IMAGE,
        host(capabilities={"supported_instances": X86_KVM["supported_instances"]}),
        image(img_hv_type="kvm", img_hv_requested_version=">=99.0"),
    ),
    Case(
        "zero host version: not checked",
        IMAGE,
        host(capabilities={**X86_KVM, "hypervisor_version": 0}),
        image(img_hv_type="kvm", img_hv_requested_version=">=99.0"),
    ),
    Case(
        "unparsable requirement",
        IMAGE,
        host(capabilities=X86_KVM),
        image(img_hv_type="kvm", img_hv_requested_version="latest"),
        expected="img_hv_requested_version 'latest' is not understood",
    ),
    Case(
        "default architecture",
        ImagePropertiesFilter(default_architecture="aarch64"),
        host(capabilities=X86_KVM),
        expected="no supported instance matches aarch64/*/*",
    ),
    Case(
        "image overrides the default architecture",
        ImagePropertiesFilter(default_architecture="aarch64"),
        host(capabilities=X86_KVM),
        image(hw_architecture="x86_64"),
    ),
]


@pytest.mark.parametrize("case", IMAGE_CASES, ids=ids(IMAGE_CASES))
def test_image_properties(case: Case) -> None:
    check(case)


@pytest.mark.parametrize(
    ("text", "number", "parts"),
    [("6.0.1", 6000001, (6, 0, 1)), ("6.0", 6000, (6, 0)), ("1.2.3.4", 1002003004, (1, 2, 3, 4))],
)
def test_version_encoding(text: str, number: int, parts: tuple[int, ...]) -> None:
    assert version_to_int(text) == number
    assert int_to_version(number) == parts


@pytest.mark.parametrize("text", ["1.1000", "a.b", "", "1..2", "-1.0"])
def test_version_encoding_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        version_to_int(text)


@pytest.mark.parametrize(
    ("requirement", "version", "ok"),
    [
        (">= 6.0", (6, 0, 0), True),  # missing parts are zeros
        ("== 6", (6, 0, 0), True),
        ("> 6.0", (6, 0, 0), False),
        ("> 6.0", (6, 0, 1), True),
        ("< 6.10", (6, 9), True),  # numeric, not string, order
        ("!= 6.0.1", (6, 0, 1), False),
        (">=1.0, <2.0, !=1.5", (1, 5), False),
        (">=1.0, <2.0, !=1.5", (1, 6), True),
    ],
)
def test_version_requirements(requirement: str, version: tuple[int, ...], ok: bool) -> None:
    clauses = parse_requirement(requirement)
    assert clauses is not None
    assert satisfies(version, clauses) is ok


@pytest.mark.parametrize("requirement", ["6.0", ">= ", "=> 6.0", ">= 6.0,", ">= 6.x", "~= 6.0"])
def test_version_requirement_grammar(requirement: str) -> None:
    assert parse_requirement(requirement) is None


TRAITS = TraitsFilter()
AVX = frozenset({"HW_CPU_X86_AVX", "COMPUTE_VOLUME_MULTI_ATTACH"})
TRAIT_CASES = [
    Case("nothing asked", TRAITS, host()),
    Case(
        "required present",
        TRAITS,
        host(traits=AVX),
        ask(required_traits=frozenset({"HW_CPU_X86_AVX"})),
    ),
    Case(
        "required missing",
        TRAITS,
        host(traits=AVX),
        ask(required_traits=frozenset({"HW_GPU", "HW_CPU_X86_AVX", "CUSTOM_A"})),
        expected="missing trait CUSTOM_A, HW_GPU",
    ),
    Case("forbidden absent", TRAITS, host(traits=AVX), ask(forbidden_traits=frozenset({"HW_GPU"}))),
    Case(
        "forbidden present",
        TRAITS,
        host(traits=AVX),
        ask(forbidden_traits=frozenset({"HW_CPU_X86_AVX"})),
        expected="has forbidden trait HW_CPU_X86_AVX",
    ),
    Case("extra spec required", TRAITS, host(traits=AVX), specs(trait__HW_CPU_X86_AVX="required")),
    Case(
        "extra spec required missing",
        TRAITS,
        host(),
        specs(trait__HW_CPU_X86_AVX="required"),
        expected="missing trait HW_CPU_X86_AVX",
    ),
    Case(
        "extra spec forbidden",
        TRAITS,
        host(traits=AVX),
        specs(trait__COMPUTE_VOLUME_MULTI_ATTACH="forbidden"),
        expected="has forbidden trait COMPUTE_VOLUME_MULTI_ATTACH",
    ),
    Case(
        "granular group",
        TRAITS,
        host(),
        specs(trait1__CUSTOM_X="required"),
        expected="missing trait CUSTOM_X",
    ),
    Case(
        "named group",
        TRAITS,
        host(),
        specs(trait_gpu__CUSTOM_X="required"),
        expected="missing trait CUSTOM_X",
    ),
    Case("other values ignored", TRAITS, host(), specs(trait__CUSTOM_X="preferred")),
    Case("not the trait scope", TRAITS, host(), specs(traits__CUSTOM_X="required")),
    Case(
        "missing reported before forbidden",
        TRAITS,
        host(traits=AVX),
        ask(required_traits=frozenset({"X"}), forbidden_traits=frozenset({"HW_CPU_X86_AVX"})),
        expected="missing trait X",
    ),
]


@pytest.mark.parametrize("case", TRAIT_CASES, ids=ids(TRAIT_CASES))
def test_traits(case: Case) -> None:
    check(case)


def instances(n: int) -> frozenset[str]:
    return frozenset(f"i{k}" for k in range(n))


NUM = NumInstancesFilter(max_instances_per_host=2)
NUM_CASES = [
    Case("empty", NUM, host()),
    Case("below the limit", NUM, host(instances=instances(1))),
    Case(
        "at the limit",
        NUM,
        host(instances=instances(2)),
        expected="2 instances, max_instances_per_host 2",
    ),
    Case("default limit is 50", NumInstancesFilter(), host(instances=instances(49))),
    Case(
        "default limit reached",
        NumInstancesFilter(),
        host(instances=instances(50)),
        expected="50 instances, max_instances_per_host 50",
    ),
    Case(
        "picks of this request count",
        NUM,
        host(instances=instances(1)),
        picked=[0],
        expected="2 instances, max_instances_per_host 2",
    ),
    Case("picks elsewhere do not", NUM, host(instances=instances(1)), picked=[1, 1]),
    Case(
        "aggregate lowers",
        NUM,
        host(instances=instances(1)),
        aggregates={"a": {"max_instances_per_host": "1"}},
        expected="1 instances, max_instances_per_host 1",
    ),
    Case(
        "aggregate raises",
        NUM,
        host(instances=instances(4)),
        aggregates={"a": {"max_instances_per_host": "5"}},
    ),
    Case(
        "minimum of aggregates",
        NUM,
        host(instances=instances(3)),
        aggregates={"a": {"max_instances_per_host": "5"}, "b": {"max_instances_per_host": "3"}},
        expected="3 instances, max_instances_per_host 3",
    ),
    Case(
        "invalid falls back",
        NUM,
        host(instances=instances(2)),
        aggregates={"a": {"max_instances_per_host": "many"}},
        expected="2 instances, max_instances_per_host 2",
    ),
    Case(
        "one invalid discards the valid",
        NUM,
        host(instances=instances(3)),
        aggregates={"a": {"max_instances_per_host": "2.5"}, "b": {"max_instances_per_host": "9"}},
        expected="3 instances, max_instances_per_host 2",
    ),
]


@pytest.mark.parametrize("case", NUM_CASES, ids=ids(NUM_CASES))
def test_num_instances(case: Case) -> None:
    check(case)


IO = IoOpsFilter()
IO_CASES = [
    Case("idle", IO, host()),
    Case("below the default of 8", IO, host(num_io_ops=7)),
    Case(
        "at the limit", IO, host(num_io_ops=8), expected="8 I/O operations, max_io_ops_per_host 8"
    ),
    Case("configured", IoOpsFilter(max_io_ops_per_host=2), host(num_io_ops=1)),
    Case(
        "picks are builds",
        IoOpsFilter(max_io_ops_per_host=2),
        host(num_io_ops=1),
        picked=[0],
        expected="2 I/O operations, max_io_ops_per_host 2",
    ),
    Case(
        "aggregate override",
        IO,
        host(num_io_ops=3),
        aggregates={"a": {"max_io_ops_per_host": "3"}},
        expected="3 I/O operations, max_io_ops_per_host 3",
    ),
    Case(
        "minimum of aggregates",
        IO,
        host(num_io_ops=3),
        aggregates={"a": {"max_io_ops_per_host": "20"}, "b": {"max_io_ops_per_host": "4"}},
    ),
    Case(
        "invalid falls back",
        IO,
        host(num_io_ops=9),
        aggregates={"a": {"max_io_ops_per_host": "ten"}, "b": {"max_io_ops_per_host": "20"}},
        expected="9 I/O operations, max_io_ops_per_host 8",
    ),
]


@pytest.mark.parametrize("case", IO_CASES, ids=ids(IO_CASES))
def test_io_ops(case: Case) -> None:
    check(case)


TAGS = TagRequirementsFilter()


def tags(**rules: frozenset[str]) -> Request:
    return Request("r", {}, tags=TagRules(**rules))


TAG_CASES = [
    Case("no rules", TAGS, host(tags={"web": 2})),
    Case("with: present", TAGS, host(tags={"web": 2}), tags(require_with=frozenset({"web"}))),
    Case(
        "with: absent",
        TAGS,
        host(tags={"web": 2}),
        tags(require_with=frozenset({"web", "db", "cache"})),
        expected="no instance tagged cache, db",
    ),
    Case(
        "with: zero count is absent",
        TAGS,
        host(tags={"web": 0}),
        tags(require_with=frozenset({"web"})),
        expected="no instance tagged web",
    ),
    Case("without: absent", TAGS, host(tags={"web": 1}), tags(require_without=frozenset({"db"}))),
    Case(
        "without: zero count", TAGS, host(tags={"db": 0}), tags(require_without=frozenset({"db"}))
    ),
    Case(
        "without: present",
        TAGS,
        host(tags={"db": 1, "web": 3}),
        tags(require_without=frozenset({"db", "web"})),
        expected="has instances tagged db, web",
    ),
    Case(
        "preferences are not requirements",
        TAGS,
        host(),
        tags(prefer_with=frozenset({"web"}), prefer_without=frozenset({"db"})),
    ),
]


@pytest.mark.parametrize("case", TAG_CASES, ids=ids(TAG_CASES))
def test_tags(case: Case) -> None:
    check(case)


@pytest.mark.parametrize(
    ("cls", "name", "per_pick"),
    [
        (ComputeFilter, "ComputeFilter", False),
        (AvailabilityZoneFilter, "AvailabilityZoneFilter", False),
        (ComputeCapabilitiesFilter, "ComputeCapabilitiesFilter", False),
        (AggregateInstanceExtraSpecsFilter, "AggregateInstanceExtraSpecsFilter", False),
        (ImagePropertiesFilter, "ImagePropertiesFilter", False),
        (TraitsFilter, "TraitsFilter", False),
        (NumInstancesFilter, "NumInstancesFilter", True),
        (IoOpsFilter, "IoOpsFilter", True),
        (TagRequirementsFilter, "TagRequirementsFilter", False),
    ],
)
def test_names_and_scheduling(cls: type[HostFilter], name: str, per_pick: bool) -> None:
    assert cls.name == name
    assert cls.per_pick is per_pick
    assert ComputeFilter.cost == 1
    assert cls.cost >= ComputeFilter.cost
