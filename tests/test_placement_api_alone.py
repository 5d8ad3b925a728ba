"""``berth placement-api``: OpenStack Placement's API served by processes of
its own, the writers deciding its writes in another (``berth serve``).
Two of them share one address (``--reuse-port``), as Placement runs under
several WSGI processes: concurrent writes through both never overcommit,
what one answered any other reads back, and the address keeps answering
while one of them stops. On Kafka and PostgreSQL, beside a worker group
whose member holding Placement's partition is killed. Real processes,
over real HTTP."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.placement_gabbits import child_server
from berth.app import App, Settings
from berth.cli import main
from berth.client import Publisher
from schemas.events import PLACEMENT_KEY
from tests.group_workers import holders, owner_pid, wait_for_assignment, worker_group
from tests.kafka_broker import running_tansu
from tests.postgres import scratch_database
from tests.processes import serving

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.38"}
PARTITIONS = 4


def _front_end(data: Path, listen: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "berth.cli",
        "placement-api",
        "--data-dir",
        str(data),
        "--listen",
        listen,
        "--reuse-port",
    ]


@contextmanager
def _deployment(tmp_path: Path, front_ends: int) -> Iterator[tuple[str, list[Callable[[], None]]]]:
    """``berth serve`` (the writers) and ``front_ends`` placement-api
    processes on one address; the address, and what stops each front end
    (early, if a test wants; they all stop with the block)."""
    data = tmp_path / "data"
    assert main(["migrate", "--data-dir", str(data), "--partitions", str(PARTITIONS)]) == 0
    with serving(data, PARTITIONS), ExitStack() as every:
        stops = []
        listen = "127.0.0.1:0"  # the first on any free port, the others on its
        for n in range(front_ends):
            one = every.enter_context(ExitStack())
            started = child_server(
                _front_end(data, listen), tmp_path / f"{n}.stderr", "placement-api"
            )
            listen = "{}:{}".format(*one.enter_context(started))
            stops.append(one.close)
        yield f"http://{listen}", stops


def _fresh(base: str) -> httpx.Client:
    """A client whose every request opens a connection of its own, which
    the kernel gives to either process."""
    return httpx.Client(
        base_url=base,
        headers=HEADERS,
        timeout=60,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def _provider(api: httpx.Client, vcpus: int) -> str:
    rp = str(uuid.uuid4())
    created = api.post("/resource_providers", json={"name": f"cn-{rp}", "uuid": rp})
    assert created.status_code == 200, created.text
    body = {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": vcpus}}}
    put = api.put(f"/resource_providers/{rp}/inventories", json=body)
    assert put.status_code == 200, put.text
    return rp


def _allocation(rp: str, vcpus: int) -> dict[str, Any]:
    return {
        "allocations": {rp: {"resources": {"VCPU": vcpus}}},
        "project_id": "p1",
        "user_id": "u1",
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }


def test_two_front_ends_on_one_address_never_overcommit(tmp_path: Path) -> None:
    with _deployment(tmp_path, front_ends=2) as (base, _), _fresh(base) as api:
        rp = _provider(api, vcpus=8)

        def write(_: int) -> int:
            with _fresh(base) as own:
                return own.put(f"/allocations/{uuid.uuid4()}", json=_allocation(rp, 1)).status_code

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(write, range(24)))
        assert sorted(statuses) == [204] * 8 + [409] * 16
        usages = api.get(f"/resource_providers/{rp}/usages").json()
        assert usages["usages"] == {"VCPU": 8}
        assert usages["resource_provider_generation"] == 1 + 8  # inventory, then each allocation


def test_what_one_front_end_answered_any_reads_back(tmp_path: Path) -> None:
    with _deployment(tmp_path, front_ends=2) as (base, _), _fresh(base) as api:
        rp = _provider(api, vcpus=64)
        for n in range(16):
            consumer = str(uuid.uuid4())
            put = api.put(f"/allocations/{consumer}", json=_allocation(rp, 1))
            assert put.status_code == 204, put.text
            read = api.get(f"/allocations/{consumer}").json()
            assert read["allocations"][rp]["resources"] == {"VCPU": 1}, n
            assert read["consumer_generation"] == 1
        usages = api.get(f"/resource_providers/{rp}/usages").json()["usages"]
        assert usages == {"VCPU": 16}


def test_the_address_keeps_answering_while_one_front_end_stops(tmp_path: Path) -> None:
    with _deployment(tmp_path, front_ends=2) as (base, stops), _fresh(base) as api:
        rp = _provider(api, vcpus=8)
        stops[1]()  # stopped as a supervisor stops it
        for _ in range(8):  # each on a connection of its own: all to the one left
            put = api.put(f"/allocations/{uuid.uuid4()}", json=_allocation(rp, 1))
            assert put.status_code == 204, put.text
        assert api.get(f"/resource_providers/{rp}/usages").json()["usages"] == {"VCPU": 8}


def test_a_taken_address_or_a_malformed_one_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert main(["migrate", "--data-dir", str(data)]) == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = _refused(data, f"127.0.0.1:{port}")
    assert f"did not start listening on 127.0.0.1:{port}" in busy
    assert "HOST:PORT, not 'nowhere'" in _refused(data, "nowhere")


def _refused(data: Path, listen: str) -> str:
    """``berth placement-api`` on ``listen``, which must exit 2 at once: its stderr."""
    command = [*_front_end(data, listen)]
    command.remove("--reuse-port")  # a port another socket holds is taken
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    return done.stderr


@pytest.mark.alone  # a faust worker's 4 s session: see tests/test_worker_group.py
def test_a_front_end_beside_a_worker_group_on_kafka_and_postgresql(tmp_path: Path) -> None:
    """The production shape: ``berth worker`` processes in a consumer group
    decide, a ``berth placement-api`` answers; a worker killed mid-way is
    replaced by the other, and the front end's writes go on."""
    with running_tansu() as bootstrap, scratch_database() as url:
        settings = Settings(log_url=f"kafka://{bootstrap}", db_url=url, partitions=3)
        backend = ["--log", settings.log_url, "--db", url, "--partitions", "3"]
        assert main(["migrate", *backend]) == 0
        with App(settings) as app, worker_group(settings, tmp_path) as group:
            first, second = group.start(), group.start()
            wait_for_assignment(app.engine, [first, second], 3, timeout_s=60)
            command = [*_front_end(tmp_path / "unused", "127.0.0.1:0")]
            command[command.index("--data-dir") : command.index("--data-dir") + 2] = backend
            with (
                child_server(command, tmp_path / "front.stderr", "placement-api") as address,
                _fresh("http://{}:{}".format(*address)) as api,
            ):
                rp = _provider(api, vcpus=8)
                placed = [api.put(f"/allocations/{uuid.uuid4()}", json=_allocation(rp, 1))]
                holder = owner_pid(holders(app.engine)[_placement_partition(app)])
                group.signal(holder, signal.SIGKILL)
                placed += [
                    api.put(f"/allocations/{uuid.uuid4()}", json=_allocation(rp, 1))
                    for _ in range(9)
                ]
                assert [p.status_code for p in placed] == [204] * 8 + [409] * 2
                usages = api.get(f"/resource_providers/{rp}/usages").json()["usages"]
                assert usages == {"VCPU": 8}


def _placement_partition(app: App) -> int:
    return Publisher(app.log, app.settings.topics).partition_of(PLACEMENT_KEY)
