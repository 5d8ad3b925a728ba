"""Keystone tokens for production: a real Keystone (PyPI's ``keystone`` on
SQLite, bootstrapped by keystone-manage) and a ``berth serve
--placement-api --placement-keystone-config FILE`` whose file configures
keystonemiddleware's auth_token as Placement's ``[keystone_authtoken]``
does. A token Keystone issued is the caller it says (user, project,
roles), judged by Placement's policy; a token it did not issue, or none,
is a 401; the version document stays open to all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.placement_gabbits import forked_berth_server
from tests.keystone_server import ADMIN_PASSWORD, keystone_server, token

LATEST = {"openstack-api-version": "placement latest"}


@pytest.fixture(scope="module")
def keystone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with keystone_server(tmp_path_factory.mktemp("keystone")) as url:
        yield url


def _reader(url: str, admin: str) -> str:
    """A user with only the reader role on the admin project; its token."""
    auth = {"x-auth-token": admin}
    with httpx.Client(base_url=f"{url}/v3", headers=auth, timeout=60) as ks:
        made = ks.post(
            "/users",
            json={"user": {"name": "alice", "password": "alice-pw", "domain_id": "default"}},
        )
        assert made.status_code == 201, made.text
        user = made.json()["user"]["id"]
        project = ks.get("/projects", params={"name": "admin"}).json()["projects"][0]["id"]
        role = ks.get("/roles", params={"name": "reader"}).json()["roles"][0]["id"]
        granted = ks.put(f"/projects/{project}/users/{user}/roles/{role}")
        assert granted.status_code == 204, granted.text
    return token(url, "alice", "alice-pw", "admin")


def test_keystone_tokens_are_verified(keystone: str, tmp_path: Path) -> None:
    config = tmp_path / "placement.conf"
    config.write_text(
        "[keystone_authtoken]\n"
        f"www_authenticate_uri = {keystone}\n"
        f"auth_url = {keystone}\n"
        "interface = public\n"
        "auth_type = password\n"
        "username = admin\n"
        f"password = {ADMIN_PASSWORD}\n"
        "project_name = admin\n"
        "user_domain_id = default\n"
        "project_domain_id = default\n"
    )
    admin = token(keystone, "admin", ADMIN_PASSWORD, "admin")
    reader = _reader(keystone, admin)
    options = ("--placement-keystone-config", str(config))
    with (
        forked_berth_server(tmp_path / "data", *options) as (host, port),
        httpx.Client(base_url=f"http://{host}:{port}", headers=LATEST, timeout=60) as api,
    ):
        assert api.get("/").status_code == 200  # the versions, to all
        made = api.post(
            "/resource_providers", json={"name": "cn1"}, headers={"x-auth-token": admin}
        )
        assert made.status_code == 200, made.text
        listed = api.get("/resource_providers", headers={"x-auth-token": admin})
        assert [p["name"] for p in listed.json()["resource_providers"]] == ["cn1"]
        # noauth2's token means nothing here, nor does one Keystone never issued
        for bogus in ("admin", admin[:-4] + "AAAA"):
            refused = api.get("/resource_providers", headers={"x-auth-token": bogus})
            assert refused.status_code == 401, refused.text
            assert refused.json()["errors"][0]["status"] == 401
        assert api.get("/resource_providers").status_code == 401
        # a reader is who Keystone says, and Placement's policy refuses it
        forbidden = api.get("/resource_providers", headers={"x-auth-token": reader})
        assert forbidden.status_code == 403, forbidden.text
        assert "placement:resource_providers:list" in forbidden.json()["errors"][0]["detail"]


def test_a_config_without_the_section_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "placement.conf"
    config.write_text("[DEFAULT]\ndebug = true\n")
    options = ("--placement-keystone-config", str(config))
    with (
        pytest.raises(RuntimeError, match=r"no \[keystone_authtoken\] section"),
        forked_berth_server(tmp_path / "data", *options),
    ):
        pass
