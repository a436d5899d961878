"""A small declarative layer over libvirt domain XML.

Each field is declared once, keyed by a path (``Prop("driver/@cache")``), with a converter
between its text and its value. Passes read a field as an attribute (``disk.cache``) and ask
the declaration for the edit that writes it (``Disk.cache.edit(disk, Disk.CACHE_NONE, why)``,
a ``Set`` of vmtune/xml/edits.py); they never spell the path. The views never change the tree: the
driver applies the edits. The values passes write are constants on the views (``Disk.BUS_VIRTIO``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from lxml import etree

from .. import cpuset
from . import elements, guestos, units, xmltext
from .edits import Set, split_path

NS = "https://vmtune.dev/xmlns/1"
NSMAP = {"vmtune": NS}
TAG = f"{{{NS}}}tune"
LIBOSINFO_NS = "http://libosinfo.org/xmlns/libvirt/domain/1.0"
KIB = "KiB"  # the unit vmtune writes sizes in


def _int(text: str) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def pins_of(vcpupins: Iterable[etree._Element]) -> dict[int, frozenset[int]]:
    """vCPU -> its host CPUs, of ``<vcpupin>`` elements (one whose ``vcpu`` is not a number names
    none): a domain's (``Domain.vcpupins``), or a ``<cputune>`` a pass is building."""
    out: dict[int, frozenset[int]] = {}
    for e in vcpupins:
        v = _int(e.get("vcpu"))
        if v is not None:
            out[v] = cpuset.parse(e.get("cpuset"))
    return out


def _digits(text: str) -> int | None:
    """Only plain decimal digits: no sign, no spaces inside, no underscores."""
    return int(text) if text.isdecimal() else None


def fill_iothread_ids(listed: list[int], count: int) -> list[int]:
    """``listed`` and the lowest ids of 1..``count`` it leaves unused, up to ``count`` ids in
    all (never fewer than listed), sorted: the iothreads libvirt gives a domain."""
    have = set(listed)
    free = (i for i in range(1, count + 1) if i not in have)
    filled = [next(free) for _ in range(max(count - len(have), 0))]
    return sorted(have.union(filled))


class Conv(NamedTuple):
    """How a field's text becomes its value (None: not a value of this kind), and back."""

    parse: Callable[[str], Any]
    format: Callable[[Any], str]


def _flag(true: str, false: str) -> Conv:
    return Conv({true: True, false: False}.get, lambda value: true if value else false)


TEXT = Conv(str, str)
INT = Conv(_int, str)
DIGITS = Conv(_digits, str)
CPUSET = Conv(cpuset.parse, cpuset.format)
YES_NO = _flag("yes", "no")
ON_OFF = _flag("on", "off")


class Prop:
    """A field at ``path`` below a view's node: ``"a/b/@attr"``, ``"@attr"`` or ``"a/b"`` (text).

    Read on a view, it is the value (``default`` when the field is missing or not of its kind);
    read on the class, it is the declaration, whose ``edit`` sets the field (None removes it).
    A text value is read and written as libvirt does (vmtune/xml/xmltext.py): comments and PIs in it
    are left out of the value and kept when it is written.
    """

    def __init__(self, path: str, conv: Conv = TEXT, default: Any = None):
        self.path = path
        self.conv = conv
        self._parse = conv.parse  # read on every __get__: one attribute, not the tuple's field
        self.default = default
        elem, self.attr = split_path(path)
        self.elem_path = elem or "."
        steps = xmltext.plain_steps(elem) if elem else None
        self._child = steps[0] if steps is not None and len(steps) == 1 else None  # one child step: no walk
        # what __get__ reads without a call to ``raw``: the node's own attribute (``"@type"``), or an
        # attribute of its first child of a tag (``"target/@bus"``); a TEXT field's text is its value
        self._own = self.attr if self.elem_path == "." else None
        self._child_attr = self.attr if self._child is not None else None
        self._child_text = self._child if self._child is not None and not self.attr else None  # ``"vcpu"``
        self._as_is = conv is TEXT
        self._format = conv.format

    def raw(self, node: etree._Element) -> str | None:
        """The field's text below ``node`` (None: no such field)."""
        if self._child is not None:
            el = next(node.iterchildren(self._child), None)
        else:
            el = node if self.elem_path == "." else xmltext.find(node, self.elem_path)
        if el is None:
            return None
        return el.get(self.attr) if self.attr else xmltext.text(el).strip()

    def __get__(self, view: "View | None", owner: type) -> Any:
        if view is None:
            return self
        if self._own is not None:
            raw = view.node.get(self._own)
        elif self._child_attr is not None:
            raw = None
            for el in view.node.iterchildren(self._child):  # ``raw``, written out: the first one
                raw = el.get(self._child_attr)
                break
        elif self._child_text is not None:
            raw = None
            for el in view.node.iterchildren(self._child_text):  # the same, of its text
                raw = xmltext.text(el).strip()
                break
        else:
            raw = self.raw(view.node)
        if raw is None:
            return self.default
        value = raw if self._as_is else self._parse(raw)
        return self.default if value is None else value

    def get(self, view: "View") -> Any:
        """The value on ``view`` (for a field that is not a class attribute: ``Keyed.at``)."""
        return self.__get__(view, type(view))

    def text(self, value: Any) -> str | None:
        """The text ``value`` is written as (None: no text, the field goes)."""
        return None if value is None else self.conv.format(value)

    def edit(self, view: "View", value: Any, reason: str) -> Set:
        """The edit that makes ``value`` the field's value on ``view``."""
        return Set(view.node, self.path, None if value is None else self._format(value), reason)  # ``text``

    def edits(self, view: "View", value: Any, reason: str) -> list[Set]:
        """``edit``, where it would change something: an attribute of the node or of its first child
        of a tag (the element ``edits.applied`` walks to) that is not already ``value`` (absent, for
        None). A field further down is always edited (``applied`` finds that nothing changed)."""
        if self.attr and (self._child is not None or self.elem_path == "."):
            if self.raw(view.node) == self.text(value):
                return []
        return [self.edit(view, value, reason)]


class Keyed:
    """Fields told apart by a name in their path: ``Keyed("clock/timer[@name='{}']/@present")``;
    ``.at("hpet")`` is the field of one of them."""

    def __init__(self, template: str, conv: Conv = TEXT):
        self.template = template
        self.conv = conv
        self._props: dict[str, Prop] = {}

    def at(self, key: str) -> Prop:
        prop = self._props.get(key)
        if prop is None:
            prop = self._props[key] = Prop(self.template.format(key), self.conv)
        return prop


def _kib(el: etree._Element) -> int:
    """A size element's value in KiB: its text in its ``unit`` (KiB without one), as libvirt reads it."""
    return units.to_kib(xmltext.text(el).strip() or 0, el.get("unit"))


class Size:
    """A memory size: an element's text in its ``unit``; read in KiB, written in KiB as two edits
    (the number and the unit)."""

    def __init__(self, path: str, default: int | None = None):
        self.path = path
        self.default = default
        steps = xmltext.plain_steps(path)
        self._child = steps[0] if steps is not None and len(steps) == 1 else None  # ``"memory"``: no find

    def __get__(self, view: "View | None", owner: type) -> Any:
        if view is None:
            return self
        if self._child is not None:
            el = next(view.node.iterchildren(self._child), None)
        else:
            el = xmltext.find(view.node, self.path)
        return self.default if el is None else _kib(el)

    def edits(self, view: "View", value_kib: int, reason: str) -> list[Set]:
        return [Set(view.node, self.path, str(value_kib), reason),
                Set(view.node, f"{self.path}/@unit", KIB, reason)]


class Child:
    """The element at a path of children below a view's element, each step declared in
    vmtune/xml/elements.py (as a child of the step before it: its tag, key, order and whether a
    pass may write it are declared there, once), or None: ``cputune = Child("cputune")``."""

    def __init__(self, *tags: str):
        self.tags = tags
        self._tag = tags[0] if len(tags) == 1 else None  # one step (most): no loop

    def __set_name__(self, owner, name: str) -> None:
        parent = owner.TAG
        for tag in self.tags:
            if not elements.declares(parent, tag):
                raise TypeError(f"{owner.__name__}.{name}: <{tag}> is not declared as a child of <{parent}> "
                                "in vmtune/xml/elements.py")
            parent = tag

    def __get__(self, view, owner=None):
        if view is None:
            return self
        if self._tag is not None:
            return next(view.node.iterchildren(self._tag), None)
        node = view.node
        for tag in self.tags:
            node = next(node.iterchildren(tag), None)
            if node is None:
                return None
        return node


class View:
    """A view of one element: its fields are the class's declarations."""

    TAG = ""  # the element's tag, where its Child fields name what is below it

    def __init__(self, node: etree._Element):
        self.node = node

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.node.getroottree().getpath(self.node)}>"


class Disk(View):
    TAG = "disk"
    TYPE_FILE = "file"
    TYPE_VHOSTUSER = "vhostuser"
    TYPE_NVME = "nvme"
    TYPE_NETWORK = "network"
    PROTOCOL_RBD = "rbd"
    DEVICE_DISK = "disk"
    BUS_VIRTIO = "virtio"
    BUS_SCSI = "scsi"
    REMAP_BUSES = ("ide", "sata", "scsi", "usb")
    ADDRESS_DRIVE = "drive"
    DRIVER_NAME_QEMU = "qemu"
    CACHE_NONE = "none"
    CACHE_DIRECTSYNC = "directsync"
    IO_NATIVE = "native"

    type = Prop("@type")
    device = Prop("@device")
    bus = Prop("target/@bus")
    dev = Prop("target/@dev")
    removable = Prop("target/@removable", ON_OFF)
    rotation_rate = Prop("target/@rotation_rate", INT)
    geometry_trans = Prop("geometry/@trans")  # CHS translation: libvirt takes it on the ide bus only
    driver_name = Prop("driver/@name")
    cache = Prop("driver/@cache")
    io = Prop("driver/@io")
    iothread = Prop("driver/@iothread", INT)
    boot_order = Prop("boot/@order", INT)
    source_protocol = Prop("source/@protocol")
    address_type = Prop("address/@type")
    controller = Prop("address/@controller", INT)
    driver = Child("driver")
    source = Child("source")
    source_address = Child("source", "address")

    @property
    def iothread_queues(self) -> bool:
        return xmltext.find(self.node, "driver/iothreads") is not None

    @property
    def effective_device(self) -> str:
        return self.device or self.DEVICE_DISK


class Interface(View):
    TAG = "interface"
    TUNED_TYPES = ("network", "bridge", "direct", "ethernet")
    MODEL_VIRTIO = "virtio"
    DRIVER_NAME_VHOST = "vhost"

    type = Prop("@type")
    model = Prop("model/@type")
    mac = Prop("mac/@address")
    driver_name = Prop("driver/@name")
    queues = Prop("driver/@queues", INT)
    source = Child("source")
    source_address = Child("source", "address")


class Hostdev(View):
    """A ``<hostdev>``: a host device passed to the guest."""

    TAG = "hostdev"

    mode = Prop("@mode")
    type = Prop("@type")
    source_address = Child("source", "address")


class Controller(View):
    TYPE_SCSI = "scsi"

    type = Prop("@type")
    index = Prop("@index", INT)


class CellRef(View):
    """A device's ``<target>`` that names a guest cell in ``<node>`` (a memory device's, a PCI
    expander bus's). Plain digits only: the numa pass renumbers no other spelling."""

    cell = Prop("node", DIGITS)


class Tag(View):
    """vmtune's ``<vmtune:tune>`` in ``<metadata>``."""

    profile = Prop("@profile")


class MemoryDevice(View):
    """A ``<memory>`` device: DIMM, virtio-mem (guest RAM, hugepage-backed like the cells), or
    nvdimm, virtio-pmem (a file) and sgx-epc (EPC), which no hugepage backs."""

    RAM_MODELS = ("dimm", "virtio-mem")
    MODEL_VIRTIO_MEM = "virtio-mem"

    model = Prop("@model")
    target_node = Prop("target/node", INT)
    nodemask_text = Prop("source/nodemask")
    size_kib = Size("target/size", default=0)
    block_kib = Size("target/block")
    pagesize_kib = Size("source/pagesize")  # its own page size, which wins over <memoryBacking>'s

    @property
    def granule_kib(self) -> int:
        """What its page size must divide: a virtio-mem block, else the whole size (QEMU refuses a
        DIMM backend that is not a whole number of pages, and a block smaller than a page)."""
        return (self.block_kib if self.model == self.MODEL_VIRTIO_MEM else None) or self.size_kib


class NumaCell(View):
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

    TAG = "domain"

    CPU_MODE_HOST_PASSTHROUGH = "host-passthrough"
    CPU_MODE_MAXIMUM = "maximum"
    VCPU_PLACEMENT_STATIC = "static"
    VCPU_PLACEMENT_AUTO = "auto"
    NUMA_MODE_STRICT = "strict"
    MEMORY_SOURCE_ANONYMOUS = "anonymous"
    NUMA_PLACEMENT_AUTO = "auto"
    FEATURE_TOPOEXT = "topoext"
    POLICY_REQUIRE = "require"
    CLOCK_UTC = "utc"
    CLOCK_LOCALTIME = "localtime"
    TIMER_HPET = "hpet"
    TIMER_KVMCLOCK = "kvmclock"
    TIMER_HYPERVCLOCK = "hypervclock"
    HYPERV_PASSTHROUGH = "passthrough"

    type = Prop("@type")
    name = Prop("name")
    uuid = Prop("uuid")
    arch = Prop("os/type/@arch")
    vcpu_text = Prop("vcpu")
    vcpu_placement = Prop("vcpu/@placement")
    vcpu_cpuset = Prop("vcpu/@cpuset", CPUSET)
    cpu_mode = Prop("cpu/@mode")
    cpu_match = Prop("cpu/@match")
    cpu_feature_policy = Keyed("cpu/feature[@name='{}']/@policy")
    numa_mode = Prop("numatune/memory/@mode")
    numa_nodeset = Prop("numatune/memory/@nodeset", CPUSET)
    numa_placement = Prop("numatune/memory/@placement")
    iothreads = Prop("iothreads", INT, default=0)
    clock_offset = Prop("clock/@offset")
    timer_present = Keyed("clock/timer[@name='{}']/@present", YES_NO)
    kvm_hint_dedicated = Prop("features/kvm/hint-dedicated/@state", ON_OFF)
    kvm_poll_control = Prop("features/kvm/poll-control/@state", ON_OFF)
    os_cmdline = Prop("os/cmdline")
    pmu = Prop("features/pmu/@state", ON_OFF)
    hyperv_mode = Prop("features/hyperv/@mode")
    hyperv_state = Keyed("features/hyperv/{}/@state", ON_OFF)
    hyperv_spinlock_retries = Prop("features/hyperv/spinlocks/@retries", INT)
    memory_kib = Size("memory", default=0)
    # elements the passes read whole or replace (Child: each step declared in vmtune/xml/elements.py)
    vcpu_element = Child("vcpu")
    iothreadids = Child("iothreadids")
    cputune = Child("cputune")
    numatune = Child("numatune")
    memory_backing = Child("memoryBacking")
    memtune = Child("memtune")
    hard_limit = Child("memtune", "hard_limit")
    cpu = Child("cpu")
    cpu_numa = Child("cpu", "numa")
    clock = Child("clock")
    hyperv = Child("features", "hyperv")
    kernel = Child("os", "kernel")
    metadata = Child("metadata")
    current_memory_kib = Size("currentMemory", default=0)
    max_memory_kib = Size("maxMemory")

    # -- counts and sizes ---------------------------------------------------------------------
    @property
    def vcpus(self) -> int:
        """The maximum vCPU count (what every pin and the guest topology must cover)."""
        return _int(self.vcpu_text or "") or 1

    @property
    def has_max_memory(self) -> bool:
        return xmltext.find(self.node, "maxMemory") is not None

    @property
    def dimm_kib(self) -> int:
        return sum(_kib(el) for el in xmltext.each(self.node, "devices/memory/target/size"))

    @property
    def boot_memory_kib(self) -> int:
        """Memory the guest boots with: the sum of its NUMA cells, else <memory> less DIMMs."""
        cells = self.cells
        if cells:
            return sum(c.memory_kib for c in cells)
        return max(self.memory_kib - self.dimm_kib, 0)

    # -- children -----------------------------------------------------------------------------
    @property
    def cells(self) -> list[NumaCell]:
        return [NumaCell(e, i) for i, e in enumerate(xmltext.each(self.node, "cpu/numa/cell"))]

    @property
    def disks(self) -> list[Disk]:
        return [Disk(e) for e in xmltext.each(self.node, "devices/disk")]

    @property
    def interfaces(self) -> list[Interface]:
        return [Interface(e) for e in xmltext.each(self.node, "devices/interface")]

    @property
    def hostdevs(self) -> list[Hostdev]:
        return [Hostdev(e) for e in xmltext.each(self.node, "devices/hostdev")]

    @property
    def memory_devices(self) -> list[MemoryDevice]:
        return [MemoryDevice(e) for e in xmltext.each(self.node, "devices/memory")]

    @property
    def controllers(self) -> list[Controller]:
        return [Controller(e) for e in xmltext.each(self.node, "devices/controller")]

    def listed_iothread_ids(self) -> list[int]:
        """The ids ``<iothreadids>`` lists, in document order."""
        ids = [_int(e.get("id")) for e in xmltext.each(self.node, "iothreadids/iothread")]
        return [i for i in ids if i is not None]

    def iothread_ids(self) -> list[int]:
        """Every iothread the domain has, sorted: the listed ids, and as many of the lowest unused
        ids in 1..N as libvirt fills in (virDomainIOThreadIDDefArrayInit), N being ``<iothreads>``
        or, if more are listed, their count."""
        return fill_iothread_ids(self.listed_iothread_ids(), self.iothreads)

    def vcpupins(self) -> dict[int, frozenset[int]]:
        return pins_of(xmltext.each(self.node, "cputune/vcpupin"))

    def find(self, path: str) -> etree._Element | None:
        return xmltext.find(self.node, path)

    def iter(self, path: str) -> Iterator[etree._Element]:
        return xmltext.each(self.node, path)

    # -- the vmtune tag -----------------------------------------------------------------------
    @property
    def tag(self) -> etree._Element | None:
        return xmltext.find(self.node, f"metadata/{TAG}")

    @property
    def tagged_profile(self) -> str | None:
        tag = self.tag
        return None if tag is None else (Tag(tag).profile or None)

    @property
    def os_id(self) -> str | None:
        el = xmltext.find(self.node, f"metadata/{{{LIBOSINFO_NS}}}libosinfo/{{{LIBOSINFO_NS}}}os")
        return None if el is None else el.get("id")

    @property
    def guest_os(self) -> guestos.GuestOS:
        """The guest OS from the strongest evidence the domain has (vmtune/xml/guestos.py)."""
        return guestos.read(self)

    @property
    def is_windows(self) -> bool:
        return self.guest_os.windows
