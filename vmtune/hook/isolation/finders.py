"""Where the isolation's items are: listed on the live host, or looked up by a record's key.

The listings (``irqs``, ``workqueue``, ``cgroups``, ``units``; tasks are in tasks.py) give every
item the isolation may move. ``lookup`` finds the item of one record that a listing did not give
(its restore failed before, ``systemctl`` failed, the group is now covered...), and says whether
it is provably gone: an IRQ whose folder is gone, a group whose folder is gone, a task that exited
or whose pid now belongs to another task. A key read back from the state never leaves its root: a
group's name must be one plain directory entry (no ``/``, not ``.`` or ``..``, not a symbolic link)
resolving inside the cgroup root, and a unit must be one of the three the hook sets.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from ... import cpuset
from ...host import sysfs as files
from . import items, tasks
from .items import CGROUP, GONE, IRQ, MASK, SYSTEMD_UNITS, UNIT, Gone, Item, drop_in, key_of, name_of, printable, \
    valid

log = logging.getLogger("vmtune.hook")

WORKQUEUE = "devices/virtual/workqueue/cpumask"  # under the sysfs root
IRQ_DIR = "irq"  # under the proc root
DEFAULT_IRQ = "irq/default_smp_affinity"


def _irq(proc: str, n: str) -> Item | None:
    path = os.path.join(proc, IRQ_DIR, n, "smp_affinity_list")
    raw = files.value(path)
    return None if raw is None else valid(Item(f"irq:{n}", IRQ, path, raw, f"IRQ {n}"))


def _file(key: str, kind, path: str, label: str) -> Item | None:
    raw = files.value(path)
    return None if raw is None else valid(Item(key, kind, path, raw, label))


def irqs(proc: str) -> Iterator[Item]:
    """Every IRQ's ``smp_affinity_list``, then ``default_smp_affinity``."""
    base = os.path.join(proc, IRQ_DIR)
    try:
        names = sorted((n for n in os.listdir(base) if n.isdigit()), key=int)
    except OSError:
        return
    for n in names:
        if item := _irq(proc, n):
            yield item
    if item := _file("irq:default", MASK, os.path.join(proc, DEFAULT_IRQ), "default IRQ affinity"):
        yield item


def workqueue(sysfs: str) -> Iterator[Item]:
    if item := _file("wq:cpumask", MASK, os.path.join(sysfs, WORKQUEUE), "unbound workqueue cpumask"):
        yield item


def cgroup_v2_cpuset(cgroupfs: str) -> bool:
    """Whether ``cgroupfs`` is a cgroup v2 root with the cpuset controller."""
    return "cpuset" in (files.value(os.path.join(cgroupfs, "cgroup.controllers")) or "").split()


def is_machine_group(name: str) -> bool:
    """libvirt's groups (``machine.slice``, ``machine``, ``*.libvirt-qemu``, and a domain's own
    ``<resource><partition>``, which libvirt makes ``NAME.partition`` without systemd): never touched."""
    return (name in ("machine", "machine.slice") or name.startswith("machine-") or "libvirt" in name
            or name.endswith(".partition"))


def _group_full(cgroupfs: str, online: frozenset[int]) -> frozenset[int]:
    root_cpus = files.value(os.path.join(cgroupfs, "cpuset.cpus.effective"))
    return cpuset.parse(root_cpus) if root_cpus else online


def _group(cgroupfs: str, name: str, full: frozenset[int]) -> Item | None:
    """The group's item; None for libvirt's groups and anything that is not a plain folder of the root."""
    folder = os.path.join(cgroupfs, name)
    if is_machine_group(name) or os.path.islink(folder) or not os.path.isdir(folder):
        return None
    raw = files.value(os.path.join(folder, "cpuset.cpus"))
    if raw is None:
        return None
    item = valid(Item(key_of("cgroup", name), CGROUP, os.path.join(folder, "cpuset.cpus"), raw,
                      f"cgroup {printable(name)}", full))
    if item is not None:
        item.top = name
    return item


def cgroups(cgroupfs: str, online: frozenset[int]) -> Iterator[Item]:
    """Without systemd: ``cpuset.cpus`` of every top-level cgroup v2 group but libvirt's."""
    if not cgroup_v2_cpuset(cgroupfs):
        return
    full = _group_full(cgroupfs, online)
    try:
        names = sorted(os.listdir(cgroupfs))
    except OSError:
        return
    for name in names:
        if item := _group(cgroupfs, name, full):
            yield item


def _unit(runfs: str, unit: str, online: frozenset[int]) -> Item | None:
    try:
        raw = items.allowed_cpus(unit)  # (one seam: items')
    except OSError as exc:
        log.warning("unit %s: %s; left alone", unit, exc)
        return None
    item = valid(Item(key_of("unit", unit), UNIT, drop_in(runfs, unit), raw, f"unit {unit}", online))
    if item is not None:
        item.top = unit
    return item


def units(cgroupfs: str, runfs: str, online: frozenset[int]) -> Iterator[Item]:
    """With systemd: ``AllowedCPUs`` of the host's own slices and init.scope."""
    if not cgroup_v2_cpuset(cgroupfs):
        return
    for unit in SYSTEMD_UNITS:
        if os.path.isdir(os.path.join(cgroupfs, unit)) and (item := _unit(runfs, unit, online)):
            yield item


def _inside(root: str, name: str | None) -> bool:
    """Whether ``name`` is one plain entry of ``root`` that resolves inside it."""
    if not name or "/" in name or "\x00" in name or name in (".", ".."):
        return False
    real = os.path.realpath(root).rstrip("/") + "/"
    return os.path.realpath(os.path.join(root, name)).startswith(real)


def lookup(key: str, ident: str, roots, online: frozenset[int]) -> Item | Gone | None:
    """The live item of a record's ``key`` (a task: with start time ``ident``); ``GONE`` when it
    provably no longer exists; None when it cannot be read now (the record stays)."""
    kind, _, rest = key.partition(":")
    if kind == "task":
        return tasks.lookup(roots.proc, rest, ident)
    if key == "irq:default":
        path = os.path.join(roots.proc, DEFAULT_IRQ)
        return _file(key, MASK, path, "default IRQ affinity") if os.path.exists(path) else GONE
    if kind == "irq":
        return _irq(roots.proc, rest) if os.path.isdir(os.path.join(roots.proc, IRQ_DIR, rest)) else GONE
    if key == "wq:cpumask":
        path = os.path.join(roots.sysfs, WORKQUEUE)
        return _file(key, MASK, path, "unbound workqueue cpumask") if os.path.exists(path) else GONE
    name = name_of(key)
    if kind == "unit":
        return _unit(roots.runfs, name, online) if name in SYSTEMD_UNITS else GONE
    if kind == "cgroup" and _inside(roots.cgroupfs, name) and not is_machine_group(name):
        folder = os.path.join(roots.cgroupfs, name)
        if not os.path.isdir(folder) or os.path.islink(folder):
            return GONE
        return _group(roots.cgroupfs, name, _group_full(roots.cgroupfs, online))
    log.warning("isolation record %r names nothing the hook writes: dropped", printable(key))
    return GONE
