"""The compiled decision core: importing ``projections`` refuses compiled
modules that no longer match their sources, and a build is all or nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import sysconfig
from importlib import import_module
from pathlib import Path

import projections
from berth.compile import KERNEL, MODULES, ROOT, compiled
from projections import stale_compiled

_SO = str(sysconfig.get_config_var("EXT_SUFFIX"))


def _package(root: Path) -> Path:
    """A copy of the ``projections`` package's init beside one module that
    has a (stand-in) compiled form."""
    package = root / "projections"
    (package / "view").mkdir(parents=True)
    shutil.copy(Path(projections.__file__), package / "__init__.py")
    (package / "view" / "__init__.py").write_text("")
    (package / "view" / "writer.py").write_text("ROWS = 1\n")
    (package / "view" / f"writer{_SO}").write_bytes(b"compiled")
    return package


def _python_in(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Python run in ``root``, importing from ``root`` before anywhere else."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=root,
        env={"PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
    )


def _record(package: Path, source: str) -> None:
    digest = hashlib.sha256(source.encode()).hexdigest()
    (package / "compiled.json").write_text(json.dumps({"projections.view.writer": digest}))


def test_compiled_code_matching_its_source_is_accepted(tmp_path: Path) -> None:
    package = _package(tmp_path)
    _record(package, "ROWS = 1\n")
    assert stale_compiled(package) == []


def test_compiled_code_older_than_its_source_is_found(tmp_path: Path) -> None:
    package = _package(tmp_path)
    _record(package, "ROWS = 0\n")
    assert stale_compiled(package) == ["projections.view.writer"]


def test_compiled_code_without_a_record_is_found(tmp_path: Path) -> None:
    assert stale_compiled(_package(tmp_path)) == ["projections.view.writer"]


def test_no_compiled_code_is_nothing_to_check(tmp_path: Path) -> None:
    package = _package(tmp_path)
    (package / "view" / f"writer{_SO}").unlink()
    assert stale_compiled(package) == []


def test_importing_the_package_refuses_stale_compiled_code(tmp_path: Path) -> None:
    package = _package(tmp_path)
    _record(package, "ROWS = 0\n")
    run = _python_in(tmp_path, "-c", "import projections")
    assert run.returncode == 1
    assert "StaleCompiledCode: projections.view.writer changed since compiled" in run.stderr


def test_the_core_runs_all_compiled_or_all_interpreted() -> None:
    each = {m: str(import_module(m).__file__).endswith(".so") for m in MODULES}
    assert len(set(each.values())) == 1, each
    assert projections.MANIFEST.exists() == compiled() == all(each.values())
    assert all(m.startswith("projections.") for m in MODULES)  # the import check covers them


def test_the_core_imports_the_same_way_from_anywhere(tmp_path: Path) -> None:
    """As the ``berth`` command imports it: from another directory, with no
    source tree on the path but the installed package's."""
    found = subprocess.run(
        [sys.executable, "-c", f"import {MODULES[0]} as m; print(m.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    # compiled there as here (mypyc may name a compiled module's file oddly)
    here = str(import_module(MODULES[0]).__file__)
    assert found.stdout.strip().endswith(".so") == here.endswith(".so")


_PACKAGES = ("schemas", "ledger", "projections", "consumers", "scheduling", "berth", "bench")


def _project_copy(root: Path, compiled_too: bool) -> Path:
    """The project's packages and metadata under ``root``, with or without
    the compiled modules built here."""
    ignored = ["__pycache__"] if compiled_too else ["__pycache__", "*.so", "compiled.json"]
    root.mkdir(exist_ok=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, root / name)
    for package in _PACKAGES:
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns(*ignored))
    return root


def test_an_install_carries_the_compiled_core(tmp_path: Path) -> None:
    """What a (non-editable) install copies, as the image's does: the
    compiled modules and the record of their sources, where they were built."""
    source = _project_copy(tmp_path / "source", compiled_too=True)
    lib = tmp_path / "lib"
    setup = "from setuptools import setup; setup()"
    subprocess.run(
        [sys.executable, "-c", setup, "-q", "build_py", "--build-lib", str(lib)],
        cwd=source,
        capture_output=True,
        check=True,
    )
    built = {p.relative_to(lib) for p in lib.rglob("*.so")}
    here = [*(ROOT / "projections").rglob("*.so"), *(ROOT / "scheduling").glob("*.so")]
    assert built == {p.relative_to(ROOT) for p in here}
    assert (lib / "projections" / "compiled.json").exists() == compiled()
    if compiled():
        # and the library their code lives in, and the ranking kernel with its source
        assert len(built) == len(MODULES) + 2
        assert stale_compiled(lib / "projections") == []
        assert (lib / "scheduling" / "_ranked.c").read_bytes() == (ROOT / KERNEL).read_bytes()


def test_check_passes_only_on_the_compiled_core(tmp_path: Path) -> None:
    here = subprocess.run(
        [sys.executable, "-m", "berth.compile", "check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert (here.returncode == 0) == compiled(), here.stderr
    interpreted = _project_copy(tmp_path, compiled_too=False)
    there = _python_in(interpreted, "-m", "berth.compile", "check")
    assert there.returncode == 1
    assert "running interpreted: projections.batch, projections.claims" in there.stderr
