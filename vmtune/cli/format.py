"""What the commands print for people (``--json`` prints the library's ``to_dict()`` instead).

Each function returns text or lines, and prints nothing: the commands print them.
"""

from __future__ import annotations

import difflib

from .. import cpuset, units


def diff(before: str, after: str, fromfile: str, tofile: str) -> str:
    """A unified diff of two XML texts."""
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=fromfile, tofile=tofile))


def explain(result) -> list[str]:
    """``rewrite --explain``: one line per change of a vmtune.Result, with its reason."""
    lines = [f"profile {result.profile}: {len(result.changes)} change(s)"]
    lines += [f"placement: {why}" for why in result.placement.get("why", ())]
    lines += [f"{c.element}: {c.before or '(none)'} -> {c.after or '(removed)'}  # {c.reason}" for c in result.changes]
    return lines


def topology(host, reserved: frozenset[int]) -> list[str]:
    """``vmtune topology``: a summary line, then one line per node."""
    lines = [f"arch {host.arch}  vendor {host.vendor or 'unknown'}  smt {'on' if host.smt else 'off'}  "
             f"isolated {cpuset.format(host.isolated) or '-'}  reserved {cpuset.format(reserved) or '-'}",
             f"{'node':>4}  {'cpus':<16} {'memory MiB':>10}  {'free hugepages':<22} cores (sibling threads)"]
    for cell in host.cells:
        pages = " ".join(f"{units.page(size)}:{count}" for size, count in sorted(cell.pages.items())) or "-"
        cores = " ".join("(" + ",".join(map(str, core)) + ")" for core in host.cores(cell.id)) or "-"
        lines.append(f"{cell.id:>4}  {cpuset.format(cell.cpus) or '-':<16} {cell.memory_kib // 1024:>10}  "
                     f"{pages:<22} {cores}")
    for l3 in host.caches:
        size = f", {units.size(l3.size_kib)}" if l3.size_kib else ""
        lines.append(f"L3 {l3.id}: CPUs {cpuset.format(l3.cpus)}{size}")
    if host.hybrid:
        small = [c for c in host.cpus if host.efficient(c)]
        lines.append(f"efficiency cores: {cpuset.format(small)}; performance: {cpuset.format(set(host.cpus) - set(small))}")
    return lines


def table(rows: list[list[str]]) -> list[str]:
    """Rows as left-aligned columns two spaces apart (the first row is the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def _domains(report) -> list[str]:
    rows = [["DOMAIN", "PROFILE", "STATE", "VCPUS", "PINNED", "NODES", "HUGEPAGES"]]
    for r in report.rows:
        pages = " ".join(f"{units.page(s)} (any node)" if n is None else f"{n}:{c}x{units.page(s)}"
                         for (n, s), c in sorted(r.pages.items(), key=lambda kv: (kv[0][0] is None, kv[0]))) or "-"
        rows.append([r.name, r.profile or "-", r.state, str(r.vcpus), cpuset.format(r.pinned) or "-",
                     cpuset.format(r.nodes) or "-", pages])
    return table(rows) if report.rows else ["no domains"]


def _nodes(report) -> list[str]:
    rows = [["NODE", "CPUS", "RESERVED", "DEDICATED", "FREE FOR DEDICATED", "MEMORY MiB", "FREE MiB",
             "HUGEPAGES FREE/NEEDED"]]
    for n in report.nodes:
        pages = " ".join(f"{units.page(size)}:{free}/{need}" for size, (free, need) in sorted(n.hugepages.items())) or "-"
        rows.append([str(n.node), cpuset.format(n.cpus) or "-", cpuset.format(n.reserved) or "-",
                     cpuset.format(n.dedicated) or "-", cpuset.format(n.free_dedicated) or "-",
                     str(n.memory_kib // 1024) if n.memory_kib else "?",
                     "?" if n.free_kib is None else str(n.free_kib // 1024), pages])
    return table(rows)


def _problems(report) -> list[str]:
    if report.ok:
        return ["no problems"]
    width = max(len(p.kind) for p in report.problems)
    return ([f"{len(report.problems)} problem{'s' if len(report.problems) != 1 else ''}:"]
            + [f"  {p.kind.ljust(width)}  {p.message}" for p in report.problems])


def plan(report) -> list[str]:
    """``vmtune plan``: the domains, the nodes and the problems of a vmtune.audit.Report."""
    return _domains(report) + [""] + _nodes(report) + [""] + _problems(report)
