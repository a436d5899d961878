"""The package's shape: no import cycle inside vmtune/ (imports inside functions count), and no
module reaching into another module's underscore names."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vmtune"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _package_of(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def _imports(name: str):
    """(imported module, names taken from it, line) of every import in module ``name``, wherever
    it stands; ``from PKG import SUB`` imports the submodule SUB when there is one."""
    tree = ast.parse(MODULES[name].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "vmtune":
                    yield alias.name, (), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name).split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "vmtune":
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in MODULES:
                    yield sub, (), node.lineno
                else:
                    yield source, (alias.name,), node.lineno


def _graph() -> dict[str, set[str]]:
    return {name: {target for target, _, _ in _imports(name) if target in MODULES and target != name}
            for name in MODULES}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [node])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return None


def test_no_import_cycle():
    """No module of vmtune/ imports, however indirectly, one that imports it back."""
    assert _cycle(_graph()) is None


def test_no_module_imports_another_modules_underscore_names():
    """``from x import _name`` takes another module's private name: make it public or move it.
    (A package's own private modules, ``from . import _cells``, are its business.)"""
    found = []
    for name in MODULES:
        for source, names, line in _imports(name):
            found += [f"{MODULES[name].relative_to(ROOT)}:{line}: {source}.{n}"
                      for n in names if n.startswith("_") and not n.startswith("__")]
    assert found == []


def test_no_module_reads_another_modules_underscore_attributes():
    """``module._name`` on an imported vmtune module (tests included) is a private reach too."""
    found = []
    tests = sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "tests" / "fixtures").glob("*.py"))
    for path in sorted(PACKAGE.rglob("*.py")) + tests:
        tree = ast.parse(path.read_text())
        local = {alias.asname or alias.name.split(".")[-1] for node in ast.walk(tree)
                 if isinstance(node, (ast.Import, ast.ImportFrom))
                 and ((getattr(node, "module", None) or "").startswith("vmtune") or getattr(node, "level", 0)
                      or any(a.name.startswith("vmtune") for a in node.names))
                 for alias in node.names}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in local
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert found == []


def test_class_names_are_unique():
    """One name per meaning (issue 33): no two classes of vmtune/ share a name, so that a name read in a
    traceback, a review or a grep is one class."""
    where: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(name)
    assert {k: v for k, v in where.items() if len(v) > 1} == {}
