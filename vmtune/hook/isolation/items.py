"""What the isolation moves, as items: one CPU set each, read live, with a way to write it.

An ``Item`` is one thing whose CPUs the hook may narrow: a task's affinity, an IRQ's
``smp_affinity_list``, ``/proc/irq/default_smp_affinity``, the unbound workqueues' ``cpumask``, a
top-level cgroup v2 ``cpuset.cpus`` or a systemd unit's ``AllowedCPUs``. Its ``raw`` value is the
text as read (written back as it was at restore); its ``kind`` knows how to read that text as CPUs,
how to write a value and how to read back what the kernel (or systemd) made of it.

Every item is keyed in the state file (``irq:24``, ``task:1234``, ``cgroup:NAME``, ...). A group's
name may be any directory name: ``key_of`` escapes every byte outside ``[A-Za-z0-9_.@:\\-]`` as
``%XX``, so any name has a key the state accepts, and ``name_of`` gives the name back. Items are
found by listing the live host; a record whose item the listing did not give is looked up by its
key (finders.py), and a name read back from the state must be one plain directory entry that
resolves inside the cgroup root.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from ... import cpuset
from ...errors import InvalidInput
from ...host import sysfs as files

log = logging.getLogger("vmtune.hook")

SYSTEMD_UNITS = ("init.scope", "system.slice", "user.slice")
SYSTEMCTL_TIMEOUT_S = 10
DROP_IN = "50-AllowedCPUs.conf"  # what `systemctl set-property --runtime UNIT AllowedCPUs=` writes
SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.@:-\\")


def key_of(kind: str, name: str) -> str:
    """The state key of a named item: ``kind:NAME`` with every byte outside ``SAFE`` as ``%XX``."""
    raw = name.encode("utf-8", "surrogateescape")
    return kind + ":" + "".join(chr(b) if b in SAFE else f"%{b:02X}" for b in raw)


def name_of(key: str) -> str | None:
    """The name in a ``kind:NAME`` key (``key_of`` undone); None when the escapes are broken."""
    text = key.partition(":")[2]
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] == "%":
            try:
                out.append(int(text[i + 1:i + 3], 16))
            except ValueError:
                return None
            i += 3
        else:
            out += text[i].encode("utf-8", "surrogateescape")
            i += 1
    return out.decode("utf-8", "surrogateescape")


def printable(name: str) -> str:
    """A name for a log line or a label: escaped when it holds anything unprintable."""
    return name if name.isprintable() else key_of("", name)[1:]


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

    def read(self, item: Item) -> str | None:
        """The live value, read again (after a write: what the kernel made of it); None: unreadable."""
        return files.value(item.where)


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
    """A systemd unit's ``AllowedCPUs`` (empty: not set, every CPU), through ``systemctl``.

    ``item.where`` is the unit's runtime drop-in (``RUNFS/systemd/system.control/UNIT.d/``
    ``50-AllowedCPUs.conf``), the file ``set-property --runtime`` writes. Writing the empty value
    (the unit had no ``AllowedCPUs``) resets the property, as an empty assignment does in a unit
    file, and then removes that drop-in when it holds nothing but ``AllowedCPUs``: systemd's live
    value is reset already, and the next ``daemon-reload`` finds the unit's own configuration as
    it was, with no runtime setting of vmtune's left to override it until the next boot.
    """

    name = "unit"

    def parse(self, raw: str, item: Item) -> frozenset[int]:
        return cpuset.parse(raw) if raw.strip() else item.full

    def write(self, item: Item, raw: str) -> None:
        systemctl("set-property", "--runtime", unit_of(item.where), f"AllowedCPUs={raw.strip()}")
        if not raw.strip():
            remove_drop_in(item.where)

    def read(self, item: Item) -> str | None:
        try:
            return allowed_cpus(unit_of(item.where))
        except OSError:
            return None


def allowed_cpus(unit: str) -> str:
    """The unit's ``AllowedCPUs`` as a CPU list. systemd prints its ranges joined by spaces
    ("0-1 3", ``cpu_set_to_range_string``): read as the list "0-1,3", which the state keeps and
    ``set-property`` takes back. OSError when ``systemctl`` fails."""
    return ",".join(systemctl("show", "-p", "AllowedCPUs", "--value", unit).split())


@dataclass
class Item:
    key: str  # unique in the state: "irq:24", "task:1234", "unit:system.slice", ...
    kind: Kind
    where: str  # the file written (a task: its status file; a unit: its runtime drop-in)
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


class Gone:
    """A record's item that no longer exists: its record is dropped."""

    def __repr__(self) -> str:
        return "GONE"


GONE = Gone()


def valid(item: Item) -> Item | None:
    try:
        item.kind.parse(item.raw, item)
    except InvalidInput:
        log.warning("%s: cannot read %r as CPUs; left alone", item.label, item.raw)
        return None
    return item


def systemctl(*args: str) -> str:
    """Run ``systemctl ARGS`` (from PATH); its stdout. OSError when it fails."""
    import subprocess  # here: the hook loads this module at every release, and only isolation runs systemctl

    try:
        done = subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(f"systemctl {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        raise OSError(f"systemctl {' '.join(args)}: {(done.stderr or '').strip() or done.returncode}")
    return done.stdout


def drop_in(runfs: str, unit: str) -> str:
    return os.path.join(runfs, "systemd", "system.control", f"{unit}.d", DROP_IN)


def unit_of(path: str) -> str:
    """The unit whose runtime drop-in ``path`` is."""
    return os.path.basename(os.path.dirname(path)).removesuffix(".d")


def remove_drop_in(path: str) -> None:
    """Remove a runtime drop-in that sets nothing but ``AllowedCPUs`` (and its folder, when empty)."""
    text = files.value(path)
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
