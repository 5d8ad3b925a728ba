"""``berth provider``: an operator's changes to a provider, published as
events and, with ``--wait``, answered with the writer's decision (a real
``berth projector`` process decides them)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from berth.app import App, Settings
from berth.client import Decisions, Publisher
from consumers.partition_writer import catch_up_all
from projections.view.tables import inventories, providers
from tests.builders import claim
from tests.conftest import Cli
from tests.processes import berth_running


def _decision(out: str) -> dict[str, object]:
    """The writer's decision: the second line --wait prints."""
    published, decided = out.splitlines()
    assert set(json.loads(published)) == {"event_id", "partition", "offset"}
    result: dict[str, object] = json.loads(decided)
    return result


@pytest.fixture
def projector(tmp_path: Path) -> Iterator[list[str]]:
    """A running ``berth projector`` on a fresh data directory; the options
    that name it."""
    data = tmp_path / "data"
    with App(Settings(data_dir=data, partitions=2)):
        pass  # the log and view exist before the projector looks
    with berth_running("projector", "--data-dir", str(data)):
        yield ["--data-dir", str(data)]


def test_a_provider_set_up_from_the_command_line(tmp_path: Path, cli: Cli) -> None:
    data = ["--data-dir", str(tmp_path / "data"), "--partitions", "2"]
    assert cli("provider", "register", "n1", *data, "--name", "rack 1 node 1")[0] == 0
    inventory = ["VCPU=32,allocation_ratio=4.0", "MEMORY_MB=65536,reserved=512,step_size=256"]
    assert cli("provider", "inventory", "n1", *inventory, *data)[0] == 0
    assert cli("provider", "traits", "n1", "HW_GPU", "CUSTOM_FAST", *data)[0] == 0
    assert cli("provider", "aggregates", "n1", "rack-1", *data)[0] == 0
    assert cli("provider", "state", "n1", "disabled", *data)[0] == 0
    with App(Settings(data_dir=tmp_path / "data")) as app:
        catch_up_all(app.writers())
        with app.engine.connect() as conn:
            row = conn.execute(select(providers)).one()
            inv = {
                r.resource_class: (r.capacity, r.reserved, r.step_size)
                for r in conn.execute(select(inventories))
            }
    assert (row.provider_id, row.name, row.state) == ("n1", "rack 1 node 1", "disabled")
    assert sorted(row.traits) == ["CUSTOM_FAST", "HW_GPU"] and row.aggregates == ["rack-1"]
    assert inv == {"VCPU": (128, 0, 1), "MEMORY_MB": (65024, 512, 256)}


def test_wait_prints_the_writers_decision(projector: list[str], cli: Cli) -> None:
    code, out, _ = cli("provider", "register", "n1", *projector, "--wait")
    assert code == 0 and _decision(out)["kind"] == "applied"
    code, out, _ = cli("provider", "inventory", "n1", "VCPU=8", *projector, "--wait")
    assert code == 0 and _decision(out)["kind"] == "applied"
    with App(Settings(data_dir=Path(projector[1])), migrate=False) as app:
        decisions = Decisions(app.log, app.settings.topics)
        held = claim("r1", "n1", ts=1, VCPU=6)
        Publisher(app.log, app.settings.topics).publish([held])
        assert decisions.wait([held.event_id], 30) == []
    # shrinking below what is held is refused, with the reason
    code, out, _ = cli("provider", "inventory", "n1", "VCPU=4", *projector, "--wait")
    decision = _decision(out)
    assert code == 1 and decision["kind"] == "rejected"
    assert decision["reasons"] == [
        {
            "code": "INVENTORY_IN_USE",
            "provider_id": "n1",
            "resource_class": "VCPU",
            "requested": 6,
            "available": 4,
            "detail": "new capacity is below what is held and consumed",
        }
    ]
    code, out, _ = cli("provider", "state", "n1", "evacuating", *projector, "--wait")
    assert code == 0 and _decision(out)["kind"] == "applied"
    code, out, _ = cli("provider", "retire", "n9", *projector, "--wait")
    assert code == 1 and _decision(out)["reasons"] == [
        {"code": "PROVIDER_NOT_FOUND", "provider_id": "n9"}
    ]


def test_bad_arguments_and_no_writers(tmp_path: Path, cli: Cli) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    code, out, err = cli("provider", "inventory", "n1", "VCPU=8,ratio=2", *data)
    assert (code, out) == (2, "")
    assert "VCPU: unknown inventory field 'ratio'" in err
    code, _, err = cli("provider", "inventory", "n1", "VCPU", *data)
    assert code == 2 and "an inventory is CLASS=TOTAL[,FIELD=VALUE...]: not 'VCPU'" in err
    code, _, err = cli("provider", "inventory", "n1", "VCPU=1,reserved=5", *data)
    assert code == 2 and "reserved (5) exceeds total (1)" in err
    code, out, err = cli("provider", "register", "n1", *data, "--wait", "--timeout-s", "0.2")
    assert code == 3 and len(out.splitlines()) == 1
    assert err == "berth: no decision after 0.2 s (are the writers running?)\n"


def test_describe_and_report_metrics_then_the_engine_reads_them(
    projector: list[str], cli: Cli
) -> None:
    for pid in ("n1", "n2"):
        assert cli("provider", "register", pid, *projector, "--wait")[0] == 0
        assert cli("provider", "inventory", pid, "VCPU=8", *projector, "--wait")[0] == 0
    capabilities = json.dumps({"hypervisor_type": "QEMU", "hypervisor_version": 8002000})
    code, out, _ = cli(
        "provider",
        "describe",
        "n1",
        "--availability-zone",
        "az1",
        "--host-ip",
        "10.0.0.7",
        "--capabilities",
        capabilities,
        "--metadata",
        "rack=r2",
        *projector,
        "--wait",
    )
    assert code == 0 and _decision(out)["kind"] == "applied"
    code, out, _ = cli(
        "provider", "metrics", "n1", "cpu.percent=12.5", "--io-ops", "3", *projector, "--wait"
    )
    assert code == 0 and _decision(out)["kind"] == "applied"
    code, out, _ = cli("provider", "metrics", "n9", "cpu.percent=1", *projector, "--wait")
    assert code == 1 and _decision(out)["reasons"] == [
        {"code": "PROVIDER_NOT_FOUND", "provider_id": "n9"}
    ]
    code, out, _ = cli("explain", "--resources", "VCPU=1", "--availability-zone", "az1", *projector)
    assert code == 0 and "choice: n1" in out
    assert "n2: zone 'az1' wanted, provider is in nova (AvailabilityZoneFilter)" in out
    code, out, _ = cli("history", "n1", *projector, "--no-records")
    assert code == 0
    assert "    zone az1, host_ip 10.0.0.7" in out
    assert '    metadata {"rack": "r2"}' in out
    assert "cpu.percent=12.5; 3 I/O ops, 0 build failures" in out


def test_describe_and_metrics_refuse_bad_arguments(tmp_path: Path, cli: Cli) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    code, out, err = cli("provider", "describe", "n1", "--capabilities", "{nope", *data)
    assert (code, out) == (2, "") and "--capabilities is not JSON" in err
    code, _, err = cli(
        "provider", "describe", "n1", "--capabilities", '{"hypervisor_version": "8"}', *data
    )
    assert code == 2 and "capabilities.hypervisor_version must be int" in err
    code, _, err = cli("provider", "describe", "n1", "--host", "h", "--unset", "host", *data)
    assert code == 2 and "host: both given and unset" in err
    code, _, err = cli("provider", "describe", "n1", *data)
    assert code == 2 and "sets or unsets at least one field" in err
    code, _, err = cli("provider", "metrics", "n1", "cpu=high", *data)
    assert code == 2 and "metric cpu: 'high' is not a number" in err
    code, _, err = cli("provider", "metrics", "n1", "--io-ops", "-1", *data)
    assert code == 2 and "num_io_ops" in err


def test_explain_says_what_a_request_names_nothing(tmp_path: Path, cli: Cli) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    code, out, err = cli("explain", "--resources", "VCPU=1", "--cidr", "/24", *data)
    assert (code, out) == (2, "")
    assert "cidr without build_near_host_ip says nothing" in err
    code, _, err = cli("explain", "--resources", "VCPU=1", "--extra-spec", "nokey", *data)
    assert code == 2 and "--extra-spec KEY=VALUE, not 'nokey'" in err
    code, out, _ = cli(
        "explain", "--resources", "VCPU=1", "--image-property", "hw_architecture=x86_64", *data
    )
    assert code == 1 and "0 providers considered" in out


TOPOLOGY_TOML = """
[[numa_cells]]
cell_id = 0
cpus = [0, 1, 2, 3]
siblings = [[0, 1], [2, 3]]
shared = [0, 1]
dedicated = [2, 3]
memory_mb = 8192
huge_pages = [{ size_kb = 2048, total = 1024 }]

[[numa_cells]]
cell_id = 1
cpus = [4, 5, 6, 7]
dedicated = [4, 5, 6, 7]
memory_mb = 8192
socket = 1

[[pci_devices]]
address = "0000:81:00.0"
vendor_id = "8086"
product_id = "1572"
device_type = "type-PF"
numa_node = 1

[[pci_devices]]
address = "0000:81:00.1"
vendor_id = "8086"
product_id = "154c"
device_type = "type-VF"
parent_address = "0000:81:00.0"
numa_node = 1
physical_network = "physnet1"
"""


def test_describe_a_topology_from_a_file(projector: list[str], cli: Cli, tmp_path: Path) -> None:
    assert cli("provider", "register", "n1", *projector, "--wait")[0] == 0
    toml = tmp_path / "n1.toml"
    toml.write_text(TOPOLOGY_TOML)
    code, out, _ = cli("provider", "describe", "n1", "--topology", str(toml), *projector, "--wait")
    assert code == 0 and _decision(out)["kind"] == "applied"
    # devices alone, from JSON, on a cell n1 does not have: the writer refuses
    moved = tmp_path / "devices.json"
    moved.write_text(
        json.dumps(
            {
                "pci_devices": [
                    {"address": "0000:3b:00.0", "vendor_id": "10de", "product_id": "1db4",
                     "numa_node": 2}
                ]
            }
        )
    )  # fmt: skip
    code, out, _ = cli("provider", "describe", "n1", "--topology", str(moved), *projector, "--wait")
    assert code == 1 and _decision(out)["reasons"] == [
        {
            "code": "NUMA_CELL_NOT_DESCRIBED",
            "provider_id": "n1",
            "detail": "device 0000:3b:00.0 is on NUMA cell 2, which is not described",
        }
    ]
    code, out, _ = cli("history", "n1", *projector, "--no-records")
    assert code == 0
    assert (
        "    NUMA cell 0: cpus 0-3, dedicated 2-3, shared 0-1, siblings 0-1 2-3, 8192 MiB, "
        "1024 pages of 2048 KiB" in out
    )
    assert "    NUMA cell 1: cpus 4-7, dedicated 4-7, 8192 MiB, socket 1" in out
    assert (
        "    PCI 0000:81:00.1 type-VF: 8086:154c, of 0000:81:00.0, cell 1, network physnet1" in out
    )
    assert "PCI 0000:3b:00.0" not in out
    assert "(device 0000:3b:00.0 is on NUMA cell 2, which is not described)" in out
    code, out, _ = cli("provider", "describe", "n1", "--unset", "pci_devices", *projector, "--wait")
    assert code == 0 and _decision(out)["kind"] == "applied"
    code, out, _ = cli("history", "n1", *projector, "--no-records")
    assert "NUMA cell 1" in out and "PCI" not in out


def test_a_topology_file_the_edge_refuses(tmp_path: Path, cli: Cli) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    bad = tmp_path / "bad.toml"
    bad.write_text(TOPOLOGY_TOML.replace("cpus = [4, 5, 6, 7]", "cpus = [3, 4, 5, 6, 7]"))
    code, out, err = cli("provider", "describe", "n1", "--topology", str(bad), *data)
    assert (code, out) == (2, "") and "CPU 3 is in cell 0 and in cell 1" in err
    other = tmp_path / "other.json"
    other.write_text('{"numa_cells": [], "host": "h1"}')
    code, _, err = cli("provider", "describe", "n1", "--topology", str(other), *data)
    assert code == 2 and "gives numa_cells or pci_devices, not host" in err
    code, _, err = cli("provider", "describe", "n1", "--topology", str(tmp_path / "no"), *data)
    assert code == 2 and "No such file or directory" in err
    broken = tmp_path / "broken.toml"
    broken.write_text("[[numa_cells]\n")
    code, _, err = cli("provider", "describe", "n1", "--topology", str(broken), *data)
    assert code == 2 and f"--topology {broken}:" in err
    with App(Settings(data_dir=tmp_path / "data")) as app:
        assert app.log.end_offset(app.settings.topics.events, 0) == 0
