"""Test helpers: render a Host as a sysfs tree or as libvirt capabilities XML, and generate Hosts.

``write_sysfs(host, dir)`` and ``caps_xml(host)`` are inverses of ``Host.from_sysfs`` and
``Host.from_capabilities``. A Host only knows its online CPUs, so offline CPUs are passed
separately as ``offline={cpu id: node id}``; ``machines()`` draws such pairs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from xml.sax.saxutils import escape

from hypothesis import strategies as st

from vmtune import cpuset
from vmtune.host import Cell, Cpu, Host
from vmtune.host.topology import EFFICIENCY, L3, PERFORMANCE

CPUINFO_VENDOR = {"Intel": "GenuineIntel", "AMD": "AuthenticAMD"}
BASE_PAGE_KIB = {"ppc64le": 64, "ppc64": 64}  # otherwise 4 KiB
HUGEPAGE_SIZES = {
    "x86_64": (2048, 1048576),
    "aarch64": (64, 2048, 32768, 1048576),
    "ppc64le": (16384, 16777216),
}


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def _node_cpus(host: Host, offline: Mapping[int, int]) -> dict[int, list[int]]:
    """Every CPU the kernel knows per node, online and offline, ascending."""
    out = {c.id: list(c.cpus) for c in host.cells}
    for cpu, node in offline.items():
        out[node].append(cpu)
    return {n: sorted(ids) for n, ids in out.items()}


def write_sysfs(
    host: Host, root_dir: str, offline: Mapping[int, int] | None = None, numa: bool = True,
    kinds_by: str = "pmu",
) -> str:
    """Write ``root_dir/sys`` (devices/system/{cpu,node}) and ``root_dir/proc`` for ``host``.

    Returns the sys root for ``Host.from_sysfs``. ``numa=False`` leaves out devices/system/node,
    like a kernel without NUMA (then the host must have a single cell). Each CPU's caches are
    written as the kernel lays them out (``cache/index0..3``, L3 in index3, shared by its L3's
    online CPUs); a hybrid host's core kinds as Intel's PMUs (``kinds_by="pmu"``:
    ``devices/cpu_core/cpus``, ``devices/cpu_atom/cpus``) or as ``cpuN/cpu_capacity``.
    """
    offline = dict(offline or {})
    sys_root = os.path.join(root_dir, "sys")
    cpu_dir = os.path.join(sys_root, "devices", "system", "cpu")
    node_dir = os.path.join(sys_root, "devices", "system", "node")
    every = sorted(set(host.cpus) | set(offline))

    _write(os.path.join(cpu_dir, "online"), cpuset.format(host.cpus) + "\n")
    _write(os.path.join(cpu_dir, "offline"), cpuset.format(offline) + "\n")
    _write(os.path.join(cpu_dir, "present"), cpuset.format(every) + "\n")
    _write(os.path.join(cpu_dir, "possible"), cpuset.format(every) + "\n")
    _write(os.path.join(cpu_dir, "isolated"), cpuset.format(host.isolated) + "\n")
    for cid in every:
        _write(os.path.join(cpu_dir, f"cpu{cid}", "online"), "0\n" if cid in offline else "1\n")
    for cpu in host.cpus.values():  # the kernel removes topology/ while a CPU is offline
        topo = os.path.join(cpu_dir, f"cpu{cpu.id}", "topology")
        for name, value in (("physical_package_id", cpu.socket), ("die_id", cpu.die), ("core_id", cpu.core)):
            if value is not None:
                _write(os.path.join(topo, name), f"{value}\n")
        _write(os.path.join(topo, "thread_siblings_list"), cpuset.format(cpu.siblings or {cpu.id}) + "\n")
        _write_caches(host, cpu, os.path.join(cpu_dir, f"cpu{cpu.id}", "cache"))
        if host.hybrid and kinds_by == "capacity":
            _write(os.path.join(cpu_dir, f"cpu{cpu.id}", "cpu_capacity"),
                   "1024\n" if cpu.kind != EFFICIENCY else "512\n")
    if host.hybrid and kinds_by == "pmu":
        for pmu, kind in (("cpu_core", PERFORMANCE), ("cpu_atom", EFFICIENCY)):
            cpus = [c.id for c in host.cpus.values() if (c.kind == EFFICIENCY) == (kind == EFFICIENCY)]
            _write(os.path.join(sys_root, "devices", pmu, "cpus"), cpuset.format(cpus) + "\n")

    if numa:
        node_ids = [c.id for c in host.cells]
        node_cpus = _node_cpus(host, offline)
        _write(os.path.join(node_dir, "online"), cpuset.format(node_ids) + "\n")
        _write(os.path.join(node_dir, "possible"), cpuset.format(node_ids) + "\n")
        for cell in host.cells:
            path = os.path.join(node_dir, f"node{cell.id}")
            _write(os.path.join(path, "cpulist"), cpuset.format(node_cpus[cell.id]) + "\n")
            meminfo = (
                f"Node {cell.id} MemTotal:  {cell.memory_kib:>12} kB\n"
                f"Node {cell.id} MemFree:   {cell.memory_kib // 2:>12} kB\n"
            )
            _write(os.path.join(path, "meminfo"), meminfo)
            if cell.distances:
                row = " ".join(str(cell.distances[n]) for n in node_ids)
                _write(os.path.join(path, "distance"), row + "\n")
            for size, free in cell.pages.items():
                hp = os.path.join(path, "hugepages", f"hugepages-{size}kB")
                _write(os.path.join(hp, "free_hugepages"), f"{free}\n")
                _write(os.path.join(hp, "nr_hugepages"), f"{free}\n")
    else:
        (cell,) = host.cells
        for size, free in cell.pages.items():
            hp = os.path.join(sys_root, "kernel", "mm", "hugepages", f"hugepages-{size}kB")
            _write(os.path.join(hp, "free_hugepages"), f"{free}\n")

    proc = os.path.join(root_dir, "proc")
    total = sum(c.memory_kib for c in host.cells)
    _write(os.path.join(proc, "meminfo"), f"MemTotal:       {total} kB\nMemFree:        {total // 2} kB\n")
    vendor = f"vendor_id\t: {CPUINFO_VENDOR[host.vendor]}\n" if host.vendor in CPUINFO_VENDOR else ""
    _write(os.path.join(proc, "cpuinfo"), "".join(f"processor\t: {c}\n{vendor}\n" for c in sorted(host.cpus)))
    return sys_root


def _write_caches(host: Host, cpu: Cpu, cache_dir: str) -> None:
    """``cpuN/cache/index0..3``: L1d, L1i and L2 of its core, and its L3 when it has one."""
    core = cpuset.format(host.core_of(cpu.id)) + "\n"
    for index, (level, kind, size) in enumerate(((1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1280K"))):
        base = os.path.join(cache_dir, f"index{index}")
        for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", core.strip())):
            _write(os.path.join(base, name), f"{value}\n")
    if cpu.l3 is None:
        return
    l3 = host.cache(cpu.l3)
    base = os.path.join(cache_dir, "index3")
    for name, value in (("level", 3), ("type", "Unified"), ("id", l3.id), ("size", f"{l3.size_kib}K"),
                        ("shared_cpu_list", cpuset.format(l3.cpus)), ("shared_cpu_map", "ff")):
        _write(os.path.join(base, name), f"{value}\n")


def caps_view(host: Host) -> Host:
    """What capabilities can know of ``host``: no core kinds (and no isolcpus)."""
    from dataclasses import replace

    cpus = {c.id: replace(c, kind=None) for c in host.cpus.values()}
    return replace(host, cpus=cpus, isolated=frozenset())


def caps_xml(host: Host, offline: Mapping[int, int] | None = None, base_page_kib: int | None = None) -> str:
    """``virsh capabilities`` for ``host``, in libvirt's layout (offline CPUs as ``<cpu id='N'/>``)."""
    offline = dict(offline or {})
    base = base_page_kib or BASE_PAGE_KIB.get(host.arch, 4)
    sizes = sorted({base} | {s for c in host.cells for s in c.pages})
    out = ["<capabilities>", "", "  <host>", "    <cpu>", f"      <arch>{escape(host.arch)}</arch>"]
    if host.vendor:
        out.append(f"      <vendor>{escape(host.vendor)}</vendor>")
    out += [f"      <pages unit='KiB' size='{s}'/>" for s in sizes]
    out += ["    </cpu>", "    <power_management/>", "    <topology>"]
    out.append(f"      <cells num='{len(host.cells)}'>")
    node_cpus = _node_cpus(host, offline)
    for cell in host.cells:
        out.append(f"        <cell id='{cell.id}'>")
        if cell.memory_kib:
            out.append(f"          <memory unit='KiB'>{cell.memory_kib}</memory>")
        out.append(f"          <pages unit='KiB' size='{base}'>{cell.memory_kib // base // 2}</pages>")
        out += [f"          <pages unit='KiB' size='{s}'>{n}</pages>" for s, n in sorted(cell.pages.items())]
        if cell.distances:
            out.append("          <distances>")
            out += [f"            <sibling id='{n}' value='{d}'/>" for n, d in sorted(cell.distances.items())]
            out.append("          </distances>")
        ids = node_cpus[cell.id]
        if not ids:
            out.append("          <cpus num='0'/>")
        else:
            out.append(f"          <cpus num='{len(ids)}'>")
            out += [f"            <cpu id='{cid}'{_cpu_attrs(host.cpus.get(cid))}/>" for cid in ids]
            out.append("          </cpus>")
        out.append("        </cell>")
    out += ["      </cells>", "    </topology>"]
    if host.caches:
        out.append("    <cache>")
        for core in sorted({min(host.core_of(c)) for c in host.cpus}):  # L2 banks first, as libvirt lists them
            out.append(f"      <bank id='{core}' level='2' type='both' size='1280' unit='KiB' "
                       f"cpus='{cpuset.format(host.core_of(core))}'/>")
        for l3 in host.caches:
            size = f"size='{l3.size_kib // 1024}' unit='MiB'" if l3.size_kib % 1024 == 0 else f"size='{l3.size_kib}' unit='KiB'"
            out.append(f"      <bank id='{l3.id}' level='3' type='both' {size} cpus='{cpuset.format(l3.cpus)}'>")
            out.append("        <control granularity='1' unit='MiB' type='both' maxAllocs='16'/>")
            out.append("      </bank>")
        out.append("    </cache>")
    out += ["  </host>", "", "</capabilities>", ""]
    return "\n".join(out)


def _cpu_attrs(cpu: Cpu | None) -> str:
    """Topology attributes; none for an offline CPU or a CPU whose topology is unknown."""
    if cpu is None:
        return ""
    if cpu.socket is None and cpu.die is None and cpu.core is None and cpu.siblings <= {cpu.id}:
        return ""
    attrs = [("socket_id", cpu.socket), ("die_id", cpu.die), ("core_id", cpu.core)]
    text = "".join(f" {name}='{value}'" for name, value in attrs if value is not None)
    return text + f" siblings='{cpuset.format(cpu.siblings | {cpu.id})}'"


# -- hypothesis strategies --------------------------------------------------------------------------
@st.composite
def machines(
    draw,
    max_nodes: int = 4,
    sparse_ids: bool = True,
    smt: bool | None = None,
    offline: bool = True,
    memory_only: bool = True,
    memoryless: bool = True,
    unknown_topology: bool = True,
    isolated: bool = True,
    hugepages: bool = True,
    arches: tuple[str, ...] = ("x86_64", "aarch64", "ppc64le"),
    caches: bool = True,
    hybrid: bool = False,
    max_cores: int = 3,
    uneven_l3: bool = False,
) -> tuple[Host, dict[int, int]]:
    """A ``(host, offline)`` pair: a Host and its offline CPUs (``{cpu id: node id}``).

    Narrow with the arguments: ``smt`` True/False forces threads per core (None: either),
    ``memory_only`` allows nodes with memory but no CPUs, ``memoryless`` nodes with CPUs but no
    memory, ``unknown_topology`` hosts whose CPUs have no socket/core (then nothing is offline),
    ``uneven_l3`` L3 domains of different sizes (as AMD's X3D parts have: one CCD with 3D V-cache).
    """
    arch = draw(st.sampled_from(arches))
    n_nodes = draw(st.integers(1, max_nodes))
    if sparse_ids:
        node_ids = sorted(draw(st.sets(st.integers(0, 2 * max_nodes), min_size=n_nodes, max_size=n_nodes)))
    else:
        node_ids = list(range(n_nodes))

    # Which nodes have CPUs: at least one does.
    has_cpus = [True] * n_nodes
    if memory_only and n_nodes > 1:
        has_cpus = draw(st.lists(st.booleans(), min_size=n_nodes, max_size=n_nodes).filter(any))
    threads = draw(st.sampled_from([2, 4] if smt else [1] if smt is False else [1, 2, 4]))
    cores = [draw(st.integers(1, max_cores)) if h else 0 for h in has_cpus]
    nodes_per_socket = draw(st.sampled_from([1, 2]))
    die_known = draw(st.booleans())
    known = smt or not (unknown_topology and draw(st.booleans()))  # smt needs known siblings
    split = draw(st.booleans())  # thread t of core k is CPU k + t*ncores (Intel) or k*threads + t

    # Lay out every core: (node, socket, core id) in node order; CPU ids follow the chosen scheme.
    core_list = []
    for i, (node, n) in enumerate(zip(node_ids, cores)):
        socket = i // nodes_per_socket
        core_list += [(node, socket, 10 * (i % nodes_per_socket) + k) for k in range(n)]
    ncores = len(core_list)
    threads_of = [
        [k + t * ncores if split else k * threads + t for t in range(threads)] for k in range(ncores)
    ]
    # Hybrid: the last cores of each node are efficiency cores, with one thread each.
    small: set[int] = set()
    if hybrid and draw(st.booleans()):
        for node in node_ids:
            ks = [k for k, c in enumerate(core_list) if c[0] == node]
            if len(ks) > 1:
                small.update(ks[len(ks) - draw(st.integers(1, len(ks) - 1)):])
        threads_of = [ts[:1] if k in small else ts for k, ts in enumerate(threads_of)]

    # Any CPU may be offline except the first core of each node, so nodes keep their CPUs
    # (and an SMT host its SMT).
    first_cores = {node: ts for (node, _, _), ts in reversed(list(zip(core_list, threads_of)))}
    keep = {c for ts in first_cores.values() for c in ts}
    candidates = sorted(c for ts in threads_of for c in ts if c not in keep)
    off: set[int] = set()
    if offline and known and candidates:
        off = draw(st.sets(st.sampled_from(candidates)))

    # L3 domains: an id per core (or none), unique over the host.
    layout = draw(st.sampled_from(["none", "socket", "contiguous", "interleaved"])) if caches and known else "none"
    per = draw(st.integers(1, 3))
    l3_of: dict[int, int] = {}
    if layout != "none":
        for k, (node, socket, _) in enumerate(core_list):
            index = [j for j, c in enumerate(core_list) if c[0] == node].index(k)
            if layout == "socket":
                l3_of[k] = socket
            elif layout == "contiguous":
                l3_of[k] = 100 * node_ids.index(node) + index // per
            else:
                l3_of[k] = 100 * node_ids.index(node) + index % per
    sizes_mib = draw(st.sampled_from([8, 16, 32]))

    cpus: dict[int, Cpu] = {}
    for k, ((node, socket, core), ts) in enumerate(zip(core_list, threads_of)):
        kind = (EFFICIENCY if k in small else PERFORMANCE) if small else None
        for t in ts:
            if t in off:
                continue
            if known:
                online_threads = frozenset(x for x in ts if x not in off)
                cpus[t] = Cpu(t, node, socket, 0 if die_known else None, core, online_threads, l3_of.get(k), kind)
            else:
                cpus[t] = Cpu(t, node, None, None, None, frozenset({t}), None, kind)
    node_of = {t: node for (node, _, _), ts in zip(core_list, threads_of) for t in ts}

    sizes = draw(st.sets(st.sampled_from(HUGEPAGE_SIZES[arch]))) if hugepages else set()
    with_distances = draw(st.booleans())
    far = draw(st.integers(11, 40))
    cells = []
    for i, node in enumerate(node_ids):
        no_memory = memoryless and has_cpus[i] and draw(st.booleans())
        memory = 0 if no_memory else 1024 * draw(st.integers(1, 1 << 20))
        pages = {s: draw(st.integers(0, 5000)) for s in sorted(sizes)}
        distances = {n: 10 if n == node else far for n in node_ids} if with_distances else {}
        ids = tuple(sorted(c for c in cpus if cpus[c].node == node))
        cells.append(Cell(node, ids, memory, pages, distances))

    iso = frozenset(draw(st.sets(st.sampled_from(sorted(cpus))))) if isolated else frozenset()
    vendor = draw(st.sampled_from(["Intel", "AMD", None]))
    if len({c.kind for c in cpus.values()}) < 2:  # both kinds online, or the host has one kind
        cpus = {i: Cpu(c.id, c.node, c.socket, c.die, c.core, c.siblings, c.l3) for i, c in cpus.items()}
    l3s: dict[int, set[int]] = {}
    for c in cpus.values():
        if c.l3 is not None:
            l3s.setdefault(c.l3, set()).add(c.id)
    size_of = {i: draw(st.sampled_from([8, 16, 32, 96])) if uneven_l3 else sizes_mib for i in sorted(l3s)}
    found = tuple(L3(i, frozenset(ids), size_of[i] * 1024) for i, ids in sorted(l3s.items()))
    host = Host(arch, tuple(cells), cpus, iso, vendor, caches=found)
    return host, {c: node_of[c] for c in sorted(off)}


def hosts(**kwargs) -> st.SearchStrategy[Host]:
    """Hosts only (see ``machines`` for the arguments); offline CPUs are then just id gaps."""
    return machines(**kwargs).map(lambda m: m[0])


def x3d(pages: int = 0) -> Host:
    """A Ryzen 9 7950X3D as sysfs shows it: one node, 16 cores of two threads (CPU n and n+16 are
    siblings), CCD 0 (cores 0-7) with the 96 MiB 3D V-cache L3, CCD 1 with 32 MiB."""
    cpus = {}
    for core in range(16):
        siblings = frozenset({core, core + 16})
        for t in siblings:
            cpus[t] = Cpu(t, 0, 0, 0, core, siblings, 0 if core < 8 else 1)
    caches = (L3(0, frozenset(c for c in cpus if cpus[c].l3 == 0), 96 * 1024),
              L3(1, frozenset(c for c in cpus if cpus[c].l3 == 1), 32 * 1024))
    cell = Cell(0, tuple(sorted(cpus)), 64 * 1024 * 1024, {2048: pages, 1048576: 0}, {0: 10})
    return Host("x86_64", (cell,), cpus, frozenset(), "AMD", caches=caches)
