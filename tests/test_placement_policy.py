"""The Placement API's policy and CORS options through real ``berth serve``
processes: Placement's rule names and defaults by oslo.policy, a policy
file that overrides them, and oslo.middleware's CORS for one origin."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from bench.placement_gabbits import forked_berth_server


def _get(address: tuple[str, int], path: str, **headers: str) -> httpx.Response:
    host, port = address
    return httpx.get(f"http://{host}:{port}{path}", headers=headers, timeout=30)


def test_placement_defaults_admit_admins_services_and_a_projects_readers(tmp_path: Path) -> None:
    with forked_berth_server(tmp_path / "data") as address:
        assert _get(address, "/resource_providers", **{"x-auth-token": "admin"}).status_code == 200
        refused = _get(address, "/resource_providers", **{"x-auth-token": "alice:p1"})
        assert refused.status_code == 403
        assert "placement:resource_providers:list" in refused.json()["errors"][0]["detail"]
        service = {"x-auth-token": "nova:services", "x-roles": "service"}
        assert _get(address, "/resource_providers", **service).status_code == 200
        reader = {
            "x-auth-token": "alice:p1",
            "x-roles": "reader",
            "openstack-api-version": "placement 1.9",
        }
        assert _get(address, "/usages?project_id=p1", **reader).status_code == 200
        assert _get(address, "/usages?project_id=p2", **reader).status_code == 403
        # X-Roles says who the caller is, even for the user named admin
        admin_as_reader = {"x-auth-token": "admin", "x-roles": "reader"}
        assert _get(address, "/resource_providers", **admin_as_reader).status_code == 403


def test_a_policy_file_overrides_a_rule_and_only_that_rule(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"placement:resource_providers:list": "@"}))
    with forked_berth_server(tmp_path / "data", "--placement-policy-file", str(policy)) as address:
        anyone = {"x-auth-token": "alice:p1"}
        assert _get(address, "/resource_providers", **anyone).status_code == 200
        assert _get(address, "/traits", **anyone).status_code == 403


def test_a_missing_policy_file_stops_the_server(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere.yaml")
    with (
        pytest.raises(RuntimeError, match="no policy file"),
        forked_berth_server(tmp_path / "data", "--placement-policy-file", missing),
    ):
        pass


def test_cors_answers_an_allowed_origin_only(tmp_path: Path) -> None:
    origin = "http://dashboard.example.com"
    options = ("--placement-cors-origin", origin, "--placement-cors-allow-header", "x-auth-token")
    with forked_berth_server(tmp_path / "data", *options) as address:
        host, port = address
        preflight = {"origin": origin, "access-control-request-method": "GET"}
        allowed = httpx.options(f"http://{host}:{port}/traits", headers=preflight, timeout=30)
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == origin
        other = {**preflight, "origin": "http://elsewhere.example.com"}
        refused = httpx.options(f"http://{host}:{port}/traits", headers=other, timeout=30)
        assert refused.status_code == 200
        assert "access-control-allow-origin" not in refused.headers
        read = _get(address, "/", origin=origin)
        assert read.headers["access-control-allow-origin"] == origin
