"""The bpy layer's shape: no import cycle between its modules (module-level or deferred
inside functions) and no module over :data:`MAX_LINES` lines. Reads the sources only (no
bpy needed)."""

from __future__ import annotations

import ast
from pathlib import Path

ADDON = Path(__file__).resolve().parents[2] / "blender_addon"
MAX_LINES = 500


def _module_name(path: Path) -> str:
    rel = path.relative_to(ADDON.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The add-on modules ``path`` imports anywhere in it (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = f"{base}.{node.module}" if node.level and node.module else (
                base if node.level else node.module or "")
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    paths = [p for p in ADDON.rglob("*.py") if "core" not in p.relative_to(ADDON).parts]
    names = {_module_name(p): p for p in paths}
    known = set(names)
    return {n: _imports(p, n, known) - {"blender_addon"} for n, p in names.items()
            if n != "blender_addon"}


def test_no_import_cycles() -> None:
    graph = _graph()
    assert "blender_addon.edits" in graph and "blender_addon.state" in graph
    cycles = []
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        if node in visiting:
            cycles.append(" -> ".join([*visiting[visiting.index(node):], node]))
            return
        visiting.append(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    assert not cycles, f"import cycles in the bpy layer: {cycles}"


def test_modules_stay_small() -> None:
    long = {str(p.relative_to(ADDON)): n for p in ADDON.rglob("*.py")
            if "core" not in p.relative_to(ADDON).parts
            and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
