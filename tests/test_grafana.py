"""The Grafana dashboard (deploy/grafana) against what `berth metrics`
really serves: every metric a panel queries is in a real scrape of a
running exporter on a demo's data, and every label a legend names is one
of its labels; and the provisioning is wired as docker-compose.yml runs it
(Prometheus scrapes the exporter where it listens, Grafana's data source is
that Prometheus, under the uid the panels name, the dashboards' folder is
the one mounted)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.kafka_broker import free_port
from tests.processes import berth_running
from tests.test_compose import argv, option

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "berth.json"
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
METRIC = re.compile(r"\bberth_[a-z_]+\b")
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def targets() -> list[dict[str, Any]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t for p in panels for t in p.get("targets", ())]


def test_the_dashboard_queries_berth_s_metrics() -> None:
    found = targets()
    assert len(found) >= 20
    assert all(METRIC.search(t["expr"]) for t in found)


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, set[str]]]:
    """A real scrape of ``berth metrics`` on a demo's data, with the
    headroom shapes docker-compose.yml gives it: each name a query may use
    (a counter's with ``_total``), and the labels of its samples."""
    data = tmp_path_factory.mktemp("grafana") / "data"
    demo = [sys.executable, "-m", "berth.cli", "demo", "--data-dir", str(data), "--json"]
    demo += ["--providers", "30", "--requests", "300", "--partitions", "2", "--batch-size", "10"]
    subprocess.run(demo, check=True, stdout=subprocess.DEVNULL, timeout=240)
    shapes = option(argv(COMPOSE["berth-metrics"]), "--headroom")
    assert shapes, "docker-compose.yml's exporter measures no headroom for the dashboard"
    port = free_port()
    metrics_argv = ["metrics", "--data-dir", str(data), "--partitions", "2"]
    metrics_argv += ["--listen", f"127.0.0.1:{port}"]
    for shape in shapes:
        metrics_argv += ["--headroom", shape]
    url = f"http://127.0.0.1:{port}/metrics"

    def up() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return True
        except OSError:
            return False

    with (
        berth_running(*metrics_argv, ready=up, what="the exporter to answer"),
        urllib.request.urlopen(url, timeout=30) as response,
    ):
        text = response.read().decode()
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        queried = family.name + "_total" if family.type == "counter" else family.name
        names.setdefault(queried, set())
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
            if sample.name == queried or family.type != "counter":
                names[queried].update(sample.labels)
    yield names


def test_every_metric_the_dashboard_queries_is_served(scrape: dict[str, set[str]]) -> None:
    queried = {name for t in targets() for name in METRIC.findall(t["expr"])}
    missing = sorted(queried - scrape.keys())
    assert not missing, f"the dashboard queries metrics berth metrics does not serve: {missing}"
    # the panels cover what the issue asks for: capacity per class, the queue
    # by shape, headroom, rejections by reason, the writers' lag
    for wanted in (
        "berth_resource_capacity",
        "berth_queue_instances",
        "berth_headroom_instances",
        "berth_rejections_total",
        "berth_view_behind_records",
    ):
        assert wanted in queried, wanted


def test_every_legend_label_is_a_label_of_its_metrics(scrape: dict[str, set[str]]) -> None:
    for target in targets():
        labels = set().union(*(scrape[m] for m in METRIC.findall(target["expr"])))
        wanted = set(LEGEND_LABEL.findall(target.get("legendFormat", "")))
        if labels:  # a family with no sample in this scrape names none (the queue, when empty)
            assert wanted <= labels, (target["expr"], wanted - labels)


def test_prometheus_scrapes_the_exporter_where_it_listens() -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    (target,) = [t for static in job["static_configs"] for t in static["targets"]]
    host, _, port = target.rpartition(":")
    listen = option(argv(COMPOSE["berth-metrics"]), "--listen")[0]
    assert host == "berth-metrics" and port == listen.rpartition(":")[2]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    mounted = _mounts("prometheus")
    assert mounted["/etc/prometheus/prometheus.yml"] == ROOT / "deploy/prometheus/prometheus.yml"


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard() -> None:
    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus"
    assert source["url"] == f"http://prometheus:{COMPOSE['prometheus']['expose'][0]}"
    uids = {
        t["datasource"]["uid"]
        for p in json.loads(DASHBOARD.read_text())["panels"]
        for t in p.get("targets", ())
    }
    assert uids == {source["uid"]}
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "berth.yml").read_text())[
        "providers"
    ]
    mounted = _mounts("grafana")
    assert mounted[provider["options"]["path"]] == DASHBOARD.parent
    assert mounted["/etc/grafana/provisioning"] == provisioning


def _mounts(service: str) -> dict[str, Path]:
    """A service's bind mounts: where in the container -> the file or
    folder of this repository, which must exist."""
    found = {}
    for volume in COMPOSE[service]["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            path = (ROOT / source).resolve()
            assert path.exists(), volume
            found[target] = path
    return found
