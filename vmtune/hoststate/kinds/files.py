"""The kinds that are one host file each: sysfs values, C-states, CPU mask files, sysctls, IRQ
affinities and hugepage pools.

========  ========================================================  ===========================
kind      file (key)                                                the state document's name
========  ========================================================  ===========================
sysfs     ``devices/system/cpu/cpuN/cpufreq/{scaling_governor,``    the path under the sysfs root
          ``energy_performance_preference,scaling_min_freq}``,
          ``devices/system/cpu/intel_uncore_frequency/NAME/``
          ``min_freq_khz``, ``kernel/mm/ksm/run``
cstate    ``devices/system/cpu/cpuN/cpuidle/stateK/disable``        the path under the sysfs root
mask      ``irq/default_smp_affinity`` (proc), the unbound          ``irq:default``, ``wq:cpumask``,
          workqueues' ``devices/virtual/workqueue/cpumask`` and     ``wq:NAME``,
          each one's ``bus/workqueue/devices/NAME/cpumask``         ``sysctl:kernel.watchdog_cpumask``
          (sysfs), ``sys/kernel/watchdog_cpumask`` (proc, a list)
sysctl    ``sys/kernel/timer_migration``, ``sys/vm/stat_interval``  ``sysctl:NAME``
          (proc)
irq       ``irq/N/smp_affinity_list`` (proc)                        ``irq:N``
pool      ``devices/system/node/nodeN/hugepages/hugepages-SkB/``    ``N:S``
          ``nr_hugepages``
========  ========================================================  ===========================
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator
from typing import ClassVar, NamedTuple

from ...errors import InvalidInput
from ...host import sysfs as host_sysfs
from ...host.sysfs import CPU_DIR, NODE_DIR
from .base import KINDS, Item, Key, Kind, Listing, digits, inside, key_of, name_of, printable, read_file, register, valid
from .tasks import GONE, Gone

CPUFREQ_ATTRS = ("energy_performance_preference", "scaling_governor", "scaling_min_freq")
KSM_RUN = "kernel/mm/ksm/run"
UNCORE_DIR = CPU_DIR + "/intel_uncore_frequency"  # a folder per package and die (intel-uncore-frequency)
MAX_CPU_DIGITS = 5
MAX_IRQ = 1 << 20  # IRQ numbers below it


# -- sysfs values: cpufreq and KSM ------------------------------------------------------------------

class Cpufreq(Key, kind="sysfs"):
    """A CPU's ``cpufreq`` attribute (``policy``: under ``cpufreq/policyN``, which a state file may
    name; the hook writes ``cpuN/cpufreq``)."""

    __slots__ = ("number", "attr", "policy")
    DEFAULTS: ClassVar[dict] = {"policy": False}

    @property
    def text(self) -> str:
        if self.policy:
            return f"{CPU_DIR}/cpufreq/policy{self.number}/{self.attr}"
        return f"{CPU_DIR}/cpu{self.number}/cpufreq/{self.attr}"

    @property
    def cpu(self) -> int | None:
        return None if self.policy else self.number


class Ksm(Key, kind="sysfs", name=KSM_RUN):
    __slots__ = ()


class UncoreMin(Key, kind="sysfs", name=UNCORE_DIR + "/{name}/min_freq_khz"):
    """The uncore frequency floor of one package and die (``name``: its folder, ``package_00_die_00``)."""

    __slots__ = ("name",)


def _cpu_part(part: str, prefix: str) -> int | None:
    return digits(part[len(prefix):], MAX_CPU_DIGITS) if part.startswith(prefix) else None


class SysfsFile(Kind):
    """A kind whose key's text is its path under the sysfs root; read as text, and an error other
    than its absence is raised (a knob the hook cannot read is not taken as gone)."""

    cpus = False

    def read(self, item: Item) -> str | None:
        return read_file(item.root, item.rel)

    def lookup(self, key: Key, roots, online: frozenset[int] = frozenset()) -> Item | Gone:
        raw = read_file(roots.sysfs, key.text)
        return GONE if raw is None else Item(key, raw, key.text, roots.sysfs, key.text)


@register
class SysfsValue(SysfsFile):
    """A sysfs file whose text vmtune sets (a governor, an EPP, KSM's ``run``): compared as text."""

    name = "sysfs"
    section = "knob"

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        if text == KSM_RUN:
            return Ksm()
        parts = text.split("/")
        if len(parts) == 6 and "/".join(parts[:4]) == UNCORE_DIR and parts[5] == "min_freq_khz":
            name = parts[4]
            return UncoreMin(name) if name not in ("", ".", "..") and name.isprintable() else None
        if len(parts) != 6 or parts[:3] != CPU_DIR.split("/") or parts[5] not in CPUFREQ_ATTRS:
            return None
        if parts[4] == "cpufreq" and (n := _cpu_part(parts[3], "cpu")) is not None:
            return Cpufreq(n, parts[5])
        if parts[3] == "cpufreq" and (n := _cpu_part(parts[4], "policy")) is not None:
            return Cpufreq(n, parts[5], policy=True)
        return None


# -- C-states ---------------------------------------------------------------------------------------

class CState(Key, kind="cstate", name=CPU_DIR + "/cpu{number}/cpuidle/state{state}/disable"):
    """A CPU's idle state ``disable`` flag."""

    __slots__ = ("number", "state")

    @property
    def cpu(self) -> int | None:
        return self.number


@register
class CStateDisable(SysfsFile):
    name = "cstate"
    section = "knob"

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        parts = text.split("/")
        if len(parts) != 7 or parts[:3] != CPU_DIR.split("/") or parts[4] != "cpuidle" or parts[6] != "disable":
            return None
        cpu, state = _cpu_part(parts[3], "cpu"), _cpu_part(parts[5], "state")
        return None if cpu is None or state is None or len(parts[5]) > 8 else CState(cpu, state)


# -- CPU mask files ---------------------------------------------------------------------------------

class MaskFile(NamedTuple):
    """Where a mask file is: its root (``proc`` or ``sysfs``), the path under it, its label, and
    whether it holds a hex mask (else a CPU list)."""

    root: str
    rel: str
    label: str
    hex: bool = True


MASK_FILES = {
    "irq:default": MaskFile("proc", "irq/default_smp_affinity", "default IRQ affinity"),
    "wq:cpumask": MaskFile("sysfs", "devices/virtual/workqueue/cpumask", "unbound workqueue cpumask"),
    "sysctl:kernel.watchdog_cpumask": MaskFile("proc", "sys/kernel/watchdog_cpumask", "kernel.watchdog_cpumask",
                                               hex=False),
}
WORKQUEUES = "bus/workqueue/devices"  # under the sysfs root: the WQ_SYSFS workqueues, each a folder


class CpuMask(Key, kind="mask", name="{name}"):
    """One of ``MASK_FILES``: a file holding a CPU set that the isolation narrows."""

    __slots__ = ("name",)

    @property
    def file(self) -> MaskFile:
        return MASK_FILES[self.name]


class Workqueue(Key, kind="mask"):
    """An unbound workqueue of ``WORKQUEUES``, by its name (``wq:NAME`` in the state, escaped as a
    group's name is): its ``cpumask``, a hex mask the isolation narrows."""

    __slots__ = ("name",)

    @property
    def text(self) -> str:
        return key_of("wq", self.name)

    @property
    def file(self) -> MaskFile:
        return MaskFile("sysfs", f"{WORKQUEUES}/{self.name}/cpumask", f"workqueue {printable(self.name)} cpumask")


def _plain(name: str | None) -> bool:
    """Whether ``name`` is one plain directory entry."""
    return bool(name) and "/" not in name and "\x00" not in name and name not in (".", "..")


@register
class CpuMaskFile(Kind):
    name = "mask"
    section = "isolation"
    extras = {"watchdog": "isolate_watchdog", "workqueues": "isolate_workqueues"}

    def items(self, listing: Listing) -> Iterable[Item]:
        return masks(listing.roots, listing.extras)

    def is_hex(self, key: Key | None) -> bool:
        return not isinstance(key, (CpuMask, Workqueue)) or key.file.hex

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        if text in MASK_FILES:
            return CpuMask(text)
        wq = name_of(text) if text.startswith("wq:") else None
        return Workqueue(wq) if _plain(wq) else None

    def extra(self, key: Key) -> str | None:
        if isinstance(key, Workqueue):
            return "workqueues"
        return "watchdog" if key == CpuMask("sysctl:kernel.watchdog_cpumask") else None

    def lookup(self, key: CpuMask | Workqueue, roots, online: frozenset[int] = frozenset()) -> Item | Gone | None:
        """The mask's item; ``GONE`` when its file does not exist (or leaves its root); None when it
        cannot be read."""
        file = key.file
        root = getattr(roots, file.root) if file else None
        path = os.path.join(root, file.rel) if root and file else None
        if path is None or not os.path.exists(path) or not inside(root, path):
            return GONE
        return _valid(key, root, file.rel, file.label)


# -- sysctls set to a value while CPUs are isolated -------------------------------------------------

SYSCTLS = {  # name -> (the value while CPUs are isolated, the [hook] extra that turns it on)
    "kernel.timer_migration": ("0", "timers"),  # timers stay on the CPU that armed them
    "vm.stat_interval": ("10", "vmstat"),  # vmstat's per-CPU update every 10 s, not every second
}


class Sysctl(Key, kind="sysctl", name="sysctl:{name}"):
    """A ``/proc/sys`` value of ``SYSCTLS``."""

    __slots__ = ("name",)

    @property
    def rel(self) -> str:
        return "sys/" + self.name.replace(".", "/")


@register
class SysctlValue(Kind):
    name = "sysctl"
    section = "isolation"
    cpus = False
    extras = {"timers": "isolate_timers", "vmstat": "isolate_vmstat"}

    def items(self, listing: Listing) -> Iterable[Item]:
        return sysctls(listing.roots, listing.extras)

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        head, _, name = text.partition(":")
        return Sysctl(name) if head == "sysctl" and name in SYSCTLS else None

    def extra(self, key: Key) -> str | None:
        return SYSCTLS[key.name][1]  # type: ignore[attr-defined]

    def check(self, text: str, limit: int, key: Key | None = None) -> None:
        """Each of ``SYSCTLS`` is a whole number."""
        if digits(text.strip(), 19) is None:
            raise InvalidInput(f"{text!r} is not a whole number")

    def lookup(self, key: Sysctl, roots, online: frozenset[int] = frozenset()) -> Item | Gone | None:
        path = os.path.join(roots.proc, key.rel)
        if not os.path.exists(path):
            return GONE
        raw = host_sysfs.value(path)
        return None if raw is None else Item(key, raw, key.name, roots.proc, key.rel)

    def isolated(self, item: Item, before: str, cpus: frozenset[int], online: frozenset[int]) -> str | None:
        want = SYSCTLS[item.key.name][0]  # type: ignore[attr-defined]
        return want if cpus and before.strip() != want else None


def _valid(key: Key, root: str, rel: str, label: str) -> Item | None:
    """The item of the file ``root/rel``; None when it cannot be read, or not as CPUs (a warning)."""
    raw = host_sysfs.value(os.path.join(root, rel))
    return None if raw is None else valid(Item(key, raw, label, root, rel))


# -- IRQ affinities ---------------------------------------------------------------------------------

class Irq(Key, kind="irq", name="irq:{number}"):
    """An IRQ, by its number (``/proc/irq/N``)."""

    __slots__ = ("number",)


@register
class IrqAffinity(Kind):
    name = "irq"
    section = "isolation"
    inherits = True  # a new IRQ starts with default_smp_affinity
    quiet = True  # managed IRQs refuse

    def items(self, listing: Listing) -> Iterable[Item]:
        return irqs(listing.roots)

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        head, _, n = text.partition(":")
        number = digits(n, 10) if head == "irq" else None
        return Irq(number) if number is not None and number < MAX_IRQ else None

    def lookup(self, key: Irq, roots, online: frozenset[int] = frozenset()) -> Item | Gone | None:
        if not os.path.isdir(os.path.join(roots.proc, "irq", str(key.number))):
            return GONE
        return _valid(key, roots.proc, f"irq/{key.number}/smp_affinity_list", f"IRQ {key.number}")


# -- hugepage pools ---------------------------------------------------------------------------------

class Pool(Key, kind="pool", name="{node}:{size}"):
    """A NUMA node's pool of one page size (KiB)."""

    __slots__ = ("node", "size")

    def file(self, leaf: str = "nr_hugepages") -> str:
        return f"{NODE_DIR}/node{self.node}/hugepages/hugepages-{self.size}kB/{leaf}"

    def describe(self) -> str:
        return f"node {self.node} {self.size} KiB hugepages"


@register
class HugepagePool(SysfsFile):
    """``nr_hugepages`` of a pool. Counted: a lease records the pages it added, and only those that
    are free are given back (hoststate/pages.py)."""

    name = "pool"
    section = "pool"

    def lookup(self, key: Key, roots, online: frozenset[int] = frozenset()) -> Item | Gone:
        rel = key.file()  # type: ignore[attr-defined]
        raw = read_file(roots.sysfs, rel)
        return GONE if raw is None else Item(key, raw, key.describe(), roots.sysfs, rel)  # type: ignore[attr-defined]

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        node, sep, size = text.partition(":")
        n, s = digits(node, 5), digits(size, 10)
        return Pool(n, s) if sep and n is not None and s is not None else None

    def check(self, text: str, limit: int) -> None:
        if digits(text, 19) is None:
            raise InvalidInput(f"{text!r} is not a page count")


# -- listings --------------------------------------------------------------------------------------

def found(keys: Iterable[Key], roots) -> Iterator[Item]:
    """The items of those ``keys`` that exist and can be read, in order."""
    for key in keys:
        item = KINDS[key.kind].lookup(key, roots)
        if isinstance(item, Item):
            yield item


def mask_keys(roots, extras: Collection[str] = ()) -> list[CpuMask | Workqueue]:
    """The CPU mask files the isolation narrows: the default IRQ affinity, the unbound workqueues'
    global mask, and, with the extras ``watchdog`` and ``workqueues``, kernel.watchdog_cpumask and
    every unbound workqueue's own (those that have a ``cpumask``)."""
    keys = [CpuMask("irq:default"), CpuMask("wq:cpumask")]
    if "watchdog" in extras:
        keys.append(CpuMask("sysctl:kernel.watchdog_cpumask"))
    if "workqueues" in extras:
        try:
            names = sorted(os.listdir(os.path.join(roots.sysfs, WORKQUEUES)))
        except OSError:
            names = []
        keys += [Workqueue(n) for n in names if os.path.exists(os.path.join(roots.sysfs, WORKQUEUES, n, "cpumask"))]
    return keys


def masks(roots, extras: Collection[str] = ()) -> Iterator[Item]:
    """The items of ``mask_keys`` that exist."""
    return found(mask_keys(roots, extras), roots)


def sysctl_keys(extras: Collection[str] = ()) -> list[Sysctl]:
    """The ``SYSCTLS`` whose extra is on."""
    return [Sysctl(name) for name, (_, extra) in SYSCTLS.items() if extra in extras]


def sysctls(roots, extras: Collection[str] = ()) -> Iterator[Item]:
    return found(sysctl_keys(extras), roots)


def missing(roots, extras: Collection[str] = ()) -> list[str]:
    """The files of the extras that are on that this host lacks (a kernel without the watchdog, a
    container's ``/proc/sys``): skipped, each named once."""
    keys: list[Key] = [CpuMask("sysctl:kernel.watchdog_cpumask")] if "watchdog" in extras else []
    out = []
    for key in keys + sysctl_keys(extras):
        path = os.path.join(roots.proc, key.rel if isinstance(key, Sysctl) else key.file.rel)
        if not os.path.exists(path):
            out.append(path)
    return out


def irqs(roots) -> Iterator[Item]:
    """Every IRQ's ``smp_affinity_list`` under the proc root, in IRQ order."""
    try:
        names = sorted(int(n) for n in os.listdir(os.path.join(roots.proc, "irq")) if n.isascii() and n.isdigit())
    except OSError:
        return iter(())
    return found((Irq(n) for n in names), roots)
