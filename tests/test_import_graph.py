"""training/'s layout holds: no module-level import circle, no source file over 600 lines.

Read with ``ast`` (nothing is imported): an import inside a function runs only when it is
called, so only the module-level ones (including those under a module-level ``if`` or
``try``) make edges. ``from training.pkg import name`` points at ``training.pkg.name`` where
that is a module, else at ``training.pkg``. blender_addon/ has its own check.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "training"
MAX_LINES = 600  # issue 46: one idea per file


def module_files(root: Path = REPO / PACKAGE) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    files = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    return files


def module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements run when the module loads: not those inside functions or classes."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                todo.extend(getattr(node, field, []))
        elif isinstance(node, ast.ExceptHandler):
            todo.extend(node.body)
    return found


def resolve(name: str, current: str, is_package: bool, level: int) -> str:
    """An import's absolute module name (relative ones made absolute)."""
    if not level:
        return name
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at module level."""
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        edges = set()
        is_package = path.name == "__init__.py"
        for node in module_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = resolve(node.module or "", module, is_package, node.level)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                           for a in node.names]
            edges |= {t for t in targets if t in files and t != module}
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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


def test_the_check_finds_a_circle_and_a_relative_import() -> None:
    """The checker itself: a made-up circle is found, a chain is not."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert resolve("pairs", "training.data.dataset", False, 1) == "training.data.pairs"
    assert resolve("", "training.cli", True, 1) == "training.cli"


def test_training_has_no_module_level_import_circle() -> None:
    files = module_files()
    graph = import_graph(files)
    assert len(files) > 40, "the package's modules were not found"
    assert sum(map(len, graph.values())) > 40, "too few edges: imports were not read"
    assert cycles(graph) == []


def test_no_training_source_file_is_over_600_lines() -> None:
    long = {str(p.relative_to(REPO)): n for p in module_files().values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}
