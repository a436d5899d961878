"""The documentation holds together: README.md fits on a screen and opens with its two commands, and
every relative link in README.md, ARCHITECTURE.md and docs/*.md reaches a file that exists and, for a
``#fragment``, a heading of that file (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *DOCS]
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def prose(text: str) -> str:
    """The text without its fenced code blocks (a `#` or a `[x](y)` there is code, not markdown)."""
    return FENCE.sub("", text)


def anchors(text: str) -> set[str]:
    """GitHub's anchors for the headings of a markdown text: lower case, punctuation dropped, spaces
    to hyphens, and a repeated one numbered (-1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(prose(text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(page: Path) -> list[str]:
    return [target for target in LINK.findall(prose(page.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto: are not checked here


def test_the_pages_exist():
    assert (ROOT / "docs" / "map-example.svg").is_file()
    assert {p.name for p in DOCS} >= {"cli.md", "hook.md", "doctor.md", "config.md", "library.md",
                                      "fleets.md", "testing.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    bad = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif fragment and (dest.suffix != ".md" or fragment not in anchors(dest.read_text())):
            bad.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not bad, bad


def test_readme_fits_on_a_screen():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_readme_opens_with_the_two_commands():
    """The first code block is the two commands that work on a fresh Debian machine, and the warning
    that the test command changes the machine comes before anything else does."""
    text = (ROOT / "README.md").read_text()
    first = re.search(r"```(\w*)\n(.*?)```", text, re.S)
    assert first and first.group(1) == "sh", text[:600]
    commands = [line.split("#", 1)[0].strip() for line in first.group(2).splitlines()]
    assert commands == ["scripts/vmtune rewrite examples/stock-latency.xml --diff", "scripts/test"], commands
    head = text[first.end():].split("\n## ", 1)[0]
    assert "disposable VM" in head and "changes the machine it runs on" in head, head
    assert "docs/testing.md" in head, head


def test_readme_lists_every_doc():
    """Each docs/*.md is linked from README's Documentation list."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Documentation\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"\]\((docs/[^)#]+\.md)\)", section))
    assert listed == {f"docs/{p.name}" for p in DOCS}, listed


def test_the_anchors_follow_github():
    text = "# vmtune\n## `vmtune map`: who holds which CPU\n## A, b\n## A, b\n```\n# not a heading\n```\n"
    assert anchors(text) == {"vmtune", "vmtune-map-who-holds-which-cpu", "a-b", "a-b-1"}
