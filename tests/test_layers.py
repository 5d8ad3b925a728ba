"""Layers import downward only: schemas <- ledger <- projections <- scheduling
<- consumers <- berth <- sim (ARCHITECTURE.md). Every import counts, those inside
functions and under ``TYPE_CHECKING`` too: a deferred import is still an
arrow back up, it only fails later."""

from __future__ import annotations

import ast
from pathlib import Path

LAYERS = ("schemas", "ledger", "projections", "scheduling", "consumers", "berth", "sim")
"""Lowest first: a module may import from its own layer and those before it."""

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The modules an import statement names, relative ones made absolute."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        return [node.module or ""]
    package = module.split(".")
    if not is_package:
        package.pop()
    base = package[: len(package) - (node.level - 1)]
    return [".".join([*base, node.module] if node.module else base)]


def upward_imports(root: Path, layers: tuple[str, ...] = LAYERS) -> list[str]:
    """One line per import of a layer above the importing module's own, naming
    the module, its line and what it imports."""
    rank = {layer: i for i, layer in enumerate(layers)}
    found = []
    for layer in layers:
        for path in sorted((root / layer).rglob("*.py")):
            module = module_name(path, root)
            tree = ast.parse(path.read_text(), filename=str(path))
            imports = (n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom))
            for node in imports:
                for imported in imported_modules(node, module, path.name == "__init__.py"):
                    top = imported.split(".")[0]
                    if rank.get(top, -1) > rank[layer]:
                        found.append(
                            f"{module} (line {node.lineno}) imports {imported}: "
                            f"{layer}/ may not import from {top}/, a layer above it"
                        )
    return found


def test_every_layer_imports_only_downward() -> None:
    found = upward_imports(ROOT)
    assert not found, "imports from a layer above:\n" + "\n".join(found)


def test_an_upward_import_is_named_even_inside_a_function(tmp_path: Path) -> None:
    """The check can fail: a tree with an arrow back up, one at module level,
    one deferred into a function, one relative, is reported line by line."""
    (tmp_path / "ledger").mkdir()
    (tmp_path / "ledger" / "__init__.py").write_text("")
    (tmp_path / "ledger" / "log.py").write_text("from schemas.events import Claim\n")
    (tmp_path / "consumers").mkdir()
    (tmp_path / "consumers" / "__init__.py").write_text("from . import reaper\n")
    (tmp_path / "consumers" / "reaper.py").write_text(
        "import ledger.log\n\n\ndef publisher() -> None:\n    from berth.client import Publisher\n"
    )
    (tmp_path / "consumers" / "sub").mkdir()
    (tmp_path / "consumers" / "sub" / "deep.py").write_text("from ...berth import app\n")
    (tmp_path / "berth").mkdir()
    (tmp_path / "berth" / "app.py").write_text("from consumers.reaper import publisher\n")

    assert upward_imports(tmp_path) == [
        "consumers.reaper (line 5) imports berth.client: "
        "consumers/ may not import from berth/, a layer above it",
        "consumers.sub.deep (line 1) imports berth: "
        "consumers/ may not import from berth/, a layer above it",
    ]
