"""Microversions: ``OpenStack-API-Version: placement X.Y`` (or ``latest``)
picks the API's behaviour; absent, 1.0. microversion-parse reads the header
as every OpenStack service does: a version outside 1.0-1.39 is a 406, a
malformed one a 400."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import microversion_parse

from berth.placement_api.errors import PlacementError

SERVICE_TYPE = "placement"
MIN_VERSION = (1, 0)
MAX_VERSION = (1, 39)
VERSIONS = [f"1.{minor}" for minor in range(MIN_VERSION[1], MAX_VERSION[1] + 1)]
HEADER = "OpenStack-API-Version"


class Version:
    """The version a request asked for."""

    __slots__ = ("major", "minor")

    def __init__(self, major: int, minor: int) -> None:
        self.major = major
        self.minor = minor

    def at_least(self, minor: int) -> bool:
        return (self.major, self.minor) >= (1, minor)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def negotiate(headers: Mapping[str, str]) -> Version:
    """The version asked for (``headers`` named in lower case); a
    :class:`PlacementError` when it cannot be served."""
    # microversion-parse reads only the standard header (or its WSGI
    # environ name): a client sends the same few values again and again
    return _negotiated(headers.get(_STANDARD), headers.get(_STANDARD_ENVIRON))


_STANDARD = microversion_parse.STANDARD_HEADER
_STANDARD_ENVIRON = microversion_parse.ENVIRON_HTTP_HEADER_FMT.format(_STANDARD.replace("-", "_"))


@lru_cache(maxsize=256)
def _negotiated(standard: str | None, environ: str | None) -> Version:
    """The version these headers' values ask for; errors are not cached."""
    given = ((_STANDARD, standard), (_STANDARD_ENVIRON, environ))
    folded = {name: value for name, value in given if value is not None}
    try:
        found = microversion_parse.extract_version(folded, SERVICE_TYPE, VERSIONS)
    except ValueError as error:
        raise PlacementError(406, f"Invalid microversion: {error}") from None
    except TypeError as error:
        raise PlacementError(400, f"Invalid microversion: {error}") from None
    return Version(found.major, found.minor)


def max_version() -> str:
    return f"{MAX_VERSION[0]}.{MAX_VERSION[1]}"


def min_version() -> str:
    return f"{MIN_VERSION[0]}.{MIN_VERSION[1]}"
