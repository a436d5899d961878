"""The sysfs and proc readers vmtune shares, and the Host loader of a sysfs tree.

Every reader takes the root it reads (a sysfs root such as ``/sys``, a proc root such as
``/proc``) or a path below one, so that tests (``$VMTUNE_SYSFS``, ``$VMTUNE_PROCFS``) and
``vmtune doctor --sysfs/--proc/--root`` can point it at a captured tree. A file that cannot be read
gives None (or nothing), not an exception, unless the caller names the errors that mean absent
(``value(absent=...)``: the hook's knobs). The hook, the doctor and ``Host.from_sysfs`` read
through these.

``load`` returns the fields of a Host as plain values (each cell and CPU a dict of its fields);
``Host.from_sysfs`` builds the Host of them, so this module does not import the topology.
"""

from __future__ import annotations

import os
import re

from .. import cpuset
from ..errors import InvalidInput
from ..xml.units import SCALE

CPU_DIR = "devices/system/cpu"
NODE_DIR = "devices/system/node"
POOLS_DIR = "kernel/mm/hugepages"  # the hugepage pools of a kernel without NUMA (and the sizes)
POOL = re.compile(r"hugepages-(\d+)kB")
VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}
PERFORMANCE = "performance"  # a core kind (Cpu.kind) on a hybrid host
EFFICIENCY = "efficiency"
HYBRID = (("cpu_core", PERFORMANCE), ("cpu_atom", EFFICIENCY))  # Intel's PMUs: devices/NAME/cpus
SIZE = re.compile(r"(\d+)\s*([KMG]?)", re.IGNORECASE)


# -- files ----------------------------------------------------------------------------------------
def text(path: str) -> str | None:
    """The file's text; None when it cannot be read."""
    try:
        with open(path, "rb") as fh:  # bytes, then decoded: a text-mode file costs a third more per read
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


def value(path: str, absent: type[OSError] = OSError) -> str | None:
    """The file's text, stripped; None when reading it raises ``absent`` (the others propagate)."""
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace").strip()
    except absent:
        return None


def number(path: str) -> int | None:
    """The file's integer; None when it cannot be read or holds something else."""
    found = text(path)
    try:
        return int(found.strip()) if found is not None else None
    except ValueError:
        return None


def cpu_list(found: str | None) -> frozenset[int]:
    """A CPU list file's CPUs (``0-3,8`` or ``0 1 2 3``); empty for a missing or garbled one."""
    try:
        return cpuset.parse((found or "").replace(" ", ","))
    except InvalidInput:
        return frozenset()


# -- CPUs, memory, hugepages ----------------------------------------------------------------------
def cpu_dirs(sysfs: str) -> list[int]:
    """The CPUs that have a ``devices/system/cpu/cpuN`` directory, ascending."""
    try:
        names = os.listdir(os.path.join(sysfs, CPU_DIR))
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := re.fullmatch(r"cpu(\d+)", n)))


def online_cpus(sysfs: str) -> list[int]:
    """The online CPUs (``devices/system/cpu/online``, else every ``cpuN`` directory), ascending."""
    online = cpu_list(text(os.path.join(sysfs, CPU_DIR, "online")))
    return sorted(online) if online else cpu_dirs(sysfs)


def cpu_limit(sysfs: str, default: int = cpuset.MAX_HOST_CPUS) -> int:
    """One past the highest CPU id the kernel may ever use (``possible``, ``present``, ``online``
    and the ``cpuN`` directories), so a CPU list from outside can be bounded by the host."""
    ids = set(cpu_dirs(sysfs))
    for name in ("possible", "present", "online"):  # a garbled file: the others still count
        ids |= cpu_list(text(os.path.join(sysfs, CPU_DIR, name)))
    return max(ids) + 1 if ids else default


def meminfo_kib(path: str, key: str = "MemTotal:") -> int | None:
    """``key``'s value in a meminfo file: ``MemTotal:  123 kB`` (proc) or ``Node 0 MemTotal:  123 kB``
    (nodeN/meminfo), in KiB (the kernel's "kB"); None when the file or the key is missing."""
    for line in (text(path) or "").splitlines():
        words = line.split()
        if key in words:
            rest = words[words.index(key) + 1:]
            if rest and rest[0].isdigit():
                return int(rest[0])
    return None


def cpuinfo(proc: str) -> list[dict[str, str]]:
    """``proc/cpuinfo`` as one dict per processor (empty when it cannot be read)."""
    out: list[dict[str, str]] = []
    for block in (text(os.path.join(proc, "cpuinfo")) or "").strip().split("\n\n"):
        entry = {}
        for line in block.splitlines():
            key, sep, val = line.partition(":")
            if sep:
                entry[key.strip()] = val.strip()
        if entry:
            out.append(entry)
    return out


def vendor(proc: str) -> str | None:
    """"Intel" or "AMD" from the first ``vendor_id`` in ``proc/cpuinfo``; None for any other."""
    for entry in cpuinfo(proc):
        if "vendor_id" in entry:
            return VENDORS.get(entry["vendor_id"])
    return None


def pools(directory: str, leaf: str = "free_hugepages") -> dict[int, int]:
    """The ``hugepages-<size>kB/<leaf>`` counts under ``directory``: size KiB -> pages (a pool
    whose file cannot be read is left out)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    out = {}
    for name in names:
        m = POOL.fullmatch(name)
        count = number(os.path.join(directory, name, leaf)) if m else None
        if count is not None:
            out[int(m.group(1))] = count
    return out


def default_page_kib(sysfs: str, proc: str) -> int | None:
    """The kernel's default hugepage size: ``Hugepagesize`` in meminfo, else the smallest pool size;
    None when neither is there."""
    size = meminfo_kib(os.path.join(proc, "meminfo"), "Hugepagesize:")
    if size is not None:
        return size
    try:
        sizes = [int(m.group(1)) for n in os.listdir(os.path.join(sysfs, POOLS_DIR)) if (m := POOL.fullmatch(n))]
    except OSError:
        sizes = []
    return min(sizes) if sizes else None


# -- the Host loader ------------------------------------------------------------------------------
def _cpu(cpu_dir: str, cid: int, node: int) -> dict:
    topo = os.path.join(cpu_dir, f"cpu{cid}", "topology")
    siblings = cpuset.parse(text(os.path.join(topo, "thread_siblings_list")))
    return {"id": cid, "node": node, "socket": number(os.path.join(topo, "physical_package_id")),
            "die": number(os.path.join(topo, "die_id")), "core": number(os.path.join(topo, "core_id")),
            "siblings": siblings | {cid}}


def _l3_dir(cpu_dir: str, cid: int) -> str | None:
    """``cpuN/cache/indexM`` of ``cid``'s L3 (index3 on x86, else the one whose level is 3)."""
    cache = os.path.join(cpu_dir, f"cpu{cid}", "cache")
    if number(os.path.join(cache, "index3", "level")) == 3:
        return os.path.join(cache, "index3")
    try:
        names = sorted(n for n in os.listdir(cache) if re.fullmatch(r"index\d+", n))
    except OSError:
        return None
    return next((os.path.join(cache, n) for n in names if number(os.path.join(cache, n, "level")) == 3), None)


def _size_kib(found: str | None) -> int:
    """A cache ``size`` file (``16384K``) in KiB; 0 when it says nothing readable."""
    m = SIZE.fullmatch((found or "").strip())
    if not m:
        return 0
    return int(m.group(1)) * SCALE[(m.group(2) or "b").lower()] // 1024


def l3_domains(found: list[tuple[int, frozenset[int], int]]) -> tuple[list[dict], dict[int, int]]:
    """The L3 domains of ``found`` ((id, online CPUs, KiB) as read, in any order) and each CPU's
    L3 id: entries with one id and common CPUs are one cache (read twice, or code and data); a CPU
    already in an earlier cache stays there. An id that another set of CPUs has already (a kernel
    that numbers L3 caches per socket) is replaced by the next one past every id read, the caches
    taken by their first CPU: both loaders (capabilities.py too) number the same machine alike."""
    merged: list[list] = []
    for ident, cpus, size in found:
        same = next((m for m in merged if m[0] == ident and m[1] & cpus), None)
        if same is None:
            merged.append([ident, set(cpus), size])
        else:
            same[1] |= cpus
            same[2] = same[2] or size
    domains, of, taken = [], {}, set()
    spare = max((m[0] for m in merged), default=-1) + 1
    for ident, cpus, size in sorted(merged, key=lambda m: min(m[1])):
        cpus = frozenset(c for c in cpus if c not in of)
        if not cpus:
            continue
        if ident in taken:
            ident, spare = spare, spare + 1
        taken.add(ident)
        domains.append({"id": ident, "cpus": cpus, "size_kib": size})
        of.update((c, ident) for c in cpus)
    return sorted(domains, key=lambda d: d["id"]), of


def _caches(cpu_dir: str, online: frozenset[int], known: frozenset[int]) -> tuple[list[dict], dict[int, int]]:
    """The L3 caches (each read once, at its first CPU) and each online CPU's L3 id. A shared
    list naming a CPU the host does not have is InvalidInput; offline CPUs are left out. A cache
    without an ``id`` is left out, as libvirt leaves it out of the capabilities."""
    found: list[tuple[int, frozenset[int], int]] = []
    seen: set[int] = set()
    for cid in sorted(online):
        if cid in seen:
            continue
        where = _l3_dir(cpu_dir, cid)
        if where is None:
            continue
        shared = cpu_list(text(os.path.join(where, "shared_cpu_list")))
        if shared - known:
            raise InvalidInput(f"{os.path.join(where, 'shared_cpu_list')} names CPU(s) "
                               f"{cpuset.format(shared - known)}, which this host does not have")
        cpus = (shared & online) | {cid}
        seen |= cpus
        ident = number(os.path.join(where, "id"))
        if ident is not None and ident >= 0:
            found.append((ident, cpus, _size_kib(text(os.path.join(where, "size")))))
    return l3_domains(found)


def _kinds(root: str, online: frozenset[int]) -> dict[int, str]:
    """Each online CPU's core kind on a hybrid host (empty on any other): Intel's ``cpu_core`` and
    ``cpu_atom`` PMUs, else ``cpuN/cpu_capacity``, where the highest capacity is performance."""
    lists = {kind: cpu_list(text(os.path.join(root, "devices", pmu, "cpus"))) & online for pmu, kind in HYBRID}
    if all(lists.values()):
        return {c: kind for kind, cpus in lists.items() for c in cpus}
    cpu_dir = os.path.join(root, CPU_DIR)
    if not online or number(os.path.join(cpu_dir, f"cpu{min(online)}", "cpu_capacity")) is None:
        return {}
    capacity = {c: number(os.path.join(cpu_dir, f"cpu{c}", "cpu_capacity")) for c in sorted(online)}
    known = {c: v for c, v in capacity.items() if v is not None}
    if len(set(known.values())) < 2:
        return {}
    top = max(known.values())
    return {c: PERFORMANCE if v == top else EFFICIENCY for c, v in known.items()}


def _node_ids(node_dir: str) -> list[int]:
    online = text(os.path.join(node_dir, "online"))
    if online is not None:
        return sorted(cpuset.parse(online))
    return sorted(int(n[4:]) for n in os.listdir(node_dir) if re.fullmatch(r"node\d+", n))


def _node_links(path: str) -> frozenset[int]:
    """The CPUs a node directory links (``cpuN``): offline ones too, where ``cpulist`` may drop them."""
    try:
        return frozenset(int(n[3:]) for n in os.listdir(path) if re.fullmatch(r"cpu\d+", n))
    except OSError:
        return frozenset()


def _numa(root: str, online: frozenset[int]) -> tuple[list[dict], list[dict], dict[int, int]]:
    """The cells, the CPUs and the offline CPUs (id -> node) under ``devices/system/node``."""
    cpu_dir, node_dir = os.path.join(root, CPU_DIR), os.path.join(root, NODE_DIR)
    nodes, cells, cpus, seen = _node_ids(node_dir), [], [], set()
    offline: dict[int, int] = {}
    for node in nodes:
        path = os.path.join(node_dir, f"node{node}")
        known = cpuset.parse(text(os.path.join(path, "cpulist"))) | _node_links(path)
        for cid in sorted(known - online):
            offline.setdefault(cid, node)
        ids = sorted(known & online - seen)
        seen.update(ids)
        cpus += [_cpu(cpu_dir, c, node) for c in ids]
        row = (text(os.path.join(path, "distance")) or "").split()
        ok = len(row) == len(nodes) and all(d.isdigit() for d in row)
        cells.append({"id": node, "cpus": tuple(ids), "memory_kib": meminfo_kib(os.path.join(path, "meminfo")) or 0,
                      "pages": pools(os.path.join(path, "hugepages")),
                      "distances": dict(zip(nodes, map(int, row))) if ok else {}})
    stray = sorted(online - seen)  # online in no node's list: the kernel's default, the first node
    if stray and cells:
        cells[0]["cpus"] = tuple(sorted(cells[0]["cpus"] + tuple(stray)))
        cpus += [_cpu(cpu_dir, c, cells[0]["id"]) for c in stray]
    return cells, cpus, offline


def load(root: str = "/sys", proc: str | None = None, arch: str | None = None) -> dict:
    """The fields of the Host under the sysfs ``root`` (``proc``: the proc root, else ``proc`` beside
    ``root``); InvalidInput when ``root`` is no sysfs tree."""
    if proc is None:
        proc = os.path.join(os.path.dirname(root.rstrip("/")), "proc")
    cpu_dir = os.path.join(root, CPU_DIR)
    online_text = text(os.path.join(cpu_dir, "online"))
    if online_text is None:
        raise InvalidInput(f"{root} does not look like sysfs: no devices/system/cpu/online")
    online = cpuset.parse(online_text)
    if os.path.isdir(os.path.join(root, NODE_DIR)):
        cells, cpus, offline = _numa(root, online)
    else:  # a kernel without NUMA: one node with everything
        present = cpu_list(text(os.path.join(cpu_dir, "present"))) | frozenset(cpu_dirs(root))
        offline = {c: 0 for c in sorted(present - online)}
        cpus = [_cpu(cpu_dir, c, 0) for c in sorted(online)]
        cells = [{"id": 0, "cpus": tuple(sorted(online)),
                  "memory_kib": meminfo_kib(os.path.join(proc, "meminfo")) or 0,
                  "pages": pools(os.path.join(root, POOLS_DIR)), "distances": {}}]
    known = online | frozenset(offline) | frozenset(cpu_dirs(root)) | \
        cpu_list(text(os.path.join(cpu_dir, "present"))) | cpu_list(text(os.path.join(cpu_dir, "possible")))
    caches, l3 = _caches(cpu_dir, online, known)
    kinds = _kinds(root, online)
    for cpu in cpus:
        cpu["l3"], cpu["kind"] = l3.get(cpu["id"]), kinds.get(cpu["id"])
    return {"arch": arch or os.uname().machine, "cells": cells, "cpus": sorted(cpus, key=lambda c: c["id"]),
            "isolated": cpuset.parse(text(os.path.join(cpu_dir, "isolated"))), "vendor": vendor(proc),
            "offline": offline, "caches": caches}
