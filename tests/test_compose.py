"""Static checks of docker-compose.yml: the services are wired to each other.

No Docker engine is needed; the file is only parsed.
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
BERTH_SERVICES = (
    "berth-migrate",
    "berth-worker",
    "berth-metrics",
    "berth-api",
    "berth-placement",
)


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    return services


def env(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict (compose allows a mapping or a list)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    return {key: str(value) for key, value in raw.items()}


def argv(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def option(args: list[str], name: str) -> list[str]:
    """Values of ``--name value`` and ``--name=value`` in ``args``."""
    values = [b for a, b in itertools.pairwise(args) if a == name]
    return values + [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` as ``{NAME: (host, port)}`` (empty host = all interfaces)."""
    parsed = {}
    for item in value.split(","):
        name, _, address = item.strip().partition("://")
        host, _, port = address.rpartition(":")
        parsed[name] = (host, int(port))
    return parsed


def kafka_ports(services: dict[str, Any]) -> set[int]:
    """Ports of the kafka service's client (non-controller) listeners."""
    kafka = env(services["kafka"])
    controllers = set(kafka["KAFKA_CONTROLLER_LISTENER_NAMES"].split(","))
    found = listeners(kafka["KAFKA_LISTENERS"]).items()
    return {port for name, (_, port) in found if name not in controllers}


def test_services_exist(services: dict[str, Any]) -> None:
    assert {"kafka", "postgres", *BERTH_SERVICES} <= services.keys()


def test_kafka_runs_kraft_without_zookeeper(services: dict[str, Any]) -> None:
    for name, service in services.items():
        assert "zookeeper" not in name.lower()
        assert "zookeeper" not in str(service.get("image", "")).lower()
        assert not any("ZOOKEEPER" in key.upper() for key in env(service))

    kafka = env(services["kafka"])
    assert {"broker", "controller"} <= set(kafka["KAFKA_PROCESS_ROLES"].split(","))
    assert kafka["CLUSTER_ID"], "the apache/kafka image refuses KRaft mode without CLUSTER_ID"

    found = listeners(kafka["KAFKA_LISTENERS"])
    protocols = dict(p.split(":") for p in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert found.keys() <= protocols.keys()
    controller_names = kafka["KAFKA_CONTROLLER_LISTENER_NAMES"].split(",")
    assert set(controller_names) <= found.keys()
    controller_port = found[controller_names[0]][1]

    voters = [v.partition("@") for v in kafka["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")]
    assert (kafka["KAFKA_NODE_ID"], "@", f"kafka:{controller_port}") in voters


def test_kafka_advertises_its_service_name(services: dict[str, Any]) -> None:
    kafka = env(services["kafka"])
    advertised = listeners(kafka["KAFKA_ADVERTISED_LISTENERS"])
    assert advertised
    for host, port in advertised.values():
        assert host == "kafka"
        assert port in kafka_ports(services)


def test_kafka_is_configured_for_one_node(services: dict[str, Any]) -> None:
    kafka = env(services["kafka"])
    assert kafka["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
        "KAFKA_MIN_INSYNC_REPLICAS",
    ):
        assert kafka[key] == "1", key


def test_log_urls_point_at_kafka(services: dict[str, Any]) -> None:
    for name in BERTH_SERVICES:
        service = services[name]
        urls = [env(service)["BERTH_LOG"], *option(argv(service), "--log")]
        for url in urls:
            parts = urlsplit(url)
            assert parts.scheme == "kafka", (name, url)
            assert parts.hostname == "kafka", (name, url)
            assert parts.port in kafka_ports(services), (name, url)


def test_db_urls_point_at_postgres(services: dict[str, Any]) -> None:
    postgres = env(services["postgres"])
    user = postgres["POSTGRES_USER"]
    database = postgres.get("POSTGRES_DB", user)
    for name in BERTH_SERVICES:
        service = services[name]
        urls = [env(service)["BERTH_DB"], *option(argv(service), "--db")]
        for url in urls:
            parts = urlsplit(url)
            assert parts.scheme == "postgresql+psycopg", (name, url)
            assert (parts.hostname, parts.port or 5432) == ("postgres", 5432), (name, url)
            assert parts.username == user, (name, url)
            assert parts.password == postgres["POSTGRES_PASSWORD"], (name, url)
            assert parts.path.lstrip("/") == database, (name, url)


def test_startup_order(services: dict[str, Any]) -> None:
    def conditions(name: str) -> dict[str, str]:
        return {dep: spec["condition"] for dep, spec in services[name]["depends_on"].items()}

    assert conditions("berth-migrate") == {"postgres": "service_healthy"}
    for worker in ("berth-worker", "berth-metrics", "berth-api", "berth-placement"):
        assert conditions(worker) == {
            "kafka": "service_healthy",
            "postgres": "service_healthy",
            "berth-migrate": "service_completed_successfully",
        }
        assert services[worker]["restart"] == "unless-stopped"


def test_healthchecks(services: dict[str, Any]) -> None:
    kafka_check = services["kafka"]["healthcheck"]["test"]
    assert "/opt/kafka/bin/kafka-broker-api-versions.sh" in kafka_check
    bootstrap = option(kafka_check, "--bootstrap-server")
    assert bootstrap and int(bootstrap[0].rpartition(":")[2]) in kafka_ports(services)

    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]


def test_workers_scale_by_replicas_in_one_group(services: dict[str, Any]) -> None:
    """No hand-split partitions: the consumer group assigns them, and the
    workers also schedule and tick (no separate scheduler or reaper)."""
    from berth.cli import build_parser

    service = services["berth-worker"]
    assert service["deploy"]["replicas"] > 1
    args = build_parser().parse_args(argv(service))
    assert args.command == "worker"
    assert not args.writers_only and args.tick_every_s > 0
    assert not args.group  # every replica joins the one default group
    assert not {"berth-projector", "berth-scheduler", "berth-reaper"} & services.keys()


def test_the_worker_s_healthcheck_is_a_berth_command(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It runs beside the entrypoint, so it names ``berth`` itself, and it
    reaches Kafka and PostgreSQL through the service's environment."""
    from berth.cli import build_parser

    service = services["berth-worker"]
    check = service["healthcheck"]["test"]
    assert check[:2] == ["CMD", "berth"]
    for key, value in env(service).items():
        monkeypatch.setenv(key, value)
    args = build_parser().parse_args(check[2:])
    assert args.command == "status" and args.max_behind > 0
    assert args.lag  # it runs every 30 s: no table scans


@pytest.mark.parametrize(
    ("name", "command"),
    [("berth-metrics", "metrics"), ("berth-api", "api"), ("berth-placement", "placement-api")],
)
def test_a_server_listens_where_it_says_on_the_compose_network(
    services: dict[str, Any], name: str, command: str
) -> None:
    from berth.cli import build_parser

    service = services[name]
    args = build_parser().parse_args(argv(service))
    assert args.command == command
    host, _, port = args.listen.rpartition(":")
    assert host == "0.0.0.0"  # reachable from the other containers, not only itself
    assert [str(p) for p in service["expose"]] == [port]
    assert "ports" not in service  # nothing published to the host


def test_the_api_takes_its_token_from_the_host(services: dict[str, Any]) -> None:
    assert env(services["berth-api"])["BERTH_API_TOKEN"] == "${BERTH_API_TOKEN:-}"


def test_declared_volumes_are_the_used_ones() -> None:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    used = set()
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            if not source.startswith(("/", ".", "~")):  # named volume, not a bind mount
                used.add(source)
    assert used == set(compose.get("volumes") or {})


def test_build_context_has_a_dockerfile(services: dict[str, Any]) -> None:
    for name in BERTH_SERVICES:
        build = services[name]["build"]
        if isinstance(build, str):
            build = {"context": build}
        context = (COMPOSE_FILE.parent / build["context"]).resolve()
        assert context.is_dir(), name
        assert (context / build.get("dockerfile", "Dockerfile")).is_file(), name


def test_image_entrypoint_is_the_berth_cli() -> None:
    # The compose commands below are arguments to this entrypoint.
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["berth"\]\s*$', dockerfile, re.MULTILINE)


@pytest.mark.parametrize("name", BERTH_SERVICES)
def test_commands_are_accepted_by_the_cli(
    services: dict[str, Any], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from berth.cli import build_parser

    for key, value in env(services[name]).items():
        monkeypatch.setenv(key, value)
    args = argv(services[name])
    assert args, f"{name} has no command"
    try:
        build_parser().parse_args(args)
    except SystemExit as exc:
        pytest.fail(f"berth CLI rejects {name}'s command {args}: exit {exc.code}")


def test_image_runs_the_compiled_core() -> None:
    # the build stage compiles, installs, and fails unless what the installed
    # package imports is compiled; the image itself has no C compiler
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", dockerfile, flags=re.MULTILINE)[1:]
    assert len(stages) == 2
    build, image = stages
    steps = [
        "python -m berth.compile build",
        "pip install --no-cache-dir --no-deps --force-reinstall .",
        "cd / && python -m berth.compile check",
    ]
    positions = [build.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), positions
    assert "COPY --from=build /opt/berth /opt/berth" in image
    assert "gcc" not in image
