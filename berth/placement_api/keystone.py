"""Keystone tokens for production: keystonemiddleware's ``auth_token`` (the
ecosystem's verifier, the one Placement's own pipeline puts in front of
it) checks each request's ``X-Auth-Token`` with Keystone and says who the
caller is; noauth2 stays the development default.

It is configured as Placement's ``[keystone_authtoken]`` section is: a
file in oslo.config's INI format whose ``[keystone_authtoken]`` options
(``www_authenticate_uri``, ``auth_url``, ``auth_type``, the service user's
credentials, ``memcached_servers``, ...) are handed to ``auth_token`` as
they are. The middleware runs on a WSGI environ made of the request's
headers; what it leaves there (``X-Identity-Status``, ``X-User-Id``,
``X-Project-Id``, ``X-Roles``, ``OpenStack-System-Scope``) is the caller."""

from __future__ import annotations

import configparser
import io
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from berth.placement_api.http import Caller

SECTION = "keystone_authtoken"
_SEEN = "berth.keystone.seen"
"""Where the environ that ``auth_token`` lets through is put, per request."""


def read_options(config_file: Path) -> dict[str, str]:
    """The ``[keystone_authtoken]`` options of an INI file; ValueError when
    it has no such section."""
    parser = configparser.ConfigParser(interpolation=None)
    if not parser.read(config_file):
        raise ValueError(f"cannot read {config_file}")
    if not parser.has_section(SECTION):
        raise ValueError(f"{config_file} has no [{SECTION}] section")
    return dict(parser.items(SECTION))


class KeystoneVerifier:
    """Who a request's token says the caller is, by Keystone; None when the
    token is missing or Keystone does not confirm it."""

    def __init__(self, options: Mapping[str, str]) -> None:
        from keystonemiddleware import auth_token

        # the token must be valid: a request it refuses never reaches Berth
        conf = {**options, "delay_auth_decision": "false"}
        self._protocol: Callable[..., Iterable[bytes]] = auth_token.AuthProtocol(
            self._confirmed, conf
        )

    def _confirmed(
        self, environ: dict[str, Any], start_response: Callable[..., object]
    ) -> list[bytes]:
        environ[_SEEN].append(environ)
        start_response("204 No Content", [])
        return []

    def caller(self, headers: Mapping[str, str]) -> Caller | None:
        token = headers.get("x-auth-token")
        if not token:
            return None
        found: list[dict[str, Any]] = []
        environ: dict[str, Any] = {
            _SEEN: found,
            "REQUEST_METHOD": "GET",
            "PATH_INFO": "/",
            "SERVER_NAME": "berth",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(),
            "wsgi.errors": io.StringIO(),
            "HTTP_X_AUTH_TOKEN": token,
        }
        for _ in self._protocol(environ, lambda *args: None):
            pass  # a refusal's body: the caller is None
        if not found or found[0].get("HTTP_X_IDENTITY_STATUS") != "Confirmed":
            return None
        seen = found[0]
        roles = frozenset(r.strip() for r in seen.get("HTTP_X_ROLES", "").split(",") if r.strip())
        system = seen.get("HTTP_OPENSTACK_SYSTEM_SCOPE") or None
        return Caller(
            seen.get("HTTP_X_USER_ID", ""), seen.get("HTTP_X_PROJECT_ID") or None, roles, system
        )
