"""The Debian package's sources, read from the checkout without building anything (the build and
the install are tests/test_debian_package.py's, a machine module): it depends on the Python that
vmtune needs, and it ships the example files its man page names."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

from vmtune.cli import helptext

ROOT = Path(__file__).resolve().parents[1]
DEBIAN = ROOT / "debian"


def _field(name: str) -> str:
    """A field of the binary package's paragraph of debian/control, continuation lines joined."""
    text = (DEBIAN / "control").read_text()
    binary = text.split("\nPackage: ", 1)[1]
    match = re.search(rf"^{name}:(.*(?:\n[ \t].*)*)", binary, re.M)
    assert match, name
    return " ".join(match.group(1).split())


def test_the_package_depends_on_the_python_vmtune_needs():
    """``Depends`` names python3 at the version setup.cfg's ``python_requires`` gives (tomllib is
    3.11's): ``${python3:Depends}`` alone says only ``python3:any``."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    least = re.fullmatch(r">=\s*([\d.]+)", cfg["options"]["python_requires"].strip()).group(1)
    depends = [d.strip() for d in _field("Depends").split(",") if d.strip()]
    assert f"python3 (>= {least})" in depends, depends


def _shipped() -> set[str]:
    """The files debian/vmtune.examples installs, as paths under /usr/share/doc/vmtune/examples
    (dh_installexamples copies each match, a folder whole, by its last name)."""
    out = set()
    for pattern in (DEBIAN / "vmtune.examples").read_text().split():
        matches = sorted(ROOT.glob(pattern))
        assert matches, f"debian/vmtune.examples: {pattern} matches nothing"
        for match in matches:
            files = [match] if match.is_file() else [p for p in match.rglob("*") if p.is_file()]
            out |= {f"{helptext.SHIPPED}/{p.relative_to(match.parent)}" for p in files}
    return out


def test_the_man_page_names_only_example_files_the_package_ships():
    """Every path under /usr/share/doc/vmtune/examples that vmtune(8) names is a file the package
    installs there, and vmtune(8)'s examples use at least one."""
    assert helptext.SHIPPED == "/usr/share/doc/vmtune/examples"  # dh_installexamples' folder for the package
    page = (ROOT / "man" / "vmtune.8").read_text()
    named = set(re.findall(re.escape(helptext.SHIPPED) + r"/[\w./-]+\w", page))
    assert named, "vmtune(8) names no example file"
    assert named <= _shipped(), named - _shipped()


def test_every_example_that_names_a_file_names_one_that_exists():
    """In a checkout, ``--help``'s examples name the checkout's examples/, and each file exists."""
    for command in helptext.EXAMPLES:
        for line, _what in helptext.examples(command):
            for word in shlex.split(line.split("|")[0]):
                if "/examples/" in word:
                    assert Path(word).is_file(), (command, line)
