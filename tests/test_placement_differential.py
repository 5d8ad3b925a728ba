"""Berth against the real thing: the same random sequence of Placement API
calls (creates, deletes, inventories, traits, aggregates, allocations with
and without generations, candidates) is sent to a reference Placement,
started from the installed ``openstack-placement`` on SQLite, and to a
``berth serve --placement-api``; every answer must have the same status,
error code and body (error bodies up to their request ids).

Both servers live for the whole module and see every example's calls, in
the same order, so their states stay equal as long as their answers do;
each example works on providers and consumers of its own (uuids the test
makes, sent to both). ``PLACEMENT_DIFF_EXAMPLES`` sets how many examples
(a long run on demand); CI runs a bounded number."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.placement_gabbits import forked_berth_server
from bench.placement_reference import reference_server

EXAMPLES = int(os.environ.get("PLACEMENT_DIFF_EXAMPLES", "12"))
PROVIDERS = 3
CONSUMERS = 2
TRAITS = [
    "CUSTOM_DIFF_GOLD",
    "HW_CPU_X86_AVX",
    "CUSTOM_DIFF_SILVER",
    "MISC_SHARES_VIA_AGGREGATE",  # a sharing provider: its inventory serves its aggregates
]
AGGREGATES = ["a0d4a9e4-0a3c-4a54-8b8e-1d3f3b0e2c01", "a0d4a9e4-0a3c-4a54-8b8e-1d3f3b0e2c02"]
GENERATIONS = st.sampled_from(["current", "stale"])

Call = tuple[Any, ...]
BARE_PROVIDERS = re.compile(r"on resource provider '([^']*)' invalid")

PROVIDER = st.integers(0, PROVIDERS - 1)
CONSUMER_GENERATIONS = st.sampled_from(["none", "current", "stale"])
ALLOCATION = st.tuples(
    st.integers(0, CONSUMERS - 1), PROVIDER, st.integers(0, 6), st.integers(0, 40)
)
"""A consumer's allocation: on which provider, VCPU and DISK_GB."""

CALLS: st.SearchStrategy[Call] = st.one_of(
    # a provider, a duplicate name or not, a parent (one of the example's) or none
    st.tuples(st.just("create"), PROVIDER, st.booleans(), st.none() | PROVIDER),
    st.tuples(st.just("reparent"), PROVIDER, st.none() | PROVIDER),
    st.tuples(st.just("delete"), PROVIDER),
    st.tuples(
        st.just("inventory"),
        PROVIDER,
        st.integers(0, 8),
        st.sampled_from([0, 0, 50]),  # DISK_GB, which a sharing provider may serve
        GENERATIONS,
    ),
    st.tuples(
        st.just("traits"),
        st.integers(0, PROVIDERS - 1),
        st.lists(st.sampled_from(TRAITS), unique=True),
        GENERATIONS,
    ),
    st.tuples(
        st.just("aggregates"),
        st.integers(0, PROVIDERS - 1),
        st.lists(st.sampled_from(AGGREGATES), unique=True),
        GENERATIONS,
    ),
    st.tuples(
        st.just("allocate"),
        st.integers(0, CONSUMERS - 1),
        st.integers(0, PROVIDERS - 1),
        st.integers(0, 6),
        st.sampled_from(["none", "current", "stale", "1.12"]),
    ),
    # several consumers at once (1.13), each with its consumer generation
    st.tuples(
        st.just("post"),
        st.lists(st.tuples(ALLOCATION, CONSUMER_GENERATIONS), min_size=1, max_size=2),
    ),
    # the reshaper (1.30): a provider's new inventories, a consumer's new allocations
    st.tuples(
        st.just("reshape"),
        PROVIDER,
        st.integers(0, 8),
        st.sampled_from([0, 50]),
        GENERATIONS,
        st.lists(st.tuples(ALLOCATION, CONSUMER_GENERATIONS), max_size=2),
    ),
    st.tuples(st.just("unallocate"), st.integers(0, CONSUMERS - 1)),
    st.tuples(
        st.just("candidates"),
        st.integers(1, 6),
        st.sampled_from([0, 0, 10]),
        st.sampled_from([None, *TRAITS]),
    ),
    st.tuples(st.just("usages"), PROVIDER),
)


@dataclass
class Example:
    """The providers and consumers of one example: same uuids on both sides."""

    providers: list[str]
    consumers: list[str]
    duplicate_name: str
    spare: str = ""  # a consumer of one call's own, new for each call


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: Any = None
    version: str = "latest"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, ...]]:
    root = tmp_path_factory.mktemp("differential")
    # Placement 16 on oslo.policy 6 enforces its new defaults: Berth is
    # started so; the caller is admin and service, as Nova is, so that the
    # reshaper (role:service) is open to it on both
    secure = ("--placement-policy", "secure")
    caller = {"x-auth-token": "admin", "x-roles": "admin,service"}
    with (
        reference_server(root / "reference.db") as ref,
        forked_berth_server(root / "berth", *secure) as mine,
    ):
        clients = tuple(
            httpx.Client(base_url=f"http://{h}:{p}", headers=caller, timeout=30)
            for h, p in (ref, mine)
        )
        for client in clients:
            for trait in TRAITS:
                if trait.startswith("CUSTOM_"):
                    client.put(f"/traits/{trait}", headers=_version("latest"))
        yield clients
        for client in clients:
            client.close()


def _version(version: str) -> dict[str, str]:
    return {"openstack-api-version": f"placement {version}"}


def _send(client: httpx.Client, request: Request) -> tuple[int, Any]:
    answer = client.request(
        request.method, request.path, json=request.body, headers=_version(request.version)
    )
    return answer.status_code, _normal(request.path, answer)


def _normal(path: str, answer: httpx.Response) -> Any:
    """The body up to what may differ: request ids, candidates' order."""
    if not answer.content:
        return None
    body = answer.json()
    for error in body.get("errors", []) if isinstance(body, dict) else []:
        error.pop("request_id", None)
        # a JSON Schema refusal ends with a dump of the schema: Berth's bounds
        # amounts (maximum 2**31 - 1), Placement's does not; the message before
        # it must match
        error["detail"] = error["detail"].split("  Failed validating")[0]
        # Placement names several providers without inventory in a set's
        # (random) order; Berth sorts them
        error["detail"] = BARE_PROVIDERS.sub(
            lambda m: f"on resource provider '{', '.join(sorted(m[1].split(', ')))}' invalid",
            error["detail"],
        )
    if isinstance(body, dict):
        # Placement lists a provider's traits and aggregates in no set order
        for unordered in ("traits", "aggregates"):
            if isinstance(body.get(unordered), list):
                body[unordered].sort()
    if path.startswith("/allocation_candidates") and answer.status_code == 200:
        body["allocation_requests"].sort(key=lambda r: json.dumps(r, sort_keys=True))
        for summary in body["provider_summaries"].values():
            summary.get("traits", []).sort()
    return body


def _generation(client: httpx.Client, rp: str, mode: str) -> int:
    got = client.get(f"/resource_providers/{rp}", headers=_version("latest"))
    current = int(got.json()["generation"]) if got.status_code == 200 else 0
    return current if mode == "current" else current - 1


def _consumer_generation(client: httpx.Client, consumer: str, mode: str) -> int | None:
    if mode == "none":
        return None
    got = client.get(f"/allocations/{consumer}", headers=_version("latest")).json()
    current = got.get("consumer_generation")
    if mode == "current":
        return current if current is None else int(current)
    return 0 if current is None else int(current) - 1


def _request(client: httpx.Client, call: Call, ex: Example) -> Request:
    kind = call[0]
    if kind == "create":
        rp = ex.providers[call[1]]
        name = ex.duplicate_name if call[2] else f"rp-{rp}"
        body = {"uuid": rp, "name": name}
        if call[3] is not None:
            body["parent_provider_uuid"] = ex.providers[call[3]]
        return Request("POST", "/resource_providers", body)
    if kind == "reparent":
        rp = ex.providers[call[1]]
        parent = None if call[2] is None else ex.providers[call[2]]
        return Request(
            "PUT", f"/resource_providers/{rp}", {"name": f"rp-{rp}", "parent_provider_uuid": parent}
        )
    if kind == "delete":
        return Request("DELETE", f"/resource_providers/{ex.providers[call[1]]}")
    if kind in ("inventory", "traits", "aggregates"):
        return _provider_write(client, call, ex)
    if kind == "allocate":
        return _allocation(client, call, ex)
    if kind == "post":
        return Request("POST", "/allocations", _consumers(client, call[1], ex))
    if kind == "reshape":
        return _reshape(client, call, ex)
    if kind == "unallocate":
        return Request("DELETE", f"/allocations/{ex.consumers[call[1]]}")
    if kind == "candidates":
        query = f"resources=VCPU:{call[1]}" + (f",DISK_GB:{call[2]}" if call[2] else "")
        query += f"&required={call[3]}" if call[3] else ""
        return Request("GET", f"/allocation_candidates?{query}")
    return Request("GET", f"/resource_providers/{ex.providers[call[1]]}/usages")


def _inventories(vcpus: int, disk: int) -> dict[str, Any]:
    inventories: dict[str, Any] = {}
    if vcpus:
        inventories |= {"VCPU": {"total": vcpus}, "MEMORY_MB": {"total": 1024}}
    if disk:
        inventories["DISK_GB"] = {"total": disk}
    return inventories


def _provider_write(client: httpx.Client, call: Call, ex: Example) -> Request:
    kind, index, value, mode = call[0], call[1], call[2], call[-1]
    rp = ex.providers[index]
    generation = _generation(client, rp, mode)
    if kind == "inventory":
        body = {
            "resource_provider_generation": _generation(client, rp, call[4]),
            "inventories": _inventories(value, call[3]),
        }
        return Request("PUT", f"/resource_providers/{rp}/inventories", body)
    field = "traits" if kind == "traits" else "aggregates"
    body = {"resource_provider_generation": generation, field: value}
    return Request("PUT", f"/resource_providers/{rp}/{field}", body)


def _allocation(client: httpx.Client, call: Call, ex: Example) -> Request:
    _, c, index, vcpus, mode = call
    consumer, rp = ex.consumers[c], ex.providers[index]
    if client.get(f"/resource_providers/{rp}", headers=_version("latest")).status_code == 404:
        # Placement keeps the consumer of a write refused for a missing
        # provider (generation 0, no allocations) where Berth writes nothing
        # for it: a consumer used once keeps that known difference out
        consumer = ex.spare
    body: dict[str, Any] = {
        "allocations": {rp: {"resources": {"VCPU": vcpus}}},
        "project_id": "p1",
        "user_id": "u1",
    }
    if mode == "1.12":
        return Request("PUT", f"/allocations/{consumer}", body, "1.12")
    body["consumer_generation"] = _consumer_generation(client, consumer, mode)
    body["consumer_type"] = "INSTANCE"
    return Request("PUT", f"/allocations/{consumer}", body)


def _consumers(client: httpx.Client, allocations: list[Any], ex: Example) -> dict[str, Any]:
    """The body of several consumers' allocations (``POST /allocations``, the
    reshaper's): a consumer named twice has the providers of both."""
    body: dict[str, Any] = {}
    for (c, index, vcpus, disk), mode in allocations:
        consumer, rp = ex.consumers[c], ex.providers[index]
        if client.get(f"/resource_providers/{rp}", headers=_version("latest")).status_code == 404:
            consumer = ex.spare  # as in _allocation
        resources = {"VCPU": vcpus} | ({"DISK_GB": disk} if disk else {})
        spec = body.setdefault(
            consumer,
            {
                "allocations": {},
                "project_id": "p1",
                "user_id": "u1",
                "consumer_generation": _consumer_generation(client, consumer, mode),
                "consumer_type": "INSTANCE",
            },
        )
        spec["allocations"][rp] = {"resources": resources}
    return body


def _reshape(client: httpx.Client, call: Call, ex: Example) -> Request:
    _, index, vcpus, disk, mode, allocations = call
    rp = ex.providers[index]
    inventories = {
        rp: {
            "resource_provider_generation": _generation(client, rp, mode),
            "inventories": _inventories(vcpus, disk),
        }
    }
    body = {"inventories": inventories, "allocations": _consumers(client, allocations, ex)}
    return Request("POST", "/reshaper", body)


def _final_reads(ex: Example) -> list[Request]:
    reads = [Request("GET", f"/allocations/{c}") for c in ex.consumers]
    for rp in ex.providers:
        reads += [
            Request("GET", f"/resource_providers/{rp}{tail}")
            for tail in ("", "/inventories", "/traits", "/aggregates", "/allocations", "/usages")
        ]
    reads += [Request("GET", f"/resource_providers?in_tree={rp}") for rp in ex.providers]
    return reads


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(calls=st.lists(CALLS, min_size=1, max_size=12))
def test_berth_answers_as_placement_does(
    servers: tuple[httpx.Client, httpx.Client], calls: list[Call]
) -> None:
    ex = Example(
        providers=[str(uuid.uuid4()) for _ in range(PROVIDERS)],
        consumers=[str(uuid.uuid4()) for _ in range(CONSUMERS)],
        duplicate_name=f"dup-{uuid.uuid4()}",
    )
    reference, berth = servers
    for call in calls:
        ex.spare = str(uuid.uuid4())
        sent = (_request(reference, call, ex), _request(berth, call, ex))
        _same(call, _send(reference, sent[0]), _send(berth, sent[1]))
    for read in _final_reads(ex):
        _same(read, _send(reference, read), _send(berth, read))


def _same(what: object, placement: tuple[int, Any], berth: tuple[int, Any]) -> None:
    assert placement == berth, f"{what}\nplacement: {placement!r}\nberth:     {berth!r}"
