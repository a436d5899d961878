"""What the isolation moves, as items: one CPU set each, read live, with a way to write it.

An ``Item`` is one thing whose CPUs the hook may narrow: a task's affinity, an IRQ's
``smp_affinity_list``, ``/proc/irq/default_smp_affinity``, the unbound workqueues' ``cpumask``, a
top-level cgroup v2 ``cpuset.cpus`` or a systemd unit's ``AllowedCPUs``. Its ``raw`` value is the
text as read (written back as it was at restore); its ``kind`` knows how to read that text as CPUs
and how to write a value. Every item is found by listing the live host, never by a path read back
from the state file.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from ... import cpuset
from ...errors import InvalidInput

log = logging.getLogger("vmtune.hook")

WORKQUEUE = "devices/virtual/workqueue/cpumask"  # under the sysfs root
IRQ_DIR = "irq"  # under the proc root
DEFAULT_IRQ = "irq/default_smp_affinity"
SYSTEMD_UNITS = ("init.scope", "system.slice", "user.slice")
SYSTEMCTL_TIMEOUT_S = 10


class Kind:
    """How one kind of item reads and writes its value."""

    name = "file"
    inherits = False  # new items of this kind copy a mask vmtune imposed (tasks, IRQs)

    def parse(self, raw: str, item: Item) -> frozenset[int]:
        return cpuset.parse(raw)

    def format(self, cpus: frozenset[int]) -> str:
        return cpuset.format(cpus)

    def write(self, item: Item, raw: str) -> None:
        with open(item.where, "w", encoding="ascii") as fh:
            fh.write(raw if raw.strip() else "\n")  # an empty cpuset.cpus is written as a newline


class MaskFile(Kind):
    """A hex mask file: ``default_smp_affinity``, the workqueue ``cpumask``."""

    def parse(self, raw: str, item: Item) -> frozenset[int]:
        return cpuset.parse_mask(raw)

    def format(self, cpus: frozenset[int]) -> str:
        return cpuset.format_mask(cpus)


class IrqFile(Kind):
    name = "irq"
    inherits = True  # a new IRQ starts with default_smp_affinity


class CgroupFile(Kind):
    """A cgroup v2 ``cpuset.cpus``: empty means the CPUs of the parent (``item.full``)."""

    name = "cgroup"

    def parse(self, raw: str, item: Item) -> frozenset[int]:
        return cpuset.parse(raw) if raw.strip() else item.full


class Unit(Kind):
    """A systemd unit's ``AllowedCPUs`` (empty: not set, every CPU), through ``systemctl``."""

    name = "unit"

    def parse(self, raw: str, item: Item) -> frozenset[int]:
        return cpuset.parse(raw) if raw.strip() else item.full

    def write(self, item: Item, raw: str) -> None:
        systemctl("set-property", "--runtime", item.where, f"AllowedCPUs={raw.strip()}")


@dataclass
class Item:
    key: str  # unique in the state: "irq:24", "task:1234", "unit:system.slice", ...
    kind: Kind
    where: str  # the file, the unit or the task id
    raw: str
    label: str
    full: frozenset[int] = frozenset()  # what an empty value means (cgroups, units)
    ident: str = ""  # a task's start time: a record with another ident is another task
    born: float | None = None  # a task's start, in seconds since boot
    top: str = ""  # a task's top-level cgroup v2 group

    @property
    def cpus(self) -> frozenset[int]:
        return self.kind.parse(self.raw, self)

    def same(self, a: str, b: str) -> bool:
        """Whether two values of this item mean the same CPUs."""
        if a.strip() == b.strip():
            return True
        try:
            return self.kind.parse(a, self) == self.kind.parse(b, self)
        except InvalidInput:
            return False


MASK, IRQ, CGROUP, UNIT = MaskFile(), IrqFile(), CgroupFile(), Unit()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _valid(item: Item) -> Item | None:
    try:
        item.kind.parse(item.raw, item)
    except InvalidInput:
        log.warning("%s: cannot read %r as CPUs; left alone", item.label, item.raw)
        return None
    return item


def irqs(proc: str) -> Iterator[Item]:
    """Every IRQ's ``smp_affinity_list``, then ``default_smp_affinity``."""
    base = os.path.join(proc, IRQ_DIR)
    try:
        names = sorted((n for n in os.listdir(base) if n.isdigit()), key=int)
    except OSError:
        return
    for n in names:
        path = os.path.join(base, n, "smp_affinity_list")
        raw = _read(path)
        if raw is not None and (item := _valid(Item(f"irq:{n}", IRQ, path, raw, f"IRQ {n}"))):
            yield item
    path = os.path.join(proc, DEFAULT_IRQ)
    raw = _read(path)
    if raw is not None and (item := _valid(Item("irq:default", MASK, path, raw, "default IRQ affinity"))):
        yield item


def workqueue(sysfs: str) -> Iterator[Item]:
    path = os.path.join(sysfs, WORKQUEUE)
    raw = _read(path)
    if raw is not None and (item := _valid(Item("wq:cpumask", MASK, path, raw, "unbound workqueue cpumask"))):
        yield item


def cgroup_v2_cpuset(cgroupfs: str) -> bool:
    """Whether ``cgroupfs`` is a cgroup v2 root with the cpuset controller."""
    return "cpuset" in (_read(os.path.join(cgroupfs, "cgroup.controllers")) or "").split()


def is_machine_group(name: str) -> bool:
    """libvirt's groups (``machine.slice``, ``machine``, ``*.libvirt-qemu``): never touched."""
    return name in ("machine", "machine.slice") or name.startswith("machine-") or "libvirt" in name


def cgroups(cgroupfs: str, online: frozenset[int]) -> Iterator[Item]:
    """Without systemd: ``cpuset.cpus`` of every top-level cgroup v2 group but libvirt's."""
    if not cgroup_v2_cpuset(cgroupfs):
        return
    root_cpus = _read(os.path.join(cgroupfs, "cpuset.cpus.effective"))
    full = cpuset.parse(root_cpus) if root_cpus else online
    try:
        names = sorted(os.listdir(cgroupfs))
    except OSError:
        return
    for name in names:
        path = os.path.join(cgroupfs, name, "cpuset.cpus")
        if is_machine_group(name) or not os.path.isdir(os.path.join(cgroupfs, name)):
            continue
        raw = _read(path)
        if raw is not None and (item := _valid(Item(f"cgroup:{name}", CGROUP, path, raw, f"cgroup {name}", full))):
            item.top = name
            yield item


def systemctl(*args: str) -> str:
    """Run ``systemctl ARGS`` (from PATH); its stdout. OSError when it fails."""
    try:
        done = subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(f"systemctl {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        raise OSError(f"systemctl {' '.join(args)}: {(done.stderr or '').strip() or done.returncode}")
    return done.stdout


def units(cgroupfs: str, online: frozenset[int]) -> Iterator[Item]:
    """With systemd: ``AllowedCPUs`` of the host's own slices and init.scope."""
    if not cgroup_v2_cpuset(cgroupfs):
        return
    for unit in SYSTEMD_UNITS:
        if not os.path.isdir(os.path.join(cgroupfs, unit)):
            continue
        try:
            raw = systemctl("show", "-p", "AllowedCPUs", "--value", unit).strip()
        except OSError as exc:
            log.warning("unit %s: %s; left alone", unit, exc)
            continue
        if item := _valid(Item(f"unit:{unit}", UNIT, unit, raw, f"unit {unit}", online)):
            item.top = unit
            yield item
