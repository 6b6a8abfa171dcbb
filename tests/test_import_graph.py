"""No import circle in the add-on or the training package: the graph of module-level
imports (those that run when a module loads; imports inside functions and under
``TYPE_CHECKING`` excluded) of ``blender_addon/`` and ``training/`` is acyclic."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("blender_addon", "training")


def _modules() -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its own name)."""
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run at import: the body, into if/try blocks, not TYPE_CHECKING's."""
    out = []
    for node in body:
        if isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                out += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _top_level(node.body) + _top_level(node.orelse) + _top_level(node.finalbody)
            for handler in node.handlers:
                out += _top_level(handler.body)
        else:
            out.append(node)
    return out


def import_graph() -> dict[str, set[str]]:
    """Each module -> the modules of the packages it imports at module level."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = graph.setdefault(name, set())
        for node in _top_level(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                subs = {f"{base}.{a.name}" for a in node.names} & set(modules)
                edges.update(subs)
                if base in modules and len(subs) < len(node.names):  # names of base itself
                    edges.add(base)
        # A module's own packages are loaded before it (Python imports parents first).
        edges -= {name, *(name.rsplit(".", k)[0] for k in range(1, name.count(".") + 1))}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_engines_imports() -> None:
    """The graph is read right: known edges are there (so an empty answer means something)."""
    graph = import_graph()
    assert "blender_addon.core.skeleton" in graph["blender_addon.core.rig_ik"]
    assert "blender_addon.core.native" in graph["blender_addon.core.rig_ik"]
    assert not graph["blender_addon.core.native"] & set(graph)  # the kernel loader: a leaf
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    assert cycles(import_graph()) == []


MAX_LINES = 600  # issue 46: one idea per file, C included


def test_no_source_file_is_over_600_lines() -> None:
    sources = [*_modules().values(), *(ROOT / "blender_addon" / "core" / "_native").glob("*.c"),
               *(ROOT / "tests").rglob("*.py"), *(ROOT / "scripts").glob("*.py"),
               ROOT / "build_addon.py"]
    long = {str(p.relative_to(ROOT)): n for p in sources
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert len(sources) > 100, "the sources were not found"
    assert long == {}
