"""The test suite's own shape (tests/): no test module imports another (imports inside functions
count; the shared helpers and fixtures live in tests/fixtures/ and conftest.py), every test module
opens with a docstring that names what it covers, and no file or fixture is named by an issue number
or twice for two things."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from fixtures.sources import parsed

TESTS = Path(__file__).resolve().parent
FILES = sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
TEST_MODULES = sorted(p for p in TESTS.glob("test_*.py"))
# what a test module's docstring may name as the part it covers: a module or folder of vmtune, a file
# of the checkout (bench/, scripts/, ansible/, debian/, hooks/, docs/, tests/ itself), or a command
COVERS = re.compile(r"vmtune[./][\w.]+|vmtune/|vmtune\.kvm|(bench|scripts|ansible|debian|hooks|docs|tests)/[\w./-]*"
                    r"|[A-Z]+\.md|setup\.cfg|``vmtune [a-z]")


def _imported(tree: ast.AST):
    """(module name, line) of every import in ``tree``, wherever it stands (in a function, a class,
    an ``if``), with ``importlib.import_module("name")`` too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level and node.module is None:  # from . import test_x
                for alias in node.names:
                    yield alias.name, node.lineno
            else:
                yield node.module or "", node.lineno
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.args[0].value, node.lineno


def _is_test_module(name: str) -> bool:
    """Whether an imported name is one of tests/'s test modules (``test_x``, ``tests.test_x``, …)."""
    return any(part.startswith("test_") for part in name.split("."))


def test_no_test_module_imports_another_test_module():
    """Every helper a test module shares is in tests/fixtures/ (or a helper module beside the tests,
    or conftest.py): importing a test module runs its module-level code and collects nothing, and
    hides where a fixture comes from."""
    found = [f"{path.relative_to(TESTS)}:{line}: {name}"
             for path in FILES for name, line in _imported(parsed(path))
             if _is_test_module(name)]
    assert found == []


def test_the_check_sees_every_kind_of_import():
    """The check above finds a test module however it is imported."""
    source = ("import test_a\nfrom test_b import x\ndef f():\n    from tests.test_c import y\n"
              "    import importlib\n    importlib.import_module('test_d')\nfrom . import test_e\n"
              "import fixtures.hook\nfrom hosttrees import hosts\n")
    names = sorted(name for name, _ in _imported(ast.parse(source)) if _is_test_module(name))
    assert names == ["test_a", "test_b", "test_d", "test_e", "tests.test_c"]


def test_every_test_module_opens_with_what_it_covers():
    """A test module's docstring opens (its first paragraph) with the module, folder or command it
    covers, not with an issue number."""
    missing, by_issue = [], []
    for path in TEST_MODULES:
        doc = ast.get_docstring(parsed(path))
        first = " ".join((doc or "").split("\n\n")[0].split())
        if not COVERS.search(first):
            missing.append(path.name)
        if re.match(r"(?i)issue\b", first):
            by_issue.append(path.name)
    assert missing == [] and by_issue == []


def test_no_file_is_named_by_an_issue_number():
    """A test file is named by the module or subject it covers: test_issue12.py says neither."""
    assert [p.name for p in FILES if re.search(r"(?i)issue_?\d|^test_\d", p.name)] == []


def _fixtures(path: Path):
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
            yield node.name


def test_each_fixture_name_has_one_meaning():
    """No two modules of tests/ define a fixture of the same name (``host`` had four meanings), and
    none is called just ``host`` or ``env``."""
    where: dict[str, list[str]] = {}
    for path in FILES:
        for name in _fixtures(path):
            where.setdefault(name, []).append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
    assert not {"host", "env"} & set(where)
