"""Who is asking: bearer tokens, kept hashed, each mapped to a role.

- ``admin``: everything.
- ``operator``: providers, pools and ticks (the operator's events); reads
  everything.
- ``project:ID``: submits requests and claims for project ID, consumes,
  renews and releases only its own reservations (the partition writer
  enforces it: :mod:`projections.projects`), reads only its own history
  and decisions.

A credentials file has one ``ROLE sha256:HEX`` a line (``#`` starts a
comment), HEX the SHA-256 of the token: the file holds no token. The tokens
are random (``python -m berth.api.credentials ROLE`` makes one and its
line), so one round of SHA-256 is enough to keep them from being read back.
``BERTH_API_CREDENTIALS`` holds the same lines (``;`` may separate them);
a plain token (``--token-file``, ``BERTH_API_TOKEN``) is an admin's. With
no credentials at all, everyone is an admin (the API warns when it listens
beyond the loopback).

    python -m berth.api.credentials project:acme   # a token, then its line
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_ROLE = re.compile(r"admin|operator|project:[^\s:]{1,255}")


@dataclass(frozen=True, slots=True)
class Caller:
    role: str

    @property
    def project(self) -> str | None:
        """The project a ``project:ID`` caller acts for; None for the others."""
        return self.role.removeprefix("project:") if self.role.startswith("project:") else None

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    @property
    def operator(self) -> bool:
        """An operator, or an admin: may read everything."""
        return self.role in ("admin", "operator")


ADMIN = Caller("admin")


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Credentials:
    """Token digests -> roles. Empty: no credentials, every caller an admin."""

    def __init__(self, roles: dict[str, str] | None = None) -> None:
        self.roles = dict(roles or {})

    @property
    def required(self) -> bool:
        return bool(self.roles)

    def caller(self, token: str | None) -> Caller | None:
        """The caller whose token this is; None when unknown (or none given
        while credentials are set)."""
        if not self.roles:
            return ADMIN
        if not token:
            return None
        role = self.roles.get(digest(token))
        return None if role is None else Caller(role)

    @classmethod
    def parse(cls, lines: Iterable[str], where: str) -> Credentials:
        """``ROLE sha256:HEX`` lines (ValueError naming ``where`` and the line)."""
        roles: dict[str, str] = {}
        for n, line in enumerate(lines, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            role, _, hashed = text.partition(" ")
            hashed = hashed.strip().removeprefix("sha256:")
            if not _ROLE.fullmatch(role) or not re.fullmatch(r"[0-9a-f]{64}", hashed):
                raise ValueError(
                    f"{where}, line {n}: expected ROLE sha256:HEX (ROLE admin, operator "
                    "or project:ID; HEX the token's SHA-256), not " + repr(text[:80])
                )
            roles[hashed] = role
        return cls(roles)

    @classmethod
    def load(cls, credentials_file: str | None, token_file: str | None) -> Credentials:
        """From the files given, else the environment (``BERTH_API_CREDENTIALS``,
        ``BERTH_API_TOKEN``); ValueError for a file that is empty or unreadable."""
        roles: dict[str, str] = {}
        if credentials_file is not None:
            text = _read(credentials_file, "the API credentials file")
            roles.update(cls.parse(text.splitlines(), credentials_file).roles)
        elif os.environ.get("BERTH_API_CREDENTIALS"):
            lines = re.split(r"[;\n]", os.environ["BERTH_API_CREDENTIALS"])
            roles.update(cls.parse(lines, "BERTH_API_CREDENTIALS").roles)
        token = (
            _read(token_file, "the API token file")
            if token_file is not None
            else os.environ.get("BERTH_API_TOKEN") or None
        )
        if token is not None:
            roles[digest(token)] = "admin"
        return cls(roles)


def _read(path: str, what: str) -> str:
    try:
        text = Path(path).read_text().strip()
    except OSError as error:
        raise ValueError(f"{what}: {error}") from None
    if not text:
        raise ValueError(f"{what} {path} is empty")
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not _ROLE.fullmatch(argv[0]):
        print("usage: python -m berth.api.credentials admin|operator|project:ID", file=sys.stderr)
        return 2
    token = secrets.token_urlsafe(32)
    print(token)
    print(f"{argv[0]} sha256:{digest(token)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
