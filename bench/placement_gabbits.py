"""OpenStack Placement's own API tests against Berth: ``python -m
bench.placement_gabbits [FILE ...] [--json]``.

The gabbi YAML files that ship in ``openstack-placement``
(``placement/tests/functional/gabbits/``) run over real HTTP against a
``berth serve --placement-api`` started empty for each file, in a data
directory of its own on tmpfs where there is one, forked from a fork-server
that has imported Berth already (:func:`forked_berth_server`). Prints a
table, one row per file, and the last line ``N passed, N failed, N
skipped`` (with ``--json``, the JSON figures before it). Upstream's
fixtures that write straight into Placement's database are rebuilt
through the API (``bench.placement_fixtures``); those that configure its
server become ``berth serve`` options (secure-RBAC or open policy, CORS).
A file that needs a fixture the runner does not know is skipped whole,
with its reason."""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import httpx
import yaml
from gabbi import handlers, suitemaker

from bench import placement_fixtures
from berth.placement_api.policy import rule_defaults

SERVER_OPTION_FIXTURES: dict[str, str] = {}
"""Fixtures that configure upstream's server in ways Berth's runner does not yet."""


def server_options(fixtures: list[str], policy_file: Path) -> list[str]:
    """``berth serve`` options for the server configuration a file's fixtures
    give upstream's: secure-RBAC defaults, or every rule open (a policy file
    of ``@`` for each rule but ``admin_api``, as upstream's open-policy
    fixture sets them); legacy defaults are Berth's own."""
    if "CORSFixture" in fixtures:
        return [
            "--placement-cors-origin",
            "http://valid.example.com",
            "--placement-cors-allow-header",
            "openstack-api-version",
        ]
    if "SecureRBACPolicyFixture" in fixtures:
        return ["--placement-policy", "secure"]
    if "OpenPolicyFixture" in fixtures:
        rules = {rule.name: "@" for rule in rule_defaults() if rule.name != "admin_api"}
        policy_file.write_text(yaml.safe_dump(rules))
        return ["--placement-policy-file", str(policy_file)]
    return []


SUPPORTED_FIXTURES = frozenset(
    {
        "APIFixture",
        "LegacyRBACPolicyFixture",
        "SecureRBACPolicyFixture",
        "OpenPolicyFixture",
        "CORSFixture",
        "AllocationFixture",
        "NonSharedStorageFixture",
        "SharedStorageFixture",
        "NUMAAggregateFixture",
        "NUMANetworkFixture",
        "DeepNUMANetworkFixture",
        "GranularFixture",
        "NeutronQoSMultiSegmentFixture",
    }
)

START_TIMEOUT_S = 60.0

JOBS = 2 * (os.cpu_count() or 1)
"""Files at once by default: each mostly waits on its own server."""


def gabbits_dir() -> Path:
    return Path(str(resources.files("placement"))) / "tests" / "functional" / "gabbits"


@dataclass
class FileResult:
    name: str
    tests: int
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    why_skipped: str = ""
    failures: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)


def skip_reason(fixtures: list[str]) -> str:
    """Why a file cannot run yet, or '' when it can."""
    for name in fixtures:
        if name in SERVER_OPTION_FIXTURES:
            return f"needs {SERVER_OPTION_FIXTURES[name]}"
    missing = [n for n in fixtures if n not in SUPPORTED_FIXTURES]
    if missing:
        return f"fixture {', '.join(missing)} not rebuilt through the API yet"
    return ""


PRELOAD = ["berth.cli", "berth.placement_api", "berth.placement_api.server"]
"""What a fork-server imports once, so that each file's server, forked from
it, starts without the seconds of imports (most of a fresh process's start)."""


def _serve(argv: list[str], stderr_path: str) -> None:
    """The body of a forked ``berth serve``: its stderr to ``stderr_path``
    (where :func:`wait_listening` looks for its banner), stdout dropped."""
    with open(stderr_path, "a") as stderr, open(os.devnull, "w") as stdout:
        os.dup2(stderr.fileno(), 2)
        os.dup2(stdout.fileno(), 1)
    from berth.cli import main

    sys.exit(main(argv))


class _Forked:
    """A forked server as :func:`wait_listening` watches it (``poll``)."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self.process = process

    def poll(self) -> int | None:
        return self.process.exitcode


@contextmanager
def forked_berth_server(data_dir: Path, *extra: str) -> Iterator[tuple[str, int]]:
    """:func:`berth_server`, but forked from a fork-server that has imported
    Berth already (:data:`PRELOAD`): the same ``berth serve`` code on the same
    options, started in a fraction of the time. For the many short-lived
    servers of the gabbit files and the API's tests; benchmarks (which
    measure the server's process) keep :func:`berth_server`. The forked
    server has the environment of when the fork-server started."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    stderr_path = data_dir.parent / f"{data_dir.name}.stderr"
    argv = berth_command(data_dir, *extra)[3:]
    stderr_path.write_text("")  # there before wait_listening reads it
    process = context.Process(target=_serve, args=(argv, str(stderr_path)))
    process.start()
    try:
        yield wait_listening(_Forked(process), stderr_path, "placement-api")
    finally:
        process.terminate()
        process.join(timeout=30)
        if process.exitcode is None:
            process.kill()
            process.join()


@contextmanager
def berth_server(data_dir: Path, *extra: str) -> Iterator[tuple[str, int]]:
    """``berth serve --placement-api 127.0.0.1:0`` (and ``extra`` options) on
    a data directory; where it listens, once it answers."""
    stderr_path = data_dir.parent / f"{data_dir.name}.stderr"
    with child_server(berth_command(data_dir, *extra), stderr_path, "placement-api") as address:
        yield address


def berth_command(data_dir: Path, *extra: str) -> list[str]:
    """The command line of ``berth serve --placement-api 127.0.0.1:0`` on
    ``data_dir``; it prints ``placement-api: serving http://HOST:PORT/``
    on stderr once it listens (see :func:`wait_listening`)."""
    return [
        sys.executable,
        "-c",
        "import sys; from berth.cli import main; sys.exit(main())",
        "serve",
        "--data-dir",
        str(data_dir),
        "--placement-api",
        "127.0.0.1:0",
        *extra,
    ]


@contextmanager
def child_server(
    command: list[str], stderr_path: Path, banner: str, ready: str = "/"
) -> Iterator[tuple[str, int]]:
    """``command`` as a child process that prints ``BANNER: serving
    http://HOST:PORT/`` on stderr once it listens; where it listens, once
    it answers 200 at ``ready`` there. Stopped on the way out."""
    with open(stderr_path, "w+") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            yield wait_listening(process, stderr_path, banner, ready)
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class Polled(Protocol):
    def poll(self) -> int | None: ...


def wait_listening(
    process: Polled, stderr_path: Path, banner: str, ready: str = "/"
) -> tuple[str, int]:
    deadline = time.monotonic() + START_TIMEOUT_S
    pattern = re.compile(re.escape(banner) + r": serving http://([\d.]+):(\d+)/")
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{banner} exited: {stderr_path.read_text()[-2000:]}")
        found = pattern.search(stderr_path.read_text())
        if found:
            host, port = found.group(1), int(found.group(2))
            try:
                if httpx.get(f"http://{host}:{port}{ready}", timeout=5).status_code == 200:
                    return host, port
            except httpx.HTTPError:
                pass
        time.sleep(0.1)  # its stderr file has no event to wait on
    raise RuntimeError(f"{banner} did not answer in {START_TIMEOUT_S} s")


def run_file(path: Path, work: Path) -> FileResult:
    suite_dict: dict[str, Any] = yaml.safe_load(path.read_text())
    tests = len(suite_dict.get("tests") or [])
    result = FileResult(path.name, tests)
    reason = skip_reason(list(suite_dict.get("fixtures") or []))
    if reason:
        result.skipped, result.why_skipped = tests, reason
        return result
    data_dir = work / path.stem
    fixtures = list(suite_dict.get("fixtures") or [])
    options = server_options(fixtures, work / f"{path.stem}.policy.yaml")
    with forked_berth_server(data_dir, *options) as (host, port):
        placement_fixtures.SERVER[:] = [f"http://{host}:{port}"]
        suite = suitemaker.test_suite_from_dict(
            unittest.defaultTestLoader,
            path.stem.replace("-", "_").replace(".", "_"),
            suite_dict,
            str(path.parent),
            host,
            port,
            placement_fixtures,
            None,
            handlers=[handler() for handler in handlers.RESPONSE_HANDLERS],
        )
        outcome = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)
    failed = {_name(t) for t, _ in outcome.failures + outcome.errors}
    result.details = {
        _name(t): " ".join(trace.split())[-600:] for t, trace in outcome.failures + outcome.errors
    }
    skipped = {_name(t) for t, _ in outcome.skipped}
    result.failures = sorted(failed)
    result.failed = len(failed)
    result.skipped = len(skipped)
    result.passed = outcome.testsRun - result.failed - result.skipped
    # a test gabbi never ran (its file's fixture failed) is counted as failed
    result.failed += tests - outcome.testsRun
    return result


def _name(test: unittest.TestCase) -> str:
    data = getattr(test, "test_data", None)
    return str(data["name"]) if isinstance(data, dict) and "name" in data else test.id()


def run(names: list[str], jobs: int = 1) -> list[FileResult]:
    """Every file (or those ``names``), ``jobs`` at a time, in file order.

    Files run in processes of their own: upstream's fixtures hand their ids
    to the YAML through ``os.environ``, which threads would share. A file
    spends most of its time waiting on its server, so more files than cores
    can run at once."""
    files = sorted(gabbits_dir().glob("*.yaml"))
    if names:
        files = [f for f in files if f.name in names or f.stem in names]
    with tempfile.TemporaryDirectory(prefix="berth-gabbits-", dir=memory_dir()) as work:
        if jobs <= 1:
            return [run_file(f, Path(work)) for f in files]
        # spawn, not fork: the caller (pytest, say) may hold threads and locks
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            return list(pool.map(run_file, files, [Path(work)] * len(files)))


def memory_dir() -> str | None:
    """``/dev/shm`` (tmpfs) where there is one, else the default temporary
    directory. The gabbits check the API's answers, not durability (the crash
    tests do): the servers' fsyncs need not reach a disk here."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def totals(results: list[FileResult]) -> dict[str, int]:
    return {
        "files": len(results),
        "tests": sum(r.tests for r in results),
        "passed": sum(r.passed for r in results),
        "failed": sum(r.failed for r in results),
        "skipped": sum(r.skipped for r in results),
    }


def table(results: list[FileResult]) -> str:
    width = max((len(r.name) for r in results), default=10)
    lines = [f"{'file':<{width}}  tests  passed  failed  skipped"]
    for r in results:
        note = f"  ({r.why_skipped})" if r.why_skipped else ""
        lines.append(
            f"{r.name:<{width}}  {r.tests:>5}  {r.passed:>6}  {r.failed:>6}  {r.skipped:>7}{note}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="gabbit files (default: all)")
    parser.add_argument("--json", action="store_true", help="also the figures as JSON")
    parser.add_argument("--failures", action="store_true", help="name each failing test")
    parser.add_argument("--jobs", type=int, default=JOBS, help=f"files at once (default {JOBS})")
    args = parser.parse_args(argv)
    os.environ.setdefault("GABBI_SKIP_NETWORK", "true")
    results = run(args.files, args.jobs)
    print(table(results))
    if args.failures:
        for r in results:
            for name in r.failures:
                print(f"FAILED {r.name}: {name}: {r.details.get(name, '')}")
    sums = totals(results)
    if args.json:
        print(json.dumps({**sums, "per_file": [asdict(r) for r in results]}))
    print(f"{sums['passed']} passed, {sums['failed']} failed, {sums['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
