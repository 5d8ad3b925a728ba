"""The relation filters (hints, server groups, tenancy, isolation, retries,
JSON queries), table by table against Nova's semantics and Berth's own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from scheduling.engine import Engine
from scheduling.filters.base import Context, HostFilter
from scheduling.filters.cidr_affinity import SimpleCIDRAffinityFilter
from scheduling.filters.different_host import DifferentHostFilter
from scheduling.filters.isolated_hosts import IsolatedHostsFilter
from scheduling.filters.json_filter import JsonFilter, host_attributes
from scheduling.filters.multi_tenancy import AggregateMultiTenancyIsolation
from scheduling.filters.project_restriction import ProjectRestrictionFilter
from scheduling.filters.retry import RetryFilter
from scheduling.filters.same_host import SameHostFilter
from scheduling.filters.server_group import (
    ServerGroupAffinityFilter,
    ServerGroupAntiAffinityFilter,
)
from scheduling.filters.type_affinity import AggregateTypeAffinityFilter
from scheduling.model import Aggregate, GroupPolicy, Hints, Provider, Request, Snapshot

# --- helpers ------------------------------------------------------------------


def build(
    providers: Sequence[Provider],
    aggregates: Iterable[Aggregate] = (),
    inventories: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
) -> Snapshot:
    if inventories is None:
        inventories = {p.provider_id: {"VCPU": {"total": 8}} for p in providers}
    return Snapshot.build(providers, inventories, {a.name: a for a in aggregates})


def request(**kwargs: Any) -> Request:
    return Request(request_id="r1", resources={"VCPU": 1}, **kwargs)


def verdicts(
    f: HostFilter, snapshot: Snapshot, req: Request, picked: Sequence[int] = ()
) -> dict[str, str | None]:
    """Provider id -> reason (None: passes), checking mask agrees with reject."""
    ctx = Context.start(snapshot, req)
    ctx.picked.extend(picked)
    out = {p.provider_id: f.reject(ctx, row) for row, p in enumerate(snapshot.providers)}
    mask = f.mask(ctx, np.arange(snapshot.size, dtype=np.int64))
    assert [bool(m) for m in mask] == [reason is None for reason in out.values()]
    for reason in out.values():
        assert reason is None or reason.strip()
    return out


def passing(
    f: HostFilter, snapshot: Snapshot, req: Request, picked: Sequence[int] = ()
) -> list[str]:
    return [pid for pid, reason in verdicts(f, snapshot, req, picked).items() if reason is None]


# --- names and flags --------------------------------------------------------------


@pytest.mark.parametrize(
    ("f", "per_pick"),
    [
        (SameHostFilter(), False),
        (DifferentHostFilter(), False),
        (ServerGroupAffinityFilter(), True),
        (ServerGroupAntiAffinityFilter(), True),
        (JsonFilter(), True),
        (IsolatedHostsFilter(frozenset(), frozenset()), False),
        (AggregateMultiTenancyIsolation(), False),
        (AggregateTypeAffinityFilter(), False),
        (SimpleCIDRAffinityFilter(), False),
        (RetryFilter(), False),
        (ProjectRestrictionFilter(), False),
    ],
)
def test_names_are_the_class_names_and_per_pick_is_declared(f: HostFilter, per_pick: bool) -> None:
    assert f.name == type(f).__name__
    assert f.per_pick is per_pick


# --- same_host / different_host -------------------------------------------------------

HOSTS = build(
    [
        Provider("a", instances=frozenset({"i1"})),
        Provider("b", instances=frozenset({"i2", "i3"})),
        Provider("c"),
    ]
)


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (frozenset(), ["a", "b", "c"]),  # no hint passes
        (frozenset({"i1"}), ["a"]),
        (frozenset({"i1", "i9"}), ["a"]),  # one of them is enough
        (frozenset({"i1", "i3"}), ["a", "b"]),
        (frozenset({"i9"}), []),
    ],
)
def test_same_host(hint: frozenset[str], expected: list[str]) -> None:
    req = request(hints=Hints(same_host=hint))
    assert passing(SameHostFilter(), HOSTS, req) == expected


def test_same_host_reason_names_the_hint() -> None:
    reasons = verdicts(SameHostFilter(), HOSTS, request(hints=Hints(same_host=frozenset({"i9"}))))
    assert "same_host" in (reasons["c"] or "")
    assert "i9" in (reasons["c"] or "")


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (frozenset(), ["a", "b", "c"]),  # no hint passes
        (frozenset({"i1"}), ["b", "c"]),
        (frozenset({"i1", "i2"}), ["c"]),
        (frozenset({"i9"}), ["a", "b", "c"]),
    ],
)
def test_different_host(hint: frozenset[str], expected: list[str]) -> None:
    req = request(hints=Hints(different_host=hint))
    assert passing(DifferentHostFilter(), HOSTS, req) == expected


def test_different_host_reason_names_the_clash() -> None:
    req = request(hints=Hints(different_host=frozenset({"i2", "i3"})))
    assert verdicts(DifferentHostFilter(), HOSTS, req)["b"] == (
        "hosts different_host instance i2 and 1 more"
    )


# --- server groups -----------------------------------------------------------------

GROUPS = build(
    [
        Provider("a", groups={"g": 2}),
        Provider("b"),
        Provider("c", groups={"g": 1}),
        Provider("d", groups={"other": 1, "g": 0}),
    ]
)


@pytest.mark.parametrize(
    ("policy", "group", "picked", "expected"),
    [
        (None, "g", [], ["a", "b", "c", "d"]),
        ("soft-affinity", "g", [], ["a", "b", "c", "d"]),
        ("anti-affinity", "g", [], ["a", "b", "c", "d"]),
        ("affinity", "g", [], ["a", "c"]),  # where the members are
        ("affinity", "new", [], ["a", "b", "c", "d"]),  # no member yet
        ("affinity", "new", [1], ["b"]),  # the first pick decides
        ("affinity", "g", [0, 0], ["a"]),  # not the other member host any more
        ("affinity", None, [3], ["d"]),  # picks count without a group id
    ],
)
def test_server_group_affinity(
    policy: GroupPolicy | None, group: str | None, picked: list[int], expected: list[str]
) -> None:
    req = request(group_policy=policy, group_id=group, num_instances=3)
    assert passing(ServerGroupAffinityFilter(), GROUPS, req, picked) == expected


def test_server_group_affinity_cache_follows_the_group_and_snapshot() -> None:
    f = ServerGroupAffinityFilter()
    assert passing(f, GROUPS, request(group_policy="affinity", group_id="g")) == ["a", "c"]
    assert passing(f, GROUPS, request(group_policy="affinity", group_id="other")) == ["d"]
    moved = build([Provider("a"), Provider("b", groups={"g": 1})])
    assert passing(f, moved, request(group_policy="affinity", group_id="g")) == ["b"]


@pytest.mark.parametrize(
    ("policy", "group", "limit", "picked", "expected"),
    [
        (None, "g", 1, [], ["a", "b", "c", "d"]),
        ("soft-anti-affinity", "g", 1, [], ["a", "b", "c", "d"]),
        ("affinity", "g", 1, [], ["a", "b", "c", "d"]),
        ("anti-affinity", "g", 1, [], ["b", "d"]),
        ("anti-affinity", "g", 2, [], ["b", "c", "d"]),
        ("anti-affinity", "g", 3, [], ["a", "b", "c", "d"]),
        ("anti-affinity", "g", 1, [1], ["d"]),  # this request's pick is a member
        ("anti-affinity", "g", 2, [2], ["b", "d"]),  # 1 placed + 1 picked
        ("anti-affinity", "g", 2, [1], ["b", "c", "d"]),
        ("anti-affinity", "new", 1, [0, 3], ["b", "c"]),
        ("anti-affinity", None, 1, [1], ["a", "c", "d"]),
        ("anti-affinity", "g", 0, [], []),  # Nova's "fewer than the maximum"
    ],
)
def test_server_group_anti_affinity(
    policy: GroupPolicy | None,
    group: str | None,
    limit: int,
    picked: list[int],
    expected: list[str],
) -> None:
    req = request(group_policy=policy, group_id=group, max_server_per_host=limit, num_instances=4)
    assert passing(ServerGroupAntiAffinityFilter(), GROUPS, req, picked) == expected


def test_server_group_reasons() -> None:
    req = request(group_policy="anti-affinity", group_id="g", max_server_per_host=2)
    assert verdicts(ServerGroupAntiAffinityFilter(), GROUPS, req)["a"] == (
        "anti-affinity group g: 2 member(s) here, max_server_per_host is 2"
    )
    req = request(group_policy="affinity", group_id="g")
    assert "2 other provider(s)" in (verdicts(ServerGroupAffinityFilter(), GROUPS, req)["b"] or "")
    reasons = verdicts(ServerGroupAffinityFilter(), GROUPS, req, picked=[2])
    assert "going to c" in (reasons["a"] or "")


def _engine_place(filters: Sequence[HostFilter], snapshot: Snapshot, req: Request) -> Any:
    return Engine(filters).place(snapshot, req)


def test_engine_affinity_keeps_a_multi_create_together() -> None:
    snapshot = build([Provider("a"), Provider("b"), Provider("c")])
    req = request(group_policy="affinity", group_id="g", num_instances=3)
    placement = _engine_place([ServerGroupAffinityFilter()], snapshot, req)
    assert placement.providers == ("a", "a", "a")


@pytest.mark.parametrize(
    ("count", "limit", "expected"),
    [
        (3, 1, ("a", "b", "c")),
        (4, 2, ("a", "a", "b", "b")),
        (4, 1, ("a", "b", "c")),  # the fourth has nowhere to go
    ],
)
def test_engine_anti_affinity_spreads_a_multi_create(
    count: int, limit: int, expected: tuple[str, ...]
) -> None:
    snapshot = build([Provider("a"), Provider("b"), Provider("c")])
    req = request(
        group_policy="anti-affinity", group_id="g", num_instances=count, max_server_per_host=limit
    )
    placement = _engine_place([ServerGroupAntiAffinityFilter()], snapshot, req)
    assert placement.providers == expected
    assert placement.placed == (len(expected) == count)
    if not placement.placed:
        assert placement.trace is not None
        assert placement.trace.counts["ServerGroupAntiAffinityFilter"] == 3


# --- JsonFilter -------------------------------------------------------------------

JSON_PROVIDERS = [
    Provider(
        "a",
        host="h-a",
        capabilities={"hypervisor_type": "QEMU", "hypervisor_version": 8002000},
        metrics={"load": 0.5},
        metadata={"rack": "r1"},
        instances=frozenset({"i1", "i2"}),
        num_io_ops=3,
        host_ip="10.0.0.1",
        aggregates=frozenset({"agg2", "agg1"}),
    ),
    Provider("b", host="h-b", state="disabled", capabilities={"hypervisor_type": "ironic"}),
    Provider("c", host="h-c"),
]
JSON_INVENTORIES: dict[str, dict[str, dict[str, Any]]] = {
    "a": {
        "MEMORY_MB": {"total": 4096, "reserved": 512, "used": 1024, "allocation_ratio": 1.5},
        "DISK_GB": {"total": 100, "used": 10},
        "VCPU": {"total": 8, "used": 2, "allocation_ratio": 4.0},
    },
    "b": {"MEMORY_MB": {"total": 1024}, "DISK_GB": {"total": 500}, "VCPU": {"total": 32}},
    "c": {"MEMORY_MB": {"total": 8192, "used": 8192}, "VCPU": {"total": 4, "used": 4}},
}
JSON = build(JSON_PROVIDERS, inventories=JSON_INVENTORIES)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (None, ["a", "b", "c"]),
        ("", ["a", "b", "c"]),
        ([], ["a", "b", "c"]),
        ("[]", ["a", "b", "c"]),
        ('[">=", "$free_ram_mb", 2048]', ["a"]),  # 4096 - 512 - 1024
        ([">=", "$free_ram_mb", 1024], ["a", "b"]),  # a list works as well as text
        ('["=", "$free_ram_mb", 0]', ["c"]),
        ('["=", "$free_disk_mb", 92160]', ["a"]),  # (100 - 10) GB in MB
        ('[">", "$free_disk_mb", 0]', ["a", "b"]),  # c has DISK_GB total 0
        ('["and", [">=", "$vcpus_total", 8], ["<", "$vcpus_used", 4]]', ["a", "b"]),
        ('["not", "$service.disabled"]', ["a", "c"]),
        ('["=", "$service.state", "disabled"]', ["b"]),
        ('["=", "$hypervisor_type", "QEMU"]', ["a"]),
        ('["in", "$hypervisor_type", "QEMU", "ironic"]', ["a", "b"]),
        ('[">=", "$hypervisor_version", 8000000]', ["a"]),
        ('["<", "$metrics.load", 1]', ["a"]),
        ('["=", "$metadata.rack", "r1"]', ["a"]),
        ('["=", "$num_instances", 2]', ["a"]),
        ('["=", "$num_io_ops", 3]', ["a"]),
        ('["=", "$host", "h-c"]', ["c"]),
        ('["=", "$uuid", "b"]', ["b"]),
        ('["=", "$host_ip", "10.0.0.1"]', ["a"]),
        ('["=", "$cpu_allocation_ratio", 4.0]', ["a"]),
        ('[">=", "$nonexistent", 1]', []),  # a missing variable fails a comparison
        ('["or", [">", "$free_ram_mb", 100000], ["=", "$host", "h-b"]]', ["b"]),
    ],
)
def test_json_filter(query: str | list[Any] | None, expected: list[str]) -> None:
    assert passing(JsonFilter(), JSON, request(hints=Hints(query=query))) == expected


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("not json", "query is not valid JSON"),
        ('["frobnicate", 1]', "unknown command 'frobnicate'"),
        ('["and", [">=", "$free_ram_mb", 1], ["~", 1]]', "query[2][0]: unknown command"),
        ('{"free_ram_mb": 1}', "query must be a JSON list"),
        ("42", "query must be a JSON list"),
        ([1, 2], "expected a command name"),
    ],
)
def test_json_filter_invalid_query_rejects_every_provider_with_the_error(
    query: str | list[Any], message: str
) -> None:
    reasons = verdicts(JsonFilter(), JSON, request(hints=Hints(query=query)))
    for reason in reasons.values():
        assert reason is not None
        assert reason.startswith("invalid JSON query: ")
        assert message in reason


def test_json_filter_invalid_query_shows_in_the_engine_trace() -> None:
    req = request(hints=Hints(query='["frobnicate"]'))
    placement = _engine_place([JsonFilter()], JSON, req)
    assert not placement.placed
    assert placement.trace is not None
    assert {e.filter for e in placement.trace.eliminations} == {"JsonFilter"}
    assert all("unknown command" in e.reason for e in placement.trace.eliminations)


def test_json_filter_sees_earlier_picks() -> None:
    snapshot = build(
        [Provider("a"), Provider("b")],
        inventories={"a": {"MEMORY_MB": {"total": 3072}}, "b": {"MEMORY_MB": {"total": 4096}}},
    )
    req = Request(
        "r1",
        resources={"MEMORY_MB": 1024},
        num_instances=3,
        hints=Hints(query='[">=", "$free_ram_mb", 2048]'),
    )
    placement = _engine_place([JsonFilter()], snapshot, req)
    # a: 3072 free, then 2048, then 1024 (fails); b takes the third
    assert placement.providers == ("a", "a", "b")


def test_json_filter_without_the_resource_class_fails_comparisons() -> None:
    snapshot = build([Provider("a")], inventories={"a": {"VCPU": {"total": 2}}})
    req = request(hints=Hints(query='[">=", "$free_ram_mb", 0]'))
    assert passing(JsonFilter(), snapshot, req) == []
    req = request(hints=Hints(query='["and", "$free_ram_mb"]'))  # vanishes from "and"
    assert passing(JsonFilter(), snapshot, req) == ["a"]


def test_host_attributes() -> None:
    ctx = Context.start(JSON, request())
    ctx.used[0, JSON.column("MEMORY_MB")] += 512  # an earlier pick
    attributes = host_attributes(ctx, 0)
    assert attributes == {
        "host": "h-a",
        "nodename": "h-a",
        "uuid": "a",
        "num_instances": 2,
        "num_io_ops": 3,
        "failed_builds": 0,
        "host_ip": "10.0.0.1",
        "availability_zone": None,
        "service": {"disabled": False, "state": "enabled"},
        "capabilities": {"hypervisor_type": "QEMU", "hypervisor_version": 8002000},
        "hypervisor_type": "QEMU",
        "hypervisor_version": 8002000,
        "metrics": {"load": 0.5},
        "metadata": {"rack": "r1"},
        "aggregates": ["agg1", "agg2"],
        "free_ram_mb": 4096 - 512 - 1024 - 512,
        "total_usable_ram_mb": 4096,
        "ram_allocation_ratio": 1.5,
        "free_disk_mb": 90 * 1024,
        "total_usable_disk_gb": 100,
        "disk_mb_used": 10 * 1024,
        "disk_allocation_ratio": 1.0,
        "vcpus_total": 8,
        "vcpus_used": 2,
        "cpu_allocation_ratio": 4.0,
    }


# --- IsolatedHostsFilter -----------------------------------------------------------------

ISOLATION = build([Provider("p1", host="iso"), Provider("p2", host="plain")])


@pytest.mark.parametrize(
    ("hosts", "images", "restrict", "image", "expected"),
    [
        ({"iso"}, {"img-iso"}, True, "img-iso", ["p1"]),
        ({"iso"}, {"img-iso"}, True, "img-other", ["p2"]),
        ({"iso"}, {"img-iso"}, True, None, ["p2"]),  # volume-backed: not isolated
        ({"iso"}, {"img-iso"}, False, "img-iso", ["p1"]),
        ({"iso"}, {"img-iso"}, False, "img-other", ["p1", "p2"]),
        ({"iso"}, {"img-iso"}, False, None, ["p1", "p2"]),
        ({"iso"}, set(), True, "img-iso", ["p2"]),  # no images: isolated hosts idle
        ({"iso"}, set(), False, "img-iso", ["p1", "p2"]),
        (set(), {"img-iso"}, True, "img-iso", []),  # nowhere to run it (Nova's too)
        (set(), {"img-iso"}, True, "img-other", ["p1", "p2"]),
        (set(), set(), True, None, ["p1", "p2"]),
    ],
)
def test_isolated_hosts(
    hosts: set[str], images: set[str], restrict: bool, image: str | None, expected: list[str]
) -> None:
    f = IsolatedHostsFilter(frozenset(hosts), frozenset(images), restrict)
    properties = {} if image is None else {"image_id": image}
    assert passing(f, ISOLATION, request(image_properties=properties)) == expected


def test_isolated_hosts_reasons() -> None:
    f = IsolatedHostsFilter(frozenset({"iso"}), frozenset({"img-iso"}))
    reasons = verdicts(f, ISOLATION, request(image_properties={"image_id": "img-iso"}))
    assert reasons["p2"] == "image img-iso is isolated and host 'plain' is not an isolated host"
    reasons = verdicts(f, ISOLATION, request())
    assert reasons["p1"] == "isolated host 'iso' takes isolated images only, not no image"


# --- AggregateMultiTenancyIsolation -------------------------------------------------------

TENANCY = build(
    [
        Provider("a", aggregates=frozenset({"t1"})),
        Provider("b", aggregates=frozenset({"t1", "t3"})),
        Provider("c", aggregates=frozenset({"open"})),
        Provider("d"),
        Provider("e", aggregates=frozenset({"blank"})),
        Provider("f", aggregates=frozenset({"t3", "open", "missing"})),
        Provider("g", metadata={"filter_tenant_id": "p9"}),  # only aggregates count
    ],
    aggregates=[
        Aggregate("t1", {"filter_tenant_id": "p1, p2"}),
        Aggregate("t3", {"filter_tenant_id_2": "p3", "filter_tenant_id": "p4"}),
        Aggregate("open", {"other": "x"}),
        Aggregate("blank", {"filter_tenant_id": " , "}),
    ],
)


@pytest.mark.parametrize(
    ("project", "expected"),
    [
        ("p1", ["a", "b", "c", "d", "e", "g"]),
        ("p2", ["a", "b", "c", "d", "e", "g"]),
        ("p3", ["b", "c", "d", "e", "f", "g"]),  # a prefixed key, pooled with t1's list
        ("p4", ["b", "c", "d", "e", "f", "g"]),
        ("p9", ["c", "d", "e", "g"]),
        ("", ["c", "d", "e", "g"]),
        ("p1, p2", ["c", "d", "e", "g"]),  # the list is split, not matched as text
    ],
)
def test_multi_tenancy_isolation(project: str, expected: list[str]) -> None:
    f = AggregateMultiTenancyIsolation()
    assert passing(f, TENANCY, request(project_id=project)) == expected


def test_multi_tenancy_reason() -> None:
    reasons = verdicts(AggregateMultiTenancyIsolation(), TENANCY, request(project_id="p9"))
    assert reasons["b"] == "project 'p9' is not a tenant of isolated aggregate t1, t3"


# --- AggregateTypeAffinityFilter --------------------------------------------------------

TYPES = build(
    [
        Provider("a", aggregates=frozenset({"small"})),
        Provider("b", aggregates=frozenset({"big"})),
        Provider("c", aggregates=frozenset({"small", "big"})),
        Provider("d", aggregates=frozenset({"plain"})),
        Provider("e"),
    ],
    aggregates=[
        Aggregate("small", {"instance_type": "m1.nano, m1.small"}),
        Aggregate("big", {"instance_type": "m1.large"}),
        Aggregate("plain", {"other": "m1.small"}),
    ],
)


@pytest.mark.parametrize(
    ("flavor", "expected"),
    [
        ("m1.small", ["a", "c", "d", "e"]),
        ("m1.nano", ["a", "c", "d", "e"]),
        ("m1.large", ["b", "c", "d", "e"]),  # one of the aggregates is enough
        ("m1.xlarge", ["d", "e"]),
        ("m1", ["d", "e"]),  # names match whole, not as substrings
        ("", ["d", "e"]),
    ],
)
def test_type_affinity(flavor: str, expected: list[str]) -> None:
    assert passing(AggregateTypeAffinityFilter(), TYPES, request(flavor_name=flavor)) == expected


def test_type_affinity_reason() -> None:
    reasons = verdicts(AggregateTypeAffinityFilter(), TYPES, request(flavor_name="m1.xlarge"))
    assert reasons["c"] == "flavor 'm1.xlarge' not in instance_type of aggregate big, small"


# --- SimpleCIDRAffinityFilter ------------------------------------------------------------

CIDR = build(
    [
        Provider("a", host_ip="10.1.2.3"),
        Provider("b", host_ip="10.1.3.4"),
        Provider("c", host_ip="192.168.0.1"),
        Provider("d"),
        Provider("e", host_ip="2001:db8::5"),
        Provider("f", host_ip="2001:db8:1::5"),
        Provider("g", host_ip="not-an-ip"),
    ]
)


@pytest.mark.parametrize(
    ("near", "cidr", "expected"),
    [
        (None, "/24", ["a", "b", "c", "d", "e", "f", "g"]),  # no hint passes
        ("", "/24", ["a", "b", "c", "d", "e", "f", "g"]),
        ("10.1.2.200", "/24", ["a"]),  # host bits of the hint are fine
        ("10.1.2.200", "/16", ["a", "b"]),
        ("10.1.2.200", "16", ["a", "b"]),  # the slash is optional
        ("10.1.2.3", "", ["a"]),  # the address alone
        ("10.1.2.3", "/32", ["a"]),
        ("10.9.9.9", "/0", ["a", "b", "c"]),  # every IPv4 host, no IPv6 one
        ("2001:db8::1", "/64", ["e"]),
        ("2001:db8::1", "/32", ["e", "f"]),
        ("2001:db8::1", "/24", ["e", "f"]),  # the default /24 is wide in IPv6
        ("2001:db8::1", "/0", ["e", "f"]),
    ],
)
def test_cidr_affinity(near: str | None, cidr: str, expected: list[str]) -> None:
    req = request(hints=Hints(build_near_host_ip=near, cidr=cidr))
    assert passing(SimpleCIDRAffinityFilter(), CIDR, req) == expected


def test_cidr_affinity_default_prefix_is_24() -> None:
    req = request(hints=Hints(build_near_host_ip="10.1.2.77"))
    assert passing(SimpleCIDRAffinityFilter(), CIDR, req) == ["a"]


@pytest.mark.parametrize(
    ("near", "cidr"),
    [("10.1.2.300", "/24"), ("10.1.2.3", "/33"), ("2001:db8::1", "/129"), ("host-1", "/24")],
)
def test_cidr_affinity_invalid_hint_rejects_every_provider(near: str, cidr: str) -> None:
    req = request(hints=Hints(build_near_host_ip=near, cidr=cidr))
    reasons = verdicts(SimpleCIDRAffinityFilter(), CIDR, req)
    assert all(
        (r or "").startswith("invalid build_near_host_ip/cidr hint") for r in reasons.values()
    )


def test_cidr_affinity_reasons() -> None:
    req = request(hints=Hints(build_near_host_ip="10.1.2.1"))
    reasons = verdicts(SimpleCIDRAffinityFilter(), CIDR, req)
    assert reasons["b"] == "host_ip 10.1.3.4 is outside 10.1.2.0/24"
    assert reasons["d"] == "has no host_ip to compare with 10.1.2.0/24"
    assert reasons["g"] == "host_ip 'not-an-ip' is not an IP address"


# --- RetryFilter ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tried", "expected"),
    [
        (set(), ["a", "b", "c"]),
        ({"a"}, ["b", "c"]),
        ({"a", "c", "gone"}, ["b"]),
    ],
)
def test_retry(tried: set[str], expected: list[str]) -> None:
    req = request(tried_providers=frozenset(tried))
    assert passing(RetryFilter(), HOSTS, req) == expected


def test_retry_reason() -> None:
    req = request(tried_providers=frozenset({"b"}))
    assert verdicts(RetryFilter(), HOSTS, req)["b"] == "already tried for this request"


# --- ProjectRestrictionFilter -----------------------------------------------------------

RESTRICTED = build(
    [
        Provider("a", metadata={"allowed_projects": "p1"}),
        Provider("b", aggregates=frozenset({"r1"})),
        Provider("c", aggregates=frozenset({"r2"})),
        Provider("d", aggregates=frozenset({"r3"})),
        Provider("e", aggregates=frozenset({"free"})),
        Provider("f", metadata={"allowed_projects": "p2"}, aggregates=frozenset({"r1"})),
        Provider("g", aggregates=frozenset({"r1", "r3"})),
        Provider("h", aggregates=frozenset({"ghost"})),
        Provider("i"),
        Provider("j", metadata={"allowed_member_groups": "empty"}),
    ],
    aggregates=[
        Aggregate("r1", {"allowed_projects": "p1, p2"}),
        Aggregate("r2", {"allowed_member_groups": "ops"}),
        Aggregate("r3", {"allowed_projects": "p1", "allowed_member_groups": "ops,"}),
        Aggregate("free", {"other": "p1"}),
        Aggregate("ghost", {"allowed_member_groups": "unknown"}),
    ],
)


@pytest.mark.parametrize(
    ("project", "expected"),
    [
        ("p1", ["a", "b", "d", "e", "g", "i"]),
        ("p2", ["b", "e", "f", "i"]),  # f: itself and r1 both admit p2
        ("p-ops1", ["c", "d", "e", "i"]),  # through the member group
        ("p-ops2", ["c", "d", "e", "i"]),
        ("p9", ["e", "i"]),
        ("", ["e", "i"]),
    ],
)
def test_project_restriction(project: str, expected: list[str]) -> None:
    f = ProjectRestrictionFilter({"ops": ["p-ops1", "p-ops2"], "empty": []})
    assert passing(f, RESTRICTED, request(project_id=project)) == expected


def test_project_restriction_without_member_groups() -> None:
    f = ProjectRestrictionFilter()
    assert passing(f, RESTRICTED, request(project_id="p-ops1")) == ["e", "i"]


def test_project_restriction_reasons() -> None:
    f = ProjectRestrictionFilter({"ops": ["p-ops1"]})
    reasons = verdicts(f, RESTRICTED, request(project_id="p1"))
    assert reasons["f"] == "project 'p1' is not allowed by provider metadata"
    assert reasons["c"] == "project 'p1' is not allowed by aggregate r2"
