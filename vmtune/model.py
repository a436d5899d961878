"""A small declarative layer over libvirt domain XML.

Each field is declared once, keyed by a path (``Prop("driver/@cache")``), so the passes read
``disk.cache`` and never repeat XPath strings. The views are read-only: passes describe what
they want changed as edits (vmtune/edits.py) and the driver applies them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lxml import etree

from . import cpuset, units, xmltext

NS = "https://vmtune.dev/xmlns/1"
NSMAP = {"vmtune": NS}
TAG = f"{{{NS}}}tune"
LIBOSINFO_NS = "http://libosinfo.org/xmlns/libvirt/domain/1.0"


def _int(text: str) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


class Prop:
    """A field at ``path`` below a view's node: ``"a/b/@attr"``, ``"@attr"`` or ``"a/b"`` (text)."""

    def __init__(self, path: str, conv: Callable[[str], Any] = str):
        self.path = path
        self.conv = conv
        elem, _, attr = path.rpartition("@") if "@" in path else (path, "", "")
        self.elem_path = elem.rstrip("/") or "."
        self.attr = attr or None

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def raw(self, node: etree._Element) -> str | None:
        el = node.find(self.elem_path)
        if el is None:
            return None
        return el.get(self.attr) if self.attr else xmltext.text(el).strip()

    def __get__(self, view: "View | None", owner: type) -> Any:
        if view is None:
            return self
        value = self.raw(view.node)
        return None if value is None else self.conv(value)


class View:
    """A read-only view of one element."""

    def __init__(self, node: etree._Element):
        self.node = node

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.node.getroottree().getpath(self.node)}>"


class Disk(View):
    BUS_VIRTIO = "virtio"
    REMAP_BUSES = ("ide", "sata", "scsi", "usb")
    type = Prop("@type")
    device = Prop("@device")
    bus = Prop("target/@bus")
    dev = Prop("target/@dev")
    driver_name = Prop("driver/@name")
    cache = Prop("driver/@cache")
    iothread = Prop("driver/@iothread", _int)
    boot_order = Prop("boot/@order", _int)
    address_type = Prop("address/@type")
    controller = Prop("address/@controller", _int)

    @property
    def iothread_queues(self) -> bool:
        return self.node.find("driver/iothreads") is not None

    @property
    def effective_device(self) -> str:
        return self.device or "disk"


class Interface(View):
    TUNED_TYPES = ("network", "bridge", "direct", "ethernet")
    type = Prop("@type")
    model = Prop("model/@type")
    mac = Prop("mac/@address")


class Controller(View):
    type = Prop("@type")
    index = Prop("@index", _int)


class MemoryDevice(View):
    """A ``<memory>`` device: DIMM, virtio-mem (guest RAM, hugepage-backed like the cells), or
    nvdimm, virtio-pmem (a file) and sgx-epc (EPC), which no hugepage backs."""

    RAM_MODELS = ("dimm", "virtio-mem")
    model = Prop("@model")
    target_node = Prop("target/node", _int)
    nodemask_text = Prop("source/nodemask")

    def _kib(self, path: str) -> int | None:
        el = self.node.find(path)
        return None if el is None else units.to_kib(xmltext.text(el).strip() or 0, el.get("unit"))

    @property
    def size_kib(self) -> int:
        return self._kib("target/size") or 0

    @property
    def pagesize_kib(self) -> int | None:
        """Its own page size (``<source><pagesize>``), which wins over ``<memoryBacking>``'s."""
        return self._kib("source/pagesize")

    @property
    def granule_kib(self) -> int:
        """What its page size must divide: a virtio-mem block, else the whole size (QEMU refuses a
        DIMM backend that is not a whole number of pages, and a block smaller than a page)."""
        return (self._kib("target/block") if self.model == "virtio-mem" else None) or self.size_kib


class Cell(View):
    """A guest NUMA cell. A cell may have no vCPUs (a memory-only cell): ``cpus`` is then empty."""

    def __init__(self, node: etree._Element, index: int = 0):
        super().__init__(node)
        self.index = index

    @property
    def id(self) -> int:
        """The cell's ``id``; without one, its position (libvirt numbers such cells in order)."""
        given = _int(self.node.get("id") or "")
        return given if given is not None else self.index

    @property
    def cpus(self) -> frozenset[int]:
        return cpuset.parse(self.node.get("cpus"))

    @property
    def memory_kib(self) -> int:
        return units.to_kib(self.node.get("memory"), self.node.get("unit"))


class Domain(View):
    """The root ``<domain>``."""

    type = Prop("@type")
    name = Prop("name")
    uuid = Prop("uuid")
    arch = Prop("os/type/@arch")
    vcpu_text = Prop("vcpu")
    vcpu_placement = Prop("vcpu/@placement")
    vcpu_cpuset = Prop("vcpu/@cpuset", cpuset.parse)
    cpu_mode = Prop("cpu/@mode")
    numa_mode = Prop("numatune/memory/@mode")
    numa_nodeset = Prop("numatune/memory/@nodeset", cpuset.parse)
    numa_placement = Prop("numatune/memory/@placement")
    iothreads_text = Prop("iothreads")

    # -- counts and sizes ---------------------------------------------------------------------
    @property
    def vcpus(self) -> int:
        """The maximum vCPU count (what every pin and the guest topology must cover)."""
        return _int(self.vcpu_text or "") or 1

    @property
    def iothreads(self) -> int:
        return _int(self.iothreads_text or "") or 0

    def _memory(self, tag: str) -> int:
        el = self.node.find(tag)
        return 0 if el is None else units.to_kib(xmltext.text(el).strip() or 0, el.get("unit"))

    @property
    def memory_kib(self) -> int:
        return self._memory("memory")

    @property
    def current_memory_kib(self) -> int:
        return self._memory("currentMemory")

    @property
    def has_max_memory(self) -> bool:
        return self.node.find("maxMemory") is not None

    @property
    def dimm_kib(self) -> int:
        total = 0
        for el in self.node.iterfind("devices/memory/target/size"):
            total += units.to_kib(xmltext.text(el).strip() or 0, el.get("unit"))
        return total

    @property
    def boot_memory_kib(self) -> int:
        """Memory the guest boots with: the sum of its NUMA cells, else <memory> less DIMMs."""
        cells = self.cells
        if cells:
            return sum(c.memory_kib for c in cells)
        return max(self.memory_kib - self.dimm_kib, 0)

    # -- children -----------------------------------------------------------------------------
    @property
    def cells(self) -> list[Cell]:
        return [Cell(e, i) for i, e in enumerate(self.node.iterfind("cpu/numa/cell"))]

    @property
    def disks(self) -> list[Disk]:
        return [Disk(e) for e in self.node.iterfind("devices/disk")]

    @property
    def interfaces(self) -> list[Interface]:
        return [Interface(e) for e in self.node.iterfind("devices/interface")]

    @property
    def memory_devices(self) -> list[MemoryDevice]:
        return [MemoryDevice(e) for e in self.node.iterfind("devices/memory")]

    @property
    def controllers(self) -> list[Controller]:
        return [Controller(e) for e in self.node.iterfind("devices/controller")]

    def iothread_ids(self) -> list[int]:
        ids = [_int(e.get("id")) for e in self.node.iterfind("iothreadids/iothread")]
        ids = [i for i in ids if i is not None]
        return sorted(ids) if ids else list(range(1, self.iothreads + 1))

    @property
    def every_vcpu_pinned_alone(self) -> bool:
        """Every vCPU pinned to exactly one host CPU: the rule that makes a domain's pins
        dedicated (claims), a "pinned" domain in a plan (planner), and a fully applied one (audit)."""
        pins = self.vcpupins()
        return bool(pins) and all(len(pins.get(v, ())) == 1 for v in range(self.vcpus))

    def vcpupins(self) -> dict[int, frozenset[int]]:
        out: dict[int, frozenset[int]] = {}
        for e in self.node.iterfind("cputune/vcpupin"):
            v = _int(e.get("vcpu"))
            if v is not None:
                out[v] = cpuset.parse(e.get("cpuset"))
        return out

    def find(self, path: str) -> etree._Element | None:
        return self.node.find(path)

    def iter(self, path: str) -> Iterator[etree._Element]:
        return self.node.iterfind(path)

    # -- the vmtune tag -----------------------------------------------------------------------
    @property
    def tag(self) -> etree._Element | None:
        return self.node.find(f"metadata/{TAG}")

    @property
    def tagged_profile(self) -> str | None:
        tag = self.tag
        return None if tag is None else (tag.get("profile") or None)

    @property
    def os_id(self) -> str | None:
        el = self.node.find(f"metadata/{{{LIBOSINFO_NS}}}libosinfo/{{{LIBOSINFO_NS}}}os")
        return None if el is None else el.get("id")

    @property
    def is_windows(self) -> bool:
        os_id = (self.os_id or "").lower()
        return self.node.find("features/hyperv") is not None or "microsoft.com/win" in os_id
