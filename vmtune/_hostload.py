"""The two Host loaders: libvirt capabilities XML and the Linux sysfs tree.

Both must give equal Hosts for the same machine (tests/test_host.py checks it), so the
conventions are shared: ``Cell.pages`` holds hugepage sizes only (never the base page),
``Cpu.siblings`` always contains the CPU itself, unknown topology is ``None`` with
``siblings == {id}``, and offline CPUs appear nowhere.
"""

from __future__ import annotations

import os
import platform
import re

from . import cpuset, units, xmlsafe, xmltext
from .errors import InvalidInput
from .host import Cell, Cpu, Host

_VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}


# -- capabilities XML -----------------------------------------------------------------------------
def _int(value: str | None, what: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise InvalidInput(f"capabilities XML: bad {what} {value!r}") from None


def _opt_int(elem, attr: str) -> int | None:
    value = elem.get(attr)
    return None if value is None else _int(value, f"cpu {attr}")


def _page_kib(elem) -> int:
    return units.to_kib(elem.get("size"), elem.get("unit"))


def _is_bare(cpu) -> bool:
    """``<cpu id='N'/>``: libvirt's form for an offline CPU (or any CPU, in old libvirt)."""
    return not any(cpu.get(a) is not None for a in ("socket_id", "die_id", "core_id", "siblings"))


def from_capabilities(xml: str | bytes) -> Host:
    root = xmlsafe.parse(xml, "capabilities XML")
    if root.tag != "capabilities":
        raise InvalidInput(f"not libvirt capabilities XML: the root element is <{root.tag}>")
    host = root.find("host")
    topology = host.find("topology") if host is not None else None
    if topology is None:
        raise InvalidInput("capabilities XML has no NUMA topology")
    cell_elems = topology.findall("cells/cell")
    if not cell_elems:
        raise InvalidInput("capabilities XML has no NUMA cells")

    # The smallest page size anywhere in <host> is the base page (4 KiB on x86, 64 KiB on
    # ppc64le); it is ordinary memory, not a hugepage pool.
    sizes = [_page_kib(p) for p in host.iter("pages") if p.get("size") is not None]
    base_page = min(sizes) if sizes else None
    # Bare <cpu id='N'/> means offline, unless every CPU is bare (libvirt before topology).
    all_bare = all(_is_bare(c) for c in topology.iter("cpu"))

    cells: dict[int, Cell] = {}
    cpus: dict[int, Cpu] = {}
    for ce in cell_elems:
        node = _int(ce.get("id"), "cell id")
        if node in cells:
            continue
        mem = ce.find("memory")
        memory_kib = units.to_kib(xmltext.text(mem), mem.get("unit")) if mem is not None else 0
        pages = {
            _page_kib(p): _int(xmltext.text(p), "pages count")
            for p in ce.findall("pages")
            if p.get("size") is not None and _page_kib(p) != base_page
        }
        distances = {
            _int(s.get("id"), "distance sibling id"): _int(s.get("value"), "distance value")
            for s in ce.findall("distances/sibling")
        }
        ids: list[int] = []
        for c in ce.findall("cpus/cpu"):
            cid = _int(c.get("id"), "cpu id")
            if cid in cpus or (_is_bare(c) and not all_bare):
                continue  # a duplicate id (keep the first) or an offline CPU
            siblings = cpuset.parse(c.get("siblings")) | {cid}
            cpus[cid] = Cpu(
                cid, node, _opt_int(c, "socket_id"), _opt_int(c, "die_id"), _opt_int(c, "core_id"), siblings
            )
            ids.append(cid)
        cells[node] = Cell(node, tuple(sorted(ids)), memory_kib, pages, distances)

    arch = (host.findtext("cpu/arch") or "").strip()
    vendor = (host.findtext("cpu/vendor") or "").strip() or None
    return Host(arch, tuple(cells[n] for n in sorted(cells)), dict(sorted(cpus.items())), frozenset(), vendor,
                _native_guests(root))


def _native_guests(root) -> frozenset[str] | None:
    """The guest arches the host runs with KVM (``<guest>`` entries with ``<domain type='kvm'>``:
    i686 on x86_64, say); None when the capabilities list no guest at all."""
    guests = root.findall("guest")
    if not guests:
        return None
    return frozenset(g.find("arch").get("name") for g in guests
                     if g.find("arch") is not None and g.find("arch").get("name")
                     and any(d.get("type") == "kvm" for d in g.findall("arch/domain")))


# -- sysfs ----------------------------------------------------------------------------------------
def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _read_int(path: str) -> int | None:
    text = _read(path)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def _meminfo_kib(text: str | None, key: str = "MemTotal:") -> int:
    """``MemTotal:  123 kB`` (proc/meminfo) or ``Node 0 MemTotal:  123 kB`` (nodeN/meminfo)."""
    for line in (text or "").splitlines():
        words = line.split()
        if key in words:
            rest = words[words.index(key) + 1 :]
            if rest and rest[0].isdigit():
                return int(rest[0])  # the kernel's "kB" is KiB
    return 0


def _hugepages(directory: str) -> dict[int, int]:
    """``hugepages-<size>kB/free_hugepages`` under ``directory``: size KiB -> free pages."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    pages = {}
    for name in names:
        m = re.fullmatch(r"hugepages-(\d+)kB", name)
        free = _read_int(os.path.join(directory, name, "free_hugepages")) if m else None
        if free is not None:
            pages[int(m.group(1))] = free
    return pages


def _vendor(cpuinfo: str | None) -> str | None:
    for line in (cpuinfo or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return _VENDORS.get(value.strip())
    return None


def _cpu(cpu_dir: str, cid: int, node: int) -> Cpu:
    topo = os.path.join(cpu_dir, f"cpu{cid}", "topology")
    siblings = cpuset.parse(_read(os.path.join(topo, "thread_siblings_list")))
    return Cpu(
        cid,
        node,
        socket=_read_int(os.path.join(topo, "physical_package_id")),
        die=_read_int(os.path.join(topo, "die_id")),
        core=_read_int(os.path.join(topo, "core_id")),
        siblings=siblings | {cid},
    )


def from_sysfs(root: str = "/sys", proc: str | None = None, arch: str | None = None) -> Host:
    if proc is None:
        proc = os.path.join(os.path.dirname(root.rstrip("/")), "proc")
    cpu_dir = os.path.join(root, "devices", "system", "cpu")
    node_dir = os.path.join(root, "devices", "system", "node")
    online_text = _read(os.path.join(cpu_dir, "online"))
    if online_text is None:
        raise InvalidInput(f"{root} does not look like sysfs: no devices/system/cpu/online")
    online = cpuset.parse(online_text)

    cells: list[Cell] = []
    cpus: dict[int, Cpu] = {}
    if not os.path.isdir(node_dir):
        # A kernel without NUMA: one node with everything.
        cpus = {c: _cpu(cpu_dir, c, 0) for c in sorted(online)}
        memory = _meminfo_kib(_read(os.path.join(proc, "meminfo")))
        pages = _hugepages(os.path.join(root, "kernel", "mm", "hugepages"))
        cells.append(Cell(0, tuple(sorted(online)), memory, pages, {}))
    else:
        node_text = _read(os.path.join(node_dir, "online"))
        if node_text is not None:
            nodes = sorted(cpuset.parse(node_text))
        else:
            nodes = sorted(int(n[4:]) for n in os.listdir(node_dir) if re.fullmatch(r"node\d+", n))
        for node in nodes:
            path = os.path.join(node_dir, f"node{node}")
            ids = sorted(cpuset.parse(_read(os.path.join(path, "cpulist"))) & online - cpus.keys())
            cpus.update((c, _cpu(cpu_dir, c, node)) for c in ids)
            memory = _meminfo_kib(_read(os.path.join(path, "meminfo")))
            row = (_read(os.path.join(path, "distance")) or "").split()
            ok = len(row) == len(nodes) and all(d.isdigit() for d in row)
            distances = dict(zip(nodes, map(int, row))) if ok else {}
            pages = _hugepages(os.path.join(path, "hugepages"))
            cells.append(Cell(node, tuple(ids), memory, pages, distances))

    return Host(
        arch=arch or platform.machine(),
        cells=tuple(cells),
        cpus=dict(sorted(cpus.items())),
        isolated=cpuset.parse(_read(os.path.join(cpu_dir, "isolated"))),
        vendor=_vendor(_read(os.path.join(proc, "cpuinfo"))),
    )
