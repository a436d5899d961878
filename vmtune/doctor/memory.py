"""Memory: transparent hugepages, KSM, hugepage pools per node against what the domains need,
and automatic NUMA balancing.

A domain backed by hugepages (``<memoryBacking><hugepages>``) needs its pages on the host nodes
its numatune names, else anywhere (vmtune.placement.audit's rows, by the rules of vmtune/placement/holdings.py). A running domain already holds
its pages, so the pool must not be smaller than what running domains hold (or they cannot start
again); a defined domain that is not running needs its pages free.
"""

from __future__ import annotations

import re
from collections import defaultdict

from ..xml import units
from .findings import Context, Finding, maker

new = maker("memory")
THP = "kernel/mm/transparent_hugepage"
KSM = "kernel/mm/ksm"


def _selected(text: str | None) -> str | None:
    m = re.search(r"\[([^\]]+)\]", text or "")
    return m.group(1) if m else text


def _thp(ctx: Context) -> list[Finding]:
    out = []
    enabled = _selected(ctx.read("sysfs", f"{THP}/enabled"))
    if enabled is not None:
        good = enabled in ("always", "madvise")
        out.append(new("OK" if good else "WARN", ctx.path("sysfs", f"{THP}/enabled"), enabled, "always or madvise",
                       "" if good else f"echo madvise > /sys/{THP}/enabled (QEMU asks for THP on guest RAM)"))
    defrag = _selected(ctx.read("sysfs", f"{THP}/defrag"))
    if defrag is not None:
        good = defrag != "always"
        out.append(new("OK" if good else "WARN", ctx.path("sysfs", f"{THP}/defrag"),
                       defrag + ("" if good else " (page faults stall in direct compaction)"),
                       "madvise or defer+madvise", "" if good else f"echo madvise > /sys/{THP}/defrag"))
    return out


def _ksm(ctx: Context) -> list[Finding]:
    run = ctx.read("sysfs", f"{KSM}/run")
    if run is None:
        return []
    sharing = ctx.read("sysfs", f"{KSM}/pages_sharing") or "?"
    source = ctx.path("sysfs", f"{KSM}/run")
    if run == "1":
        return [new("WARN", source, f"1 (merging; pages_sharing {sharing}): copy-on-write faults and ksmd CPU time",
                    "0", "echo 0 > /sys/kernel/mm/ksm/run (vmtune's hook does this while a latency VM runs)")]
    if run == "0" and sharing not in ("0", "?"):
        return [new("INFO", source, f"0, but {sharing} pages stay merged", "2 to unmerge them",
                    "echo 2 > /sys/kernel/mm/ksm/run")]
    return [new("OK", source, f"{run} ({'stopped' if run == '0' else 'unmerged'})")]


def pools(ctx: Context) -> dict[tuple[int | None, int], tuple[int, int]]:
    """(node, page size KiB) -> (total, free); node None when the kernel has no NUMA directory."""
    out = {}
    rels = ctx.glob("sysfs", "devices/system/node/node[0-9]*/hugepages/hugepages-*kB") or \
        ctx.glob("sysfs", "kernel/mm/hugepages/hugepages-*kB")
    for rel in rels:
        m = re.search(r"(?:node(\d+)/)?hugepages/hugepages-(\d+)kB$", rel)
        total = ctx.read("sysfs", f"{rel}/nr_hugepages") or "0"
        free = ctx.read("sysfs", f"{rel}/free_hugepages") or "0"
        if m and total.isdigit() and free.isdigit():
            out[(int(m.group(1)) if m.group(1) else None, int(m.group(2)))] = (int(total), int(free))
    return out


def demand(rows) -> dict[tuple[int | None, int], dict]:
    """(node, or None for any node; page size KiB) -> {"running": pages, "stopped": pages, "names": [...]}
    from the audit's rows (vmtune.placement.audit.Row: pages, state)."""
    from ..placement.audit import holds_now

    out: dict = defaultdict(lambda: {"running": 0, "stopped": 0, "names": []})
    for row in rows:
        for where, pages in row.pages.items():
            out[where]["running" if holds_now(row.state) else "stopped"] += pages
            out[where]["names"].append(row.name)
    return dict(out)


def _hugepages(ctx: Context) -> list[Finding]:
    have = pools(ctx)
    source = ctx.path("sysfs", "devices/system/node/node*/hugepages")
    listing = ", ".join(f"{'node' + str(n) + ' ' if n is not None else ''}{units.page(s)} {t} total/{f} free"
                        for (n, s), (t, f) in sorted(have.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1])))
    from .domains import report

    audit = report(ctx)
    if ctx.domains is None or isinstance(audit, str):
        why = "domains unknown" if ctx.domains is None else "domains not readable"
        return [new("INFO", source, (listing or "no hugepage pools") + f"; {why}, needs not checked")]
    needs = demand(audit.rows if audit else ())
    if not needs:
        return [new("INFO", source, (listing or "no hugepage pools") + "; no domain is backed by hugepages")]
    out = []
    for (node, size), need in sorted(needs.items(), key=lambda kv: (kv[0][0] is not None, kv[0])):
        keys = [k for k in have if k[1] == size and (node is None or k[0] in (node, None))]
        total = sum(have[k][0] for k in keys)
        free = sum(have[k][1] for k in keys)
        if node is None:  # anywhere: the whole host's pool against every domain of that size
            running = sum(n["running"] for (_, sz), n in needs.items() if sz == size)
            stopped = sum(n["stopped"] for (_, sz), n in needs.items() if sz == size)
            pool = f"/sys/kernel/mm/hugepages/hugepages-{size}kB/nr_hugepages"
        else:
            running, stopped = need["running"], need["stopped"]
            pool = f"/sys/devices/system/node/node{node}/hugepages/hugepages-{size}kB/nr_hugepages"
        where = f"node{node} " if node is not None else "any node "
        found = f"{where}{units.page(size)}: {total} total, {free} free; {', '.join(sorted(set(need['names'])))} need " \
                f"{need['running']} (running) + {need['stopped']} (not running)"
        short = total < running + stopped or free < stopped
        fix = f"echo {total + max(running + stopped - total, stopped - free)} > {pool} (1G pages: at boot)"
        out.append(new("FAIL" if short else "OK", source, found, f"total >= {running + stopped}, free >= {stopped}",
                       fix if short else ""))
    return out


def _numa_balancing(ctx: Context) -> list[Finding]:
    value = ctx.read("proc", "sys/kernel/numa_balancing")
    if value is None:
        return []
    nodes = len(ctx.glob("sysfs", "devices/system/node/node[0-9]*"))
    source = ctx.path("proc", "sys/kernel/numa_balancing")
    if nodes <= 1:
        return [new("OK", source, f"{value} (one NUMA node: nothing to balance)")]
    if value == "1":
        return [new("WARN", source, f"1 on {nodes} nodes: hinting faults and page moves under pinned guests", "0",
                    "sysctl -w kernel.numa_balancing=0 (vmtune binds guest memory to its node)")]
    return [new("OK" if value == "0" else "INFO", source, value)]


def check(ctx: Context) -> list[Finding]:
    out = []
    if ctx.has("sysfs"):
        out += _thp(ctx) + _ksm(ctx) + _hugepages(ctx)
    else:
        out.append(new("SKIP", "(no --sysfs)", "no sysfs tree given"))
    return out + _numa_balancing(ctx)
