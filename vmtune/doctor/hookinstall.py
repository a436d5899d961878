"""The hook itself (area ``hook``): the file in ``/etc/libvirt/hooks/qemu.d`` (under ``--root``),
executable, its interpreter present, and a libvirt that reads ``qemu.d`` (6.5 or later) and started
after the hook was installed (vmtune/install/hookcheck.py).

A hook whose interpreter is gone is a FAIL: libvirt runs it for every domain and fails the start
of each when it cannot. Any other problem is a WARN when the domains include vmtune-tagged ones
(they start untuned), else INFO.
"""

from __future__ import annotations

from ..install import hookcheck
from ..install.hookfile import MARK
from .findings import Context, Finding, maker

AREA = "hook"
new = maker(AREA)
FIX = "`vmtune hook install` (or the Debian package), then restart libvirtd (or virtqemud)"


def check(ctx: Context) -> list[Finding]:
    if not ctx.has("root"):
        return [new("SKIP", "(no --root)", "no --root tree given: the hook's file not read")]
    found = hookcheck.inspect(root=ctx.roots.root)
    tagged = any(MARK.decode() in xml for xml, _state in ctx.domains or ())
    problems = found.problems()
    if not problems:
        where = f" -> {found.target}" if found.target else ""
        return [new("OK", found.path, f"vmtune's hook{where}, run by {found.interpreter}; libvirt "
                    f"{found.libvirt or '(version unknown)'} reads qemu.d")]
    out = []
    for problem in problems:
        level = "FAIL" if found.broken and "interpreter" in problem else "WARN" if tagged else "INFO"
        out.append(new(level, found.path, problem, "the hook installed, runnable, and seen by libvirt",
                       FIX if level != "INFO" or not found.exists else ""))
    return out
