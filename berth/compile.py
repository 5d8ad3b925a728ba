"""Compile the decision core with mypyc, and the scheduler's ranking kernel
from C, in place: ``python -m berth.compile build`` (``make`` runs it) or
``remove``; ``check`` fails unless the core and the kernel imported are the
compiled ones.

`apply` and the view's rows are the hot paths of every writer and of a
replay, and in CPython most of their cost is the interpreter's own. The
sources stay plain, type-checked Python; compiled, they run the same tests
(CI runs the suite on the compiled build). The ranking kernel
(``scheduling/_ranked.c``) does for every answer what numpy does in a
dozen calls (``scheduling/ranking.py``), which ranks where it is not
built. Without a C compiler the build reports why and the sources run
interpreted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

MODULES = (
    "projections.batch",
    "projections.claims",
    "projections.emitter",
    "projections.holds",
    "projections.pool_events",
    "projections.pools",
    "projections.projector",
    "projections.projects",
    "projections.providers",
    "projections.state",
    "projections.view.outcome_rows",
    "projections.view.plan",
    "projections.view.rebuild",
    "projections.view.reservation_rows",
    "projections.view.usage_rows",
    "projections.view.writer",
)
"""What a writer and a replay run per record; every module must be in
``projections`` (its import checks them against their sources)."""

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "scheduling/_ranked.c"
"""The ranking kernel's source; built as ``scheduling._ranked``."""
# mypyc's shared library, which holds the compiled code of every module, goes
# in the package as projections/native__mypyc (by default it would be a
# top-level module, which an editable install does not put on the path)
_GROUP = "projections.native"

# mypyc's setuptools entry point, run in a child so that the build's
# output, and its failure, stay out of this process
_SETUP = """
import sys
import numpy
from setuptools import Extension, setup
from mypyc.build import mypycify
kernel, digest, group, *sources = sys.argv[1:]
ranked = Extension(
    "scheduling._ranked",
    [kernel],
    include_dirs=[numpy.get_include()],
    define_macros=[("RANKED_SOURCE_DIGEST", '"' + digest + '"')],
    extra_compile_args=["-O2"],
)
setup(
    name="berth-compiled",
    script_args=["build_ext", "--inplace"],
    ext_modules=[*mypycify(sources, opt_level="3", group_name=group), ranked],
)
"""


def _source(module: str, root: Path) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def _manifest(root: Path) -> Path:
    """Where the build records its sources' digests, for ``projections``'
    import check (which cannot be imported here: it refuses a stale build)."""
    return root / "projections" / "compiled.json"


def compiled() -> bool:
    """Whether this process runs the compiled decision core and ranking kernel."""
    return all(_is_compiled(m) for m in MODULES) and _kernel_built()


def _kernel_built() -> bool:
    from scheduling.ranking import native

    return native()


def _is_compiled(module: str) -> bool:
    from importlib import import_module

    return str(import_module(module).__file__).endswith(".so")


def remove(root: Path = ROOT) -> None:
    """Delete every compiled module and the record of them."""
    package = root / "projections"
    for path in [*package.rglob("*.so"), *(root / "scheduling").glob("_ranked.*.so")]:
        path.unlink()
    _manifest(root).unlink(missing_ok=True)


def build(root: Path = ROOT) -> str | None:
    """Compile :data:`MODULES` in place and record their sources' digests;
    what went wrong if it failed (and then nothing stays compiled)."""
    remove(root)
    sources = [str(_source(m, root).relative_to(root)) for m in MODULES]
    kernel = hashlib.sha256((root / KERNEL).read_bytes()).hexdigest()
    done = subprocess.run(
        [sys.executable, "-c", _SETUP, KERNEL, kernel, _GROUP, *sources],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        remove(root)
        return (done.stdout + done.stderr)[-4000:]
    digests = {m: hashlib.sha256(_source(m, root).read_bytes()).hexdigest() for m in MODULES}
    _manifest(root).write_text(json.dumps(digests, indent=1) + "\n")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["build", "remove", "check"])
    action = parser.parse_args().action
    if action == "remove":
        remove()
        return
    if action == "check":
        # where a build must not fall back to the sources (the image): the
        # modules imported, from wherever they are installed, are compiled
        interpreted = [m for m in MODULES if not _is_compiled(m)]
        if not _kernel_built():
            interpreted.append("scheduling._ranked")
        if interpreted:
            sys.exit(f"berth.compile: running interpreted: {', '.join(interpreted)}")
        print(f"berth.compile: {len(MODULES)} modules and the ranking kernel compiled")
        return
    failure = build()
    if failure is not None:
        print(
            f"{failure}\nberth.compile: compiling failed; the sources run interpreted",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
