"""The package's shape: no import cycle inside vmtune/ (imports inside functions count), none between
its top-level parts either (a loose module or a top-level subpackage: the layers of ARCHITECTURE.md,
at most 12 modules loose), and no module reaching into another module's underscore names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from fixtures.sources import parsed

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
    tree = parsed(MODULES[name])
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
        tree = parsed(path)
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
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(name)
    assert {k: v for k, v in where.items() if len(v) > 1} == {}


# -- the folders are the layers (issue 33) ------------------------------------------------------------

LOOSE_MOST = 12


def _part(name: str) -> str:
    """The top-level part of vmtune a module belongs to: a loose module itself, or the top-level
    subpackage it is in (``vmtune.xml.model`` -> ``xml``); the package's own ``__init__`` is ``vmtune``."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_at_most_twelve_modules_are_loose():
    """vmtune/ holds at most 12 modules beside its subpackages (``__init__`` and ``__main__`` count):
    the rest live in the folders that are ARCHITECTURE.md's layers."""
    loose = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(loose) <= LOOSE_MOST, loose


def test_every_folder_of_modules_is_a_package():
    """A folder of modules has its ``__init__.py`` (setup.cfg's ``packages = find:`` installs only
    packages)."""
    assert [str(d.relative_to(ROOT)) for d in sorted(PACKAGE.rglob("*"))
            if d.is_dir() and any(d.glob("*.py")) and not (d / "__init__.py").is_file()] == []


def test_no_import_cycle_between_top_level_parts():
    """No top-level part of vmtune/ (a loose module or a top-level subpackage) reaches itself again
    through the imports of its modules, lazy imports inside functions counted: the layers stack."""
    edges: dict[tuple[str, str], list[str]] = {}
    for name, targets in _graph().items():
        for target in targets:
            if _part(name) != _part(target):
                edges.setdefault((_part(name), _part(target)), []).append(f"{name} -> {target}")
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    cycle = _cycle(graph)
    assert cycle is None, [(a, b, edges[a, b][:3]) for a, b in zip(cycle, cycle[1:])]


def test_config_is_a_leaf():
    """``config`` imports nothing of vmtune but the modules below every layer (issue 33)."""
    assert {_part(t) for t in _graph()["vmtune.config"]} <= {"cpuset", "errors", "schema"}


# ARCHITECTURE.md's drawing, top to bottom (its shared row split: profiles over config over the rest): a
# part imports only the parts of its own row or below it
# (``vmtune`` is the package's __init__: its version, and its public names imported on first use)
ROWS = (
    ("__main__",),
    ("cli", "hook", "doctor", "live"),  # the adapters
    ("hostmap",),
    ("install",),  # the hook's install and status side
    ("hoststate",),
    ("driver", "context", "passes"),  # the rewriter
    ("placement",),
    ("record",),
    ("host",),
    ("xml",),
    ("profiles",),
    ("config",),
    ("schema", "cpuset", "atomic", "roots", "oneline", "errors", "vmtune"),
)


def test_every_part_has_its_row():
    assert sorted({_part(name) for name in MODULES}) == sorted(p for row in ROWS for p in row)


def test_imports_go_down_the_drawing():
    """Every import between two parts goes from a row of ARCHITECTURE.md's drawing to its own or one
    below it."""
    row = {part: i for i, parts in enumerate(ROWS) for part in parts}
    up = [f"{name} -> {target}" for name, targets in sorted(_graph().items()) for target in sorted(targets)
          if row.get(_part(target), -1) < row.get(_part(name), -1)]
    assert up == []


def test_the_drawing_names_every_folder():
    """ARCHITECTURE.md's drawing names each top-level subpackage (``xml/``) and each loose module
    (``config.py``) of vmtune/, and every ``vmtune/...`` path it names exists."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    drawing = text.split("```")[1]
    folders = sorted(d.name for d in PACKAGE.iterdir() if (d / "__init__.py").is_file())
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if not p.name.startswith("__"))
    assert [f for f in folders if f"{f}/" not in drawing] == []
    assert [m for m in loose if m not in drawing] == []
    named = set(re.findall(r"vmtune/[\w/]+(?:\.py|/)", text))
    assert sorted(p for p in named if not (ROOT / p).exists()) == []
