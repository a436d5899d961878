"""The map as one standalone SVG document, built with lxml.

Each NUMA node is a box, each core a box of its threads side by side (at most ``THREADS_PER_ROW``
to a row), each CPU a square filled with its domain's colour, or the role's: reserved is grey and
hatched, shared yellow, a dedicated core's idle sibling grey-blue, free white, offline crossed
out. An isolated CPU has a thick dashed blue border, a CPU with an overlap or a float a red one and a ``!``. Every CPU has a ``<title>`` (a
tooltip in a browser) naming what holds it and every thread pinned there, its L3 domain and kind.
On a host with L3 domains a node's cores are grouped in a blue box per L3 domain (its ``<title>``:
its id, size and CPUs; ``id="nodeN-l3-ID"``), cores of no known L3 in a dashed one; an efficiency
core's box is tan. Under the cores, the passthrough devices that hang off the node (held by a
domain, or free), a line each;
after the nodes, those on no node or that the host does not know. No script, no external
reference (the patterns are in ``<defs>``), generic font families only.
"""

from __future__ import annotations

from lxml import etree

from . import text
from .build import HostMap, MapCpu, MapL3, MapNode, Role
from .names import columns

NS = "http://www.w3.org/2000/svg"
COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948",
           "#e15759", "#9c755f", "#ff9da7", "#86bcb6", "#8cd17d", "#d37295")
ROLE_FILL = {Role.RESERVED: "url(#reserved)", Role.SHARED: "#fff2b3", Role.FREE: "#ffffff", Role.SIBLING: "#d5dde8",
             Role.ISOLATED: "#e6eefc", Role.OFFLINE: "url(#offline)"}
CPU_W, CPU_H, GAP, PAD, MARGIN = 92, 46, 4, 6, 16
THREADS_PER_ROW = 4
CORES_PER_ROW = 8
HEAD_H = 40
L3_HEAD = 22  # an L3 box's line above its cores
LINE_H = 18  # a line of text under the cores, or after the nodes
CORE_FILL, EFFICIENCY_FILL = "#e4e4e4", "#f2e2c4"
L3_FILL, L3_STROKE = "#f4f8fc", "#6b8fb5"
FONT = "sans-serif"
MONO = "monospace"


def _el(parent, tag: str, text_: str | None = None, **attrs) -> etree._Element:
    el = etree.SubElement(parent, f"{{{NS}}}{tag}", {k.rstrip("_").replace("_", "-"): str(v) for k, v in attrs.items()})
    if text_ is not None:
        el.text = text_
    return el


def _defs(svg) -> None:
    defs = _el(svg, "defs")
    hatch = _el(defs, "pattern", id="reserved", width=8, height=8, patternUnits="userSpaceOnUse")
    _el(hatch, "rect", width=8, height=8, fill="#d9d9d9")
    _el(hatch, "path", d="M0,8 L8,0", stroke="#a6a6a6", stroke_width=2)
    cross = _el(defs, "pattern", id="offline", width=10, height=10, patternUnits="userSpaceOnUse")
    _el(cross, "rect", width=10, height=10, fill="#eeeeee")
    _el(cross, "path", d="M0,0 L10,10 M10,0 L0,10", stroke="#bbbbbb", stroke_width=1)


def fill(hostmap: HostMap, cpu: MapCpu) -> str:
    owner = hostmap.owner(cpu)
    if owner is None:
        return ROLE_FILL.get(cpu.role, "#ffffff")
    colour = COLOURS[owner % len(COLOURS)]
    return colour if cpu.role == Role.DEDICATED else _pale(colour)


def _pale(colour: str) -> str:
    """``colour`` mixed with two parts of white: a domain's threads on CPUs it does not hold."""
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{(c + 2 * 255) // 3:02x}" for c in rgb)


def title(hostmap: HostMap, cpu: MapCpu, power: dict | None = None) -> str:
    """The tooltip: the CPU, its role and holder, every thread pinned there, what a held CPU runs at
    (``power``: its entry of ``text.held_power``)."""
    head = f"CPU {cpu.id}: {cpu.role.value}"
    if cpu.holder is not None:
        dom = hostmap.domains[cpu.holder.domain]
        head += f", {hostmap.describe(cpu.holder)} ({dom.profile or 'untagged'}, {dom.state})"
    if cpu.isolated:
        head += ", isolated now"
    others = [hostmap.describe(p) for p in cpu.pins if p != cpu.holder]
    if others:
        head += "; pinned here: " + ", ".join(others)
    if cpu.problems:
        head += "; problems: " + ", ".join(cpu.problems) + " (vmtune plan)"
    if cpu.l3 is not None:
        head += f"; L3 {cpu.l3}"
    if cpu.efficient:
        head += "; an efficiency core"
    if power is not None:
        head += f"; runs at {power.get('text') or power.get('governor') or 'no cpufreq'} (the hook's lease {power['lease']})"
    return head


def _cpu(parent, hostmap: HostMap, cpu: MapCpu, x: int, y: int) -> None:
    g = _el(parent, "g", class_=f"cpu {cpu.role.value}", id=f"cpu{cpu.id}")
    power = text.held_power(hostmap)
    _el(g, "title", title(hostmap, cpu, None if power is None else power.get(cpu.id)))
    stroke, dash, width = "#555555", None, 1
    if cpu.problems:  # red; dashed when it is isolated too
        stroke, dash, width = "#d62728", "5,3" if cpu.isolated else None, 3
    elif cpu.isolated:
        stroke, dash, width = "#1f5fbf", "5,3", 3
    rect = _el(g, "rect", x=x, y=y, width=CPU_W, height=CPU_H, rx=4, fill=fill(hostmap, cpu),
               stroke=stroke, stroke_width=width)
    if dash:
        rect.set("stroke-dasharray", dash)
    dark = cpu.role == Role.DEDICATED
    ink = "#ffffff" if dark else "#222222"
    mark = text.marks(cpu, power).strip()
    _el(g, "text", f"{cpu.id}{mark}", x=x + 5, y=y + 14, font_family=FONT, font_size=11, fill=ink,
        font_weight="bold" if mark else "normal")
    _el(g, "text", hostmap.label(cpu), x=x + CPU_W / 2, y=y + 34, font_family=MONO, font_size=12, fill=ink,
        text_anchor="middle")


def _core_size(core: tuple[MapCpu, ...]) -> tuple[int, int]:
    cols = min(len(core), THREADS_PER_ROW)
    rows = -(-len(core) // THREADS_PER_ROW)
    return 2 * PAD + cols * CPU_W + (cols - 1) * GAP, 2 * PAD + rows * CPU_H + (rows - 1) * GAP


class _Grid:
    """Where a node's cores go: every core's box as wide and high as its largest, ``per_row`` to a
    row (as many as the largest L3 group, or the node, has; at most CORES_PER_ROW)."""

    def __init__(self, node: MapNode):
        self.core_w = max((_core_size(c)[0] for c in node.cores), default=0)
        self.core_h = max((_core_size(c)[1] for c in node.cores), default=0)
        self.boxed = _boxed(node)
        self.per_row = max(1, min(CORES_PER_ROW, max((len(cores) for _, cores in node.groups()), default=0)))

    def rows(self, cores) -> int:
        return -(-len(cores) // self.per_row) if cores else 0

    @property
    def width(self) -> int:
        """The cores of one row, with their padding; an L3 box's padding too."""
        inner = 2 * PAD + self.per_row * self.core_w + (self.per_row - 1) * GAP
        return inner + 2 * PAD if self.boxed else inner


def _boxed(node: MapNode) -> bool:
    """Whether the node's cores are drawn in L3 boxes: it has L3 domains."""
    return any(l3 is not None for l3, _ in node.groups())


def _cores(g, hostmap: HostMap, cores, grid: _Grid, x: int, y: int) -> int:
    """``cores`` in rows from (``x``, ``y``); the height used."""
    for i, core in enumerate(cores):
        cx = x + (i % grid.per_row) * (grid.core_w + GAP)
        cy = y + (i // grid.per_row) * (grid.core_h + GAP)
        w, h = _core_size(core)
        efficient = core[0].efficient
        rect = _el(g, "rect", x=cx, y=cy, width=w, height=h, rx=6, fill=EFFICIENCY_FILL if efficient else CORE_FILL,
                   stroke="#b5894d" if efficient else "#aaaaaa")
        if efficient:
            rect.set("class", "efficiency")
        for j, cpu in enumerate(core):
            _cpu(g, hostmap, cpu, cx + PAD + (j % THREADS_PER_ROW) * (CPU_W + GAP),
                 cy + PAD + (j // THREADS_PER_ROW) * (CPU_H + GAP))
    return grid.rows(cores) * (grid.core_h + GAP)


def _l3_box(parent, hostmap: HostMap, node: MapNode, l3: MapL3 | None, cores, grid: _Grid, y: int,
            width: int) -> int:
    """One L3 domain's box around its cores (dashed: cores of no known L3); the height used."""
    words = text.l3_heading(l3)
    g = _el(parent, "g", class_="l3") if l3 is not None else _el(parent, "g", class_="l3-unknown")
    if l3 is not None:
        g.set("id", f"node{node.id}-l3-{l3.id}")
        _el(g, "title", f"{words} (node {node.id})")
    height = L3_HEAD + grid.rows(cores) * (grid.core_h + GAP) - GAP + PAD
    x = MARGIN + PAD
    box = _el(g, "rect", x=x, y=y, width=width - 2 * PAD, height=height, rx=6, fill=L3_FILL, stroke=L3_STROKE)
    if l3 is None:
        box.set("stroke-dasharray", "5,3")
    _el(g, "text", words, x=x + 8, y=y + 15, font_family=FONT, font_size=12, fill="#2b4c70")
    _cores(g, hostmap, cores, grid, x + PAD, y + L3_HEAD)
    return height + GAP


def _node(svg, hostmap: HostMap, node: MapNode, y: int, width: int) -> int:
    """Draw ``node`` at ``y``; its height."""
    grid = _Grid(node)
    g = _el(svg, "g", class_="node", id=f"node{node.id}")
    frame = _el(g, "rect", x=MARGIN, y=y, width=width, height=0, rx=8, fill="#f7f7f7", stroke="#888888")
    _el(g, "text", text.node_heading(node), x=MARGIN + 10, y=y + 17,
        font_family=FONT, font_size=14, font_weight="bold")
    _el(g, "text", text.pages(node), x=MARGIN + 10, y=y + 33, font_family=FONT, font_size=12)
    cursor = y + HEAD_H
    for l3, cores in node.groups():
        if grid.boxed:
            cursor += _l3_box(g, hostmap, node, l3, cores, grid, cursor, width)
        else:
            cursor += _cores(g, hostmap, cores, grid, MARGIN + PAD, cursor)
    for dev in node.devices:
        _el(g, "text", text.device(hostmap, dev), x=MARGIN + 10, y=cursor + 13, font_family=MONO, font_size=12,
            class_="device")
        cursor += LINE_H
    height = cursor - y + PAD
    frame.set("height", str(height))
    return height


def _node_width(node: MapNode) -> int:
    return _Grid(node).width


def _legend_items(hostmap: HostMap) -> list[tuple[str, str, str, str | None]]:
    """(fill, label, words, border) of each swatch: the roles, L3 boxes and efficiency cores where
    the map has them, and one per domain with its label and full name."""
    items = [("url(#reserved)", "host", "reserved for the host, emulators and iothreads", None),
             (ROLE_FILL[Role.SHARED], "shared", "threads of several domains that do not hold it (of one domain: its colour, pale)", None),
             (ROLE_FILL[Role.SIBLING], "sibling", "the idle thread of a core a domain holds", None),
             (ROLE_FILL[Role.FREE], "free", "nothing pinned", None),
             (ROLE_FILL[Role.OFFLINE], "off", "offline", None),
             (ROLE_FILL[Role.ISOLATED], "*", "isolated now (dashed blue border)", "#1f5fbf"),
             ("#ffffff", "!", "an overlap or a float: vmtune plan (red border; dashed: isolated too)", "#d62728")]
    if text.held_power(hostmap) is not None:
        items.append(("#ffffff", "^ v ?", "a held CPU's power now: the performance governor, another, no cpufreq", None))
    if any(n.caches for n in hostmap.nodes):
        items.append((L3_FILL, "L3", "an L3 cache domain: the cores that share it (blue box)", L3_STROKE))
    if hostmap.hybrid:
        items.append((EFFICIENCY_FILL, "E core", "an efficiency core (tan box)", None))
    for i, d in enumerate(hostmap.domains):
        state = d.state if d.active else f"{d.state}, not running"
        items.append((COLOURS[i % len(COLOURS)], d.label, f"{d.name} ({d.profile or 'untagged'}, {state})", None))
    return items


def _legend(svg, hostmap: HostMap, y: int) -> int:
    """The legend's swatches (``_legend_items``), a line each; the height used."""
    g = _el(svg, "g", class_="legend")
    items = _legend_items(hostmap)
    for i, (colour, label, words, border) in enumerate(items):
        row_y = y + i * 22
        rect = _el(g, "rect", x=MARGIN, y=row_y, width=28, height=16, rx=3, fill=colour,
                   stroke=border or "#555555", stroke_width=3 if border else 1)
        if border == "#1f5fbf":
            rect.set("stroke-dasharray", "5,3")
        elif border == L3_STROKE:
            rect.set("stroke-width", "1")
        _el(g, "text", label, x=MARGIN + 36, y=row_y + 13, font_family=MONO, font_size=12)
        _el(g, "text", words, x=MARGIN + 110, y=row_y + 13, font_family=FONT, font_size=12)
    return len(items) * 22


def _loose_devices(svg, hostmap: HostMap, y: int) -> int:
    """The passthrough devices on no node or that the host does not know, as the terminal view
    gives them; the height used."""
    lines = text.loose_devices(hostmap)
    g = _el(svg, "g", class_="devices") if lines else svg
    for i, line in enumerate(lines):
        _el(g, "text", line.strip(), x=MARGIN + (16 if line.startswith(" ") else 0), y=y + 14 + i * LINE_H,
            font_family=MONO if line.startswith(" ") else FONT, font_size=12, fill="#222222")
    return len(lines) * LINE_H + (8 if lines else 0)


def _notes(svg, hostmap: HostMap, y: int) -> int:
    """The hook's line, the problems and the warnings, as the terminal view gives them; the height used."""
    lines = text.notes(hostmap)
    for i, line in enumerate(lines):
        _el(svg, "text", line, x=MARGIN, y=y + 14 + i * 18, font_family=FONT, font_size=12,
            fill="#b00000" if line.startswith(("problem", "warning")) else "#222222")
    return len(lines) * 18 + (8 if lines else 0)


def _text_width(hostmap: HostMap) -> int:
    """How wide the widest line of text is, about (7 px a column at 12 px, 8 in monospace): the
    heading, the legend, the notes, the L3 boxes' lines, the devices."""
    legend = [110 + 7 * columns(words) for _, _, words, _ in _legend_items(hostmap)]
    legend.append(9 * columns(text.heading(hostmap)))  # 15 px, bold
    notes = [7 * columns(line) for line in text.notes(hostmap)]
    devices = text.loose_devices(hostmap) + [text.device(hostmap, d) for n in hostmap.nodes for d in n.devices]
    heads = [4 * PAD + 8 + 7 * columns(text.l3_heading(c)) for n in hostmap.nodes for c in n.caches]
    return max(legend + notes + heads + [16 + 8 * columns(line) for line in devices] + [0])


def render(hostmap: HostMap) -> str:
    """The SVG document (UTF-8 text with its XML declaration)."""
    width = max([_node_width(n) for n in hostmap.nodes] + [560, _text_width(hostmap)])
    svg = etree.Element(f"{{{NS}}}svg", nsmap={None: NS}, version="1.1")
    head = text.heading(hostmap)
    _el(svg, "title", head)
    _defs(svg)
    y = MARGIN
    _el(svg, "text", head, x=MARGIN, y=y + 14, font_family=FONT, font_size=15, font_weight="bold")
    y += 28
    for node in hostmap.nodes:
        y += _node(svg, hostmap, node, y, width) + 12
    y += _loose_devices(svg, hostmap, y)
    y += _notes(svg, hostmap, y)
    y += _legend(svg, hostmap, y) + MARGIN
    total_w = width + 2 * MARGIN
    svg.set("width", str(total_w))
    svg.set("height", str(y))
    svg.set("viewBox", f"0 0 {total_w} {y}")
    return etree.tostring(svg, xml_declaration=True, encoding="UTF-8", pretty_print=True).decode("utf-8")
