"""The map's terminal view: each NUMA node a block, each core its sibling threads side by side.

    node 0: 16 CPUs, 64 GiB memory
      hugepages: 2M 3840 of 4096 free, 256 claimed; 1G 8 of 8 free, 0 claimed
      L3 0: 16 MiB, CPUs 0-3,16-19
        [ 0 host       16 host     ] [ 1 web:v0     17 free     ] ...
      0000:3b:00.0 hostdev -> db
      0000:3c:00.0 pci (vfio-pci): free

A CPU's cell is its id, a mark (``!`` an overlap or a float that ``vmtune plan`` reports, else ``*``
isolated now, else a space), on a live map while the hook holds CPUs a second mark for the power a
held CPU runs at now (``^`` the performance governor, ``v`` another, ``?`` no cpufreq), and its
label (``HostMap.label``); an efficiency core is in ``( )``
instead of ``[ ]``. On a host with L3 domains a node's cores are grouped by L3, each group under
its line and indented; without, they follow the node's lines. Then the PCI devices and mdevs that
domains pass through and that hang off the node, a line each with the domain that holds it, and
the passthrough-capable PCI devices that no domain holds, free (devices.py); the ones on no node or
that the host does not know follow the nodes. Cores are packed into lines of at
most ``width`` columns (80): every host of up to 64 CPUs fits, a core whose threads do not fit on
one line (SMT8) is split over several. With ``color``, a domain's CPUs take its colour, reserved,
free and offline ones are dim, marks are bold; the text is the same.
"""

from __future__ import annotations

import textwrap

from .. import cpuset
from ..xml import units
from ..oneline import escape
from .build import HostMap, MapCpu, MapL3, MapNode, Role, Thread
from .devices import MapDevice
from .names import columns

WIDTH = 80
PALETTE = (32, 34, 35, 36, 33, 31, 92, 94, 95, 96, 93, 91)  # ANSI foreground colours, one per domain
DIM, BOLD, RESET = "\x1b[2m", "\x1b[1m", "\x1b[0m"
LEGEND = ("NAME:vN vCPU N of a domain, NAME:emu its emulator, NAME:ioN its iothread N, NAME several of "
          "its threads, on CPUs it does not hold; host: reserved for the host, emulators and iothreads; "
          "shared: threads of domains that do not hold it; sibling: the idle thread of a core a domain "
          "holds; free: nothing pinned; off: offline; * isolated now; ! an overlap or a float (vmtune "
          "plan); # both")
HYBRID_LEGEND = "; ( ): an efficiency core"
# live, while the hook holds CPUs: a second mark after the first on each CPU, what it runs at now
POWER_LEGEND = "; after it, a held CPU's power now: ^ the performance governor, v another, ? no cpufreq"


def power_mark(cpu: dict | None) -> str:
    """A held CPU's power mark (``hook.power``'s entry): ``^`` performance, ``v`` another governor,
    ``?`` no cpufreq; a space for a CPU the hook does not hold."""
    if cpu is None:
        return " "
    governor = cpu.get("governor")
    return "?" if not governor else "^" if governor == "performance" else "v"


def held_power(hostmap: HostMap) -> dict[int, dict] | None:
    """Each CPU the hook holds -> its power now (``hook.power``'s entry); None: no power to show
    (not a live map, or the hook holds nothing)."""
    held = hostmap.hook.power if hostmap.hook is not None else ()
    return {p["cpu"]: p for p in held} if held else None


def marks(cpu: MapCpu, power: dict[int, dict] | None) -> str:
    """``mark``, then the power mark where there is power to show (``held_power``)."""
    return mark(cpu) + ("" if power is None else power_mark(power.get(cpu.id)))


NODEDEV_HINT = "give their `virsh nodedev-dumpxml` with --nodedev"


def mark(cpu: MapCpu) -> str:
    """``!`` an overlap or a float, ``*`` isolated now, ``#`` both, else a space."""
    if cpu.problems:
        return "#" if cpu.isolated else "!"
    return "*" if cpu.isolated else " "


class _Cells:
    """How wide a cell is, and how one is drawn."""

    def __init__(self, hostmap: HostMap, color: bool):
        cpus = hostmap.cpus
        self.map, self.color = hostmap, color
        self.id_width = max((len(str(c.id)) for c in cpus), default=1)
        self.label_width = max([4] + [len(hostmap.label(c)) for c in cpus])
        self.power = held_power(hostmap)  # None: no power column
        self.width = self.id_width + 1 + (1 if self.power is not None else 0) + self.label_width

    def marks(self, cpu: MapCpu) -> str:
        return marks(cpu, self.power)

    def draw(self, cpu: MapCpu) -> str:
        label = self.map.label(cpu)
        text = f"{cpu.id:>{self.id_width}}{self.marks(cpu)}{label:<{self.label_width}}"
        if not self.color:
            return text
        owner = self.map.owner(cpu)
        if owner is not None:
            style = f"\x1b[{PALETTE[owner % len(PALETTE)]}m"
        else:
            style = "" if cpu.role in (Role.SHARED, Role.ISOLATED, Role.SIBLING) else DIM
        marks = self.marks(cpu)
        head = f"{cpu.id:>{self.id_width}}" + (f"{BOLD}{marks}{RESET}{style}" if marks.strip() else marks)
        return f"{style}{head}{label:<{self.label_width}}{RESET}"


class _Blocks:
    """How a node's cores are drawn: each core as its lines, ``[ a b ]`` (an efficiency core
    ``( a b )``), split where its threads do not fit in ``width``; every block of the node as wide
    (on screen: escape sequences take none)."""

    def __init__(self, node: MapNode, cells: _Cells, width: int):
        self.cells, self.per_line = cells, max(1, (width - 4 + 1) // (cells.width + 1))
        shown = min(max(len(core) for core in node.cores), self.per_line)
        self.inner = shown * cells.width + shown - 1
        self.width = self.inner + 2

    def draw(self, core: tuple[MapCpu, ...]) -> list[str]:
        left, right = "()" if core[0].efficient else "[]"
        rows = [core[i:i + self.per_line] for i in range(0, len(core), self.per_line)]
        return [f"{left}{' '.join(self.cells.draw(c) for c in row)}"
                f"{' ' * (self.inner - len(row) * (self.cells.width + 1) + 1)}{right}" for row in rows]


def _pack(blocks: list[list[str]], block_width: int, width: int, indent: str = "  ") -> list[str]:
    """Blocks side by side, as many as fit in ``width`` after ``indent``."""
    per_line = max(1, (width - len(indent) + 1) // (block_width + 1))
    lines = []
    for i in range(0, len(blocks), per_line):
        group = blocks[i:i + per_line]
        height = max(len(b) for b in group)
        for row in range(height):
            parts = [b[row] if row < len(b) else " " * block_width for b in group]
            lines.append((indent + " ".join(parts)).rstrip())
    return lines


def l3_heading(l3: MapL3 | None) -> str:
    """``L3 4: 32 MiB, CPUs 16-19,48-51`` (and the other nodes it spans); ``L3 unknown`` (both views)."""
    if l3 is None:
        return "L3 unknown"
    size = units.size(l3.size_kib) if l3.size_kib else "size unknown"
    also = f", also on node{'s' if len(l3.elsewhere) > 1 else ''} {cpuset.format(l3.elsewhere)}" if l3.elsewhere else ""
    return f"L3 {l3.id}: {size}, CPUs {cpuset.format(l3.cpus)}{also}"


def _cores(node: MapNode, cells: _Cells, width: int) -> list[str]:
    """The node's cores: packed after its lines; on a host with L3 domains, each L3's under its line."""
    blocks = _Blocks(node, cells, width)
    groups = node.groups()
    if len(groups) == 1 and groups[0][0] is None:
        return _pack([blocks.draw(core) for core in node.cores], blocks.width, width)
    lines = []
    for l3, cores in groups:
        lines += _wrap("  " + l3_heading(l3), width, "      ")
        lines += _pack([blocks.draw(core) for core in cores], blocks.width, width, "    ")
    return lines


def device(hostmap: HostMap, dev: MapDevice) -> str:
    """``0000:3b:00.0 hostdev -> db``; a device no domain holds ``0000:0b:00.0 pci (vfio-pci): free``
    (both views)."""
    if dev.free:
        return f"{dev.key} {dev.how}{f' ({escape(dev.driver)})' if dev.driver else ''}: free"
    return f"{dev.key} {dev.how} -> {escape(hostmap.domains[dev.domain].name)}"


def loose_devices(hostmap: HostMap) -> list[str]:
    """The passthrough devices on no node, then those the host does not know, each under its line,
    unwrapped (both views)."""
    lines = []
    nowhere = [d for d in hostmap.devices if d.known]
    unknown = [d for d in hostmap.devices if not d.known]
    if nowhere:
        lines += ["devices on no node:"] + ["  " + device(hostmap, d) for d in nowhere]
    if unknown:
        lines.append("devices not on this host:" if hostmap.devices_known
                     else f"devices this host does not know ({NODEDEV_HINT}):")
        lines += ["  " + device(hostmap, d) for d in unknown]
    return lines


def pages(node: MapNode) -> str:
    """A node's hugepage pools in words (both views)."""
    if not node.pages:
        return "hugepages: none"
    return "hugepages: " + "; ".join(f"{units.page(p.size_kib)} {p.free} of {p.total} free, {p.claimed} claimed"
                                     for p in node.pages)


def _pages_lines(node: MapNode, width: int) -> list[str]:
    """The pools on one line, or one size to a line when they do not fit."""
    one = "  " + pages(node)
    if len(one) <= width or len(node.pages) < 2:
        return _wrap(one, width, "    ")
    first, *rest = pages(node).split("; ")
    return ["  " + first] + ["  " + " " * len("hugepages: ") + part for part in rest]


def memory(node: MapNode) -> str:
    """A node's memory in words (both views)."""
    if not node.memory_kib:
        return "memory unknown"
    bound = f", {units.size(node.bound_kib)} bound" if node.bound_kib else ""
    return f"{_gib(node.memory_kib)} memory{bound}"


def _gib(kib: int) -> str:
    return f"{kib / 1048576:.1f} GiB" if kib % 1048576 else f"{kib // 1048576} GiB"


def _wrap(text: str, width: int, indent: str = "  ") -> list[str]:
    """``text`` in lines of at most ``width`` terminal columns (names.columns: a wide character
    takes two), broken at spaces, a word longer than a line broken where it must be."""
    if text.isascii():
        return textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""]
    lines: list[str] = []
    line = ""
    for word in text.split():
        lead = indent if lines else ""
        joined = f"{line} {word}" if line else lead + word
        if columns(joined) <= width:
            line = joined
            continue
        if line:
            lines.append(line)
        line = (indent if lines else "") + word
        while columns(line) > width:  # a word wider than a line
            cut = len(line)
            while cut > len(indent if lines else "") + 1 and columns(line[:cut]) > width:
                cut -= 1
            lines.append(line[:cut])
            line = indent + line[cut:]
    return lines + [line] if line else lines or [""]


def _node(node: MapNode, cells: _Cells, width: int) -> list[str]:
    cpus = [c for core in node.cores for c in core]
    head = node_heading(node)
    lines = _wrap(head, width) + _pages_lines(node, width)
    lines += _cores(node, cells, width) if cpus else ["  (no CPUs)"]
    for dev in node.devices:
        lines += _wrap("  " + device(cells.map, dev), width, "      ")
    return lines


def _where(hostmap: HostMap, d) -> str:
    parts = []
    vcpus = [t for t in d.threads if t.thread == Thread.VCPU]
    if vcpus:
        cpus = frozenset().union(*(t.cpus for t in vcpus))
        ids = cpuset.format(t.id for t in vcpus)
        parts.append(f"vCPU{'s' if len(vcpus) != 1 else ''} {ids} on {cpuset.format(cpus)}")
    others = [t for t in d.threads if t.thread != Thread.VCPU]
    parts += [f"{'emulator' if t.thread == Thread.EMULATOR else f'iothread {t.id}'} on {cpuset.format(t.cpus)}"
              for t in others]
    return "; ".join(parts) or "floats on every CPU"


def _domains(hostmap: HostMap, width: int) -> list[str]:
    if not hostmap.domains:
        return ["domains: none"]
    lines = ["domains:"]
    pad = max(len(d.label) for d in hostmap.domains)
    for d in hostmap.domains:
        state = d.state if d.active else f"{d.state}, not running"
        text = f"{d.label:<{pad}}  {escape(d.name)} ({d.profile or 'untagged'}, {state}): {_where(hostmap, d)}"
        lines += _wrap(text, width - 2, " " * (pad + 2))
    return ["  " + line if i else line for i, line in enumerate(lines)]


def hook_lines(hostmap: HostMap) -> list[str]:
    """What the hook holds, unwrapped (both views): its leases, the CPUs it isolates, what it moved."""
    hook = hostmap.hook
    if hook is None:
        return []
    if hook.problem:
        return [f"hook: its state cannot be read: {hook.problem}"]
    leases = ", ".join(f"{escape(x.name)} ({x.profile or '?'}, CPUs {cpuset.format(x.cpus) or '-'}"
                       f"{', stale: the next reap gives them back' if x.stale else ''})" for x in hook.leases)
    line = f"hook: {_count(len(hook.leases), 'lease')}{': ' + leases if leases else ''}"
    if hook.isolated:
        moved = ", ".join(f"{n} {kind}" for kind, n in sorted(hook.moved.items()))
        line += f"; isolated now: CPUs {cpuset.format(hook.isolated)}" + (f" ({moved} moved off)" if moved else "")
    alike: dict[tuple[str, str], list[int]] = {}  # the held CPUs that run alike, by lease
    for cpu in hook.power:
        alike.setdefault((cpu["lease"], cpu["text"]), []).append(cpu["cpu"])
    power = [f"CPU{'s' if len(cpus) > 1 else ''} {cpuset.format(cpus)} ({escape(lease)}): {text}"
             for (lease, text), cpus in alike.items()]
    return [line] + ([f"hook power: {'; '.join(power)}"] if power else [])


def notes(hostmap: HostMap) -> list[str]:
    """The hook's line, the problems and the warnings, a line each, unwrapped (both views)."""
    return (hook_lines(hostmap) + [f"problem: {escape(p.message)}" for p in hostmap.problems]
            + [f"warning: {escape(w)}" for w in hostmap.warnings])


def node_heading(node: MapNode) -> str:
    """``node 1: 16 CPUs (1 offline), 64 GiB memory`` (both views)."""
    cpus = [c for core in node.cores for c in core]
    off = sum(1 for c in cpus if c.role == Role.OFFLINE)
    return f"node {node.id}: {_count(len(cpus) - off, 'CPU')}{f' ({off} offline)' if off else ''}, {memory(node)}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def heading(hostmap: HostMap) -> str:
    """The map's first line (both views)."""
    cpus = hostmap.cpus
    online = [c for c in cpus if c.role != Role.OFFLINE]
    cores = sum(1 for n in hostmap.nodes for core in n.cores if core[0].role != Role.OFFLINE)
    off = len(cpus) - len(online)
    return (f"vmtune map ({hostmap.mode}): {hostmap.arch or 'unknown arch'}, {_count(len(hostmap.nodes), 'node')}, "
            f"{_count(len(online), 'CPU')} in {_count(cores, 'core')}{f' ({off} offline)' if off else ''}, "
            f"{_count(len(hostmap.domains), 'domain')}")


def render(hostmap: HostMap, color: bool = False, width: int = WIDTH) -> list[str]:
    """The terminal view's lines (no line longer than ``width`` on hosts of up to 64 CPUs)."""
    lines = _wrap(heading(hostmap), width)
    cells = _Cells(hostmap, color)
    for node in hostmap.nodes:
        lines += _node(node, cells, width)
    if hostmap.unbound_pages:
        lines += _wrap("hugepages on any node: " + ", ".join(
            f"{units.page(s)} {n} claimed" for s, n in sorted(hostmap.unbound_pages.items())), width)
    for line in loose_devices(hostmap):
        lines += _wrap(line, width, "      " if line.startswith(" ") else "  ")
    lines += _domains(hostmap, width)
    for line in notes(hostmap):
        lines += _wrap(line, width)
    lines += _wrap("legend: " + LEGEND + (HYBRID_LEGEND if hostmap.hybrid else "")
                   + (POWER_LEGEND if cells.power is not None else ""), width, "        ")
    return lines
