"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

Cli = Callable[..., tuple[int, str, str]]
"""``cli("status", "--json")``: the exit code, stdout and stderr of ``berth``."""


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """``host:port`` of a Kafka-protocol broker for the whole session.

    A private tansu unless ``BERTH_TEST_KAFKA`` names an external broker. A
    missing tansu binary is an error, not a skip: the Kafka tests must run.
    """
    # Imported here so that kafka-python is first imported after
    # pytest_configure has installed the warning filters below.
    from tests.kafka_broker import kafka_broker

    with kafka_broker() as bootstrap:
        yield bootstrap


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3 loads its protocol schemas through importlib.resources
    # functions deprecated since Python 3.11, once per schema at import time.
    for message in ("read_text is deprecated", "open_text is deprecated"):
        config.addinivalue_line("filterwarnings", f"ignore:{message}:DeprecationWarning")


@pytest.fixture()
def postgres_url() -> Iterator[str]:
    """SQLAlchemy URL of a fresh database on the real PostgreSQL server."""
    from tests.postgres import scratch_database

    with scratch_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def view_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The view's URL: a SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'view.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    from berth.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run
