"""The group kinds: a top-level cgroup v2 group's ``cpuset.cpus``, and a systemd unit's ``AllowedCPUs``.

With systemd on cgroup v2, the isolation narrows ``AllowedCPUs`` of ``init.scope``,
``system.slice`` and ``user.slice`` (``systemctl set-property --runtime``); on cgroup v2 without
systemd, ``cpuset.cpus`` of every top-level group but libvirt's. libvirt's machine groups are never
touched. An empty value means every CPU of the parent (``Item.full``).

A group's name may be any directory name: the state document names it ``cgroup:NAME`` or
``unit:NAME`` with every byte outside ``[A-Za-z0-9_.@:\\-]`` as ``%XX`` (``key_of``), and
``name_of`` gives the name back. A name read back from the state must be one plain directory entry
that resolves inside the cgroup root, and a unit one of the three the hook sets.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from typing import ClassVar

from ... import cpuset
from ...host.systemd import systemctl
from ...host import sysfs
from . import base
from .base import Item, Key, Kind, Listing, key_of, name_of, printable, register, valid
from .tasks import GONE, Gone

log = logging.getLogger("vmtune.hoststate")

SYSTEMD_UNITS = ("init.scope", "system.slice", "user.slice")
DROP_IN = "50-AllowedCPUs.conf"  # what `systemctl set-property --runtime UNIT AllowedCPUs=` writes
def is_machine_group(name: str) -> bool:
    """libvirt's groups (``machine.slice``, ``machine``, ``*.libvirt-qemu``, and a domain's own
    ``<resource><partition>``, which libvirt makes ``NAME.partition`` without systemd): never touched."""
    return (name in ("machine", "machine.slice") or name.startswith("machine-") or "libvirt" in name
            or name.endswith(".partition"))


class Group(Key):
    """A group known by its name: the state names it ``KIND:NAME`` (``key_of``)."""

    __slots__ = ("name",)
    name: str

    @property
    def text(self) -> str:
        return key_of(self.kind, self.name)


# -- cgroup v2 groups -------------------------------------------------------------------------------

class Cgroup(Group, kind="cgroup"):
    __slots__ = ()


class GroupKind(Kind):
    """A kind whose items are groups, named ``KIND:NAME`` in the state."""

    section = "isolation"
    holds_tasks = True
    key: ClassVar[type[Group]]

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        name = name_of(text) if text.startswith(self.name + ":") else None
        return None if name is None else self.key(name)


@register
class CgroupCpuset(GroupKind):
    """A top-level cgroup v2 ``cpuset.cpus``: empty means the CPUs of the parent (``item.full``)."""

    name = "cgroup"
    key = Cgroup

    def items(self, listing: Listing) -> Iterable[Item]:
        """Without systemd: every top-level group but libvirt's."""
        return () if listing.roots.systemd else cgroups(listing.roots.cgroupfs, listing.online)

    def write(self, item: Item, value: str) -> None:
        base.write_list(item.root, item.rel, value)

    def lookup(self, key: Cgroup, roots, online: frozenset[int]) -> Item | Gone | None:
        return lookup_cgroup(roots.cgroupfs, key, online)


def cgroup_v2_cpuset(cgroupfs: str) -> bool:
    """Whether ``cgroupfs`` is a cgroup v2 root with the cpuset controller."""
    return "cpuset" in (sysfs.value(os.path.join(cgroupfs, "cgroup.controllers")) or "").split()


def _group_full(cgroupfs: str, online: frozenset[int]) -> frozenset[int]:
    root_cpus = sysfs.value(os.path.join(cgroupfs, "cpuset.cpus.effective"))
    return cpuset.parse(root_cpus) if root_cpus else online


def _group(cgroupfs: str, name: str, full: frozenset[int]) -> Item | None:
    """The group's item; None for libvirt's groups and anything that is not a plain folder of the root."""
    folder = os.path.join(cgroupfs, name)
    if is_machine_group(name) or os.path.islink(folder) or not os.path.isdir(folder):
        return None
    raw = sysfs.value(os.path.join(folder, "cpuset.cpus"))
    if raw is None:
        return None
    return valid(Item(Cgroup(name), raw, f"cgroup {printable(name)}", cgroupfs, os.path.join(name, "cpuset.cpus"),
                      full, top=name))


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


def _inside(root: str, name: str) -> bool:
    """Whether ``name`` is one plain entry of ``root`` that resolves inside it."""
    if not name or "/" in name or "\x00" in name or name in (".", ".."):
        return False
    return base.inside(root, os.path.join(root, name))


def lookup_cgroup(cgroupfs: str, key: Cgroup, online: frozenset[int]) -> Item | Gone | None:
    if not _inside(cgroupfs, key.name) or is_machine_group(key.name):
        log.warning("isolation record %r names nothing the hook writes: dropped", printable(key.text))
        return GONE
    folder = os.path.join(cgroupfs, key.name)
    if not os.path.isdir(folder) or os.path.islink(folder):
        return GONE
    return _group(cgroupfs, key.name, _group_full(cgroupfs, online))


# -- systemd units ----------------------------------------------------------------------------------

class Unit(Group, kind="unit"):
    __slots__ = ()


@register
class SystemdUnit(GroupKind):
    """A systemd unit's ``AllowedCPUs`` (empty: not set, every CPU), through ``systemctl``.

    The item's file is the unit's runtime drop-in (``RUNFS/systemd/system.control/UNIT.d/``
    ``50-AllowedCPUs.conf``), the file ``set-property --runtime`` writes; for a transient unit,
    init.scope among them, systemd writes it under ``RUNFS/systemd/transient/`` instead (seen on
    systemd 257, ``unit_drop_in_dir``). Writing the empty value
    (the unit had no ``AllowedCPUs``) resets the property, as an empty assignment does in a unit
    file, and then removes that drop-in when it holds nothing but ``AllowedCPUs``: systemd's live
    value is reset already, and the next ``daemon-reload`` finds the unit's own configuration as
    it was, with no runtime setting of vmtune's left to override it until the next boot.
    """

    name = "unit"
    key = Unit

    def items(self, listing: Listing) -> Iterable[Item]:
        """With systemd: the host's own slices and init.scope."""
        return units(listing.roots.cgroupfs, listing.roots.runfs, listing.online) if listing.roots.systemd else ()

    def write(self, item: Item, value: str) -> None:
        systemctl("set-property", "--runtime", item.key.name, f"AllowedCPUs={value.strip()}")  # type: ignore[attr-defined]
        if not value.strip():
            for rel in drop_ins(item.key.name):  # type: ignore[attr-defined]
                remove_drop_in(os.path.join(item.root, rel))

    def read(self, item: Item) -> str | None:
        try:
            return allowed_cpus(item.key.name)  # type: ignore[attr-defined]
        except OSError:
            return None

    def lookup(self, key: Unit, roots, online: frozenset[int]) -> Item | Gone | None:
        return lookup_unit(roots.runfs, key, online)


def allowed_cpus(unit: str) -> str:
    """The unit's ``AllowedCPUs`` as a CPU list. systemd prints its ranges joined by spaces
    ("0-1 3", ``cpu_set_to_range_string``): read as the list "0-1,3", which the state keeps and
    ``set-property`` takes back. OSError when ``systemctl`` fails."""
    return ",".join(systemctl("show", "-p", "AllowedCPUs", "--value", unit).split())


DROP_IN_DIRS = ("system.control", "transient")  # a unit's runtime drop-ins; a transient unit's


def drop_in(unit: str) -> str:
    """The unit's runtime drop-in, under the run root."""
    return drop_ins(unit)[0]


def drop_ins(unit: str) -> list[str]:
    """Where systemd may have written the unit's runtime drop-in, under the run root."""
    return [os.path.join("systemd", folder, f"{unit}.d", DROP_IN) for folder in DROP_IN_DIRS]


def remove_drop_in(path: str) -> None:
    """Remove a runtime drop-in that sets nothing but ``AllowedCPUs`` (and its folder, when empty)."""
    text = sysfs.value(path)
    if text is None:
        return
    lines = [x.strip() for x in text.splitlines() if x.strip() and not x.lstrip().startswith(("#", ";", "["))]
    if not all(x.startswith("AllowedCPUs=") for x in lines):
        log.warning("%s: sets more than AllowedCPUs; left in place", path)
        return
    try:
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass  # a folder with other drop-ins stays


def _unit(runfs: str, unit: str, online: frozenset[int]) -> Item | None:
    try:
        raw = allowed_cpus(unit)
    except OSError as exc:
        log.warning("unit %s: %s; left alone", unit, exc)
        return None
    return valid(Item(Unit(unit), raw, f"unit {unit}", runfs, drop_in(unit), online, top=unit))


def units(cgroupfs: str, runfs: str, online: frozenset[int]) -> Iterator[Item]:
    """With systemd: ``AllowedCPUs`` of the host's own slices and init.scope."""
    if not cgroup_v2_cpuset(cgroupfs):
        return
    for unit in SYSTEMD_UNITS:
        if os.path.isdir(os.path.join(cgroupfs, unit)) and (item := _unit(runfs, unit, online)):
            yield item


def lookup_unit(runfs: str, key: Unit, online: frozenset[int]) -> Item | Gone | None:
    if key.name not in SYSTEMD_UNITS:
        log.warning("isolation record %r names nothing the hook writes: dropped", printable(key.text))
        return GONE
    return _unit(runfs, key.name, online)
