"""vmtune/hoststate/document.py's RealPaths: where a knob the state names resolves, below the sysfs
root (a knob that resolves outside it is damage), with each folder resolved once: the same answer
as ``os.path.realpath`` for any path, links, chains of links, ``..`` and missing parts included."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from vmtune.hoststate.document import RealPaths

PARTS = ("a", "b", "c", "f", "in", "out", "bb", "bbb", "up", "x", "..", ".", "nope", "")


def _tree(root: str, outside: str) -> str:
    """A sysfs-like tree with links: inside it, out of it, chained, and up out of it."""
    sysfs = os.path.join(root, "sys")
    os.makedirs(os.path.join(sysfs, "a", "b", "c"))
    os.makedirs(os.path.join(sysfs, "x", "y"))
    for target, name in (("../x", "a/in"), (outside, "a/out"), ("b", "a/bb"), ("bb", "a/bbb"),
                         ("../../..", "a/b/up"), ("c/f", "a/b/f")):
        os.symlink(target, os.path.join(sysfs, name))
    open(os.path.join(sysfs, "a", "b", "c", "f"), "w").close()
    return sysfs


@given(st.lists(st.lists(st.sampled_from(PARTS), min_size=1, max_size=6), min_size=1, max_size=30))
def test_real_paths_are_realpaths(tmp_path_factory, paths):
    root = tmp_path_factory.mktemp("paths")
    sysfs = _tree(str(root), str(tmp_path_factory.mktemp("outside")))
    real = RealPaths(sysfs)  # one per read, remembering folders across the paths it is asked
    for parts in paths:
        rel = "/".join(parts)
        assert real.of(rel) == os.path.realpath(os.path.join(sysfs, rel)), rel
