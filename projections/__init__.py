"""The deterministic projector and the SQL read model.

The hot modules may be compiled with mypyc (``python -m berth.compile
build``, which ``make`` runs). A compiled module is imported in place of its
source, so one compiled before its source last changed would run old code
unnoticed: the build records a digest of every source it compiled, and
importing this package refuses compiled code that no longer matches.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

_HERE = Path(__file__).resolve().parent
MANIFEST = _HERE / "compiled.json"
"""Digest of the source of each compiled module, by module name."""


class StaleCompiledCode(ImportError):
    """A compiled module does not match its source."""


def stale_compiled(package: Path = _HERE) -> list[str]:
    """The modules under ``package`` whose compiled form does not match the
    source it was built from, or was built without a record of it."""
    compiled = sorted(package.rglob("*.so"))
    if not compiled:
        return []
    manifest = package / MANIFEST.name
    recorded: dict[str, str] = json.loads(manifest.read_text()) if manifest.exists() else {}
    changed = []
    for path in compiled:
        stem = path.name.split(".", 1)[0]
        if stem.endswith("__mypyc"):
            continue  # the library the modules' compiled code lives in: no source of its own
        source = path.parent / f"{stem}.py"
        name = ".".join((package.name, *source.relative_to(package).with_suffix("").parts))
        if recorded.get(name) != hashlib.sha256(source.read_bytes()).hexdigest():
            changed.append(name)
    return changed


_changed = stale_compiled()
if _changed:
    raise StaleCompiledCode(
        f"{', '.join(_changed)} changed since compiled: run `make` to compile again, or "
        "`python -m berth.compile remove` to run the sources interpreted"
    )
