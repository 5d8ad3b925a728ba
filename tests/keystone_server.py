"""A real Keystone for tests: the ``keystone`` package from PyPI on a SQLite
file, set up by ``keystone-manage`` (db_sync, fernet and credential keys,
bootstrap of the admin user, project and roles) and served by its own WSGI
app in a process of its own (Keystone reads its configuration and command
line in process globals). ``python -m tests.keystone_server CONFIG`` is
that process: it prints ``keystone: serving http://HOST:PORT/`` on stderr
once it listens."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import httpx

from bench.placement_gabbits import child_server

ADMIN_PASSWORD = "berth-test-admin"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """One line per request on stderr would only be noise here."""


def _manage(config: Path, *args: str) -> None:
    command = [sys.executable, "-c", "import sys; from keystone.cmd.manage import main; main()"]
    done = subprocess.run(
        [*command, "--config-file", str(config), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"keystone-manage {args[0]}: {done.stderr[-2000:]}"


def _configure(work: Path) -> Path:
    config = work / "keystone.conf"
    config.write_text(
        "[database]\n"
        f"connection = sqlite:///{work / 'keystone.db'}\n"
        "[token]\nprovider = fernet\n"
        f"[fernet_tokens]\nkey_repository = {work / 'fernet-keys'}\n"
        f"[credential]\nkey_repository = {work / 'credential-keys'}\n"
    )
    user = ("--keystone-user", str(os.getuid()), "--keystone-group", str(os.getgid()))
    _manage(config, "db_sync")
    _manage(config, "fernet_setup", *user)
    _manage(config, "credential_setup", *user)
    return config


@contextmanager
def keystone_server(work: Path) -> Iterator[str]:
    """A Keystone set up in ``work`` and serving; its URL (``http://HOST:PORT``)."""
    config = _configure(work)
    command = [sys.executable, "-m", "tests.keystone_server", str(config)]
    with child_server(command, work / "keystone.stderr", "keystone", "/v3") as (host, port):
        url = f"http://{host}:{port}"
        # the catalog's identity endpoint, public, is where it listens
        _manage(
            config,
            "bootstrap",
            "--bootstrap-password",
            ADMIN_PASSWORD,
            "--bootstrap-public-url",
            f"{url}/v3",
            "--bootstrap-region-id",
            "RegionOne",
        )
        yield url


def token(url: str, user: str, password: str, project: str) -> str:
    """A project-scoped token for ``user`` (of the Default domain)."""
    body = {
        "auth": {
            "identity": {
                "methods": ["password"],
                "password": {
                    "user": {"name": user, "domain": {"id": "default"}, "password": password}
                },
            },
            "scope": {"project": {"name": project, "domain": {"id": "default"}}},
        }
    }
    answer = httpx.post(f"{url}/v3/auth/tokens", json=body, timeout=60)
    assert answer.status_code == 201, answer.text
    return answer.headers["x-subject-token"]


def main() -> None:
    os.environ["OS_KEYSTONE_CONFIG_FILES"] = sys.argv[1]
    del sys.argv[1:]  # Keystone parses the command line as its own
    from keystone.server.wsgi import initialize_public_application

    server = make_server(
        "127.0.0.1", 0, initialize_public_application(), handler_class=_QuietHandler
    )
    print(f"keystone: serving http://127.0.0.1:{server.server_port}/", file=sys.stderr)
    sys.stderr.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
