"""The task kind: a thread's CPU affinity, keyed by its thread id and its start time.

A task is known by its thread id and its start time (``/proc/T/stat`` field 22, in clock ticks):
the key ``Task(tid, start)``, so a record of a thread that exited is never applied to a new thread
that got its id. The state document names it ``task:TID`` with ``ident`` the start time.

``scan`` lists the threads the isolation may narrow. Left out, before any write is tried:

- threads the kernel keeps where they are (``PF_NO_SETAFFINITY`` in ``/proc/T/stat``'s flags: the
  per-CPU kernel threads); a write that still fails with EINVAL is skipped at write time;
- every thread of a QEMU that libvirt manages: a process in one of libvirt's cgroups (a path with
  ``machine.slice``, ``machine/`` or ``.libvirt-qemu``), or whose pid is in a domain's ``NAME.pid``
  in libvirt's run dir. libvirt pins those itself;
- threads whose cgroup v2 top-level group the isolation narrows as a whole (``covered``): the
  cgroup limit already keeps them off.

A task's value is its ``Cpus_allowed_list``: the affinity in effect, which a cgroup v1 ``cpuset``
may have narrowed below what the task asked for. Since Linux 6.2 the kernel keeps the requested
mask apart, but neither ``/proc`` nor ``sched_getaffinity`` (the same effective mask, less offline
CPUs) shows it. So a restore writes back the effective mask: a task in a cpuset that is widened
later keeps the mask it had when the isolation began, where without vmtune it would have followed
the cpuset's widening.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Iterator

from ... import cpuset
from ...host import sysfs
from .base import Item, Key, Kind, Listing, digits, register

PF_NO_SETAFFINITY = 0x04000000
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc/T/stat's start time unit
LIBVIRT_GROUP = re.compile(r"(^|/)machine(\.slice)?(/|$)|\.libvirt-qemu(/|$)|(^|/)machine-qemu")


class Gone:
    """A record's item that no longer exists: its record is dropped."""

    def __repr__(self) -> str:
        return "GONE"


GONE = Gone()


def setaffinity(tid: int, cpus: frozenset[int]) -> None:
    os.sched_setaffinity(tid, cpus)


class Started(Key):
    """A key of a process or thread: its id and its start time (``/proc/PID/stat`` field 22), which
    the state keeps as the record's ``ident`` (an id may be reused)."""

    __slots__ = ()
    start: int

    @property
    def ident(self) -> str:
        return str(self.start)


class Task(Started, kind="task", name="task:{tid}"):
    __slots__ = ("tid", "start")


@register
class TaskAffinity(Kind):
    """A thread's affinity: the item's file is its status file; written through ``setaffinity``."""

    name = "task"
    section = "isolation"
    inherits = True  # a new thread copies its parent's affinity
    exits = True
    quiet = True  # per-CPU kernel threads refuse
    swept = True  # listed after the groups that cover tasks, and again by the sweep

    def items(self, listing: Listing) -> Iterable[Item]:
        """The movable threads not read yet, but those of the groups narrowed as a whole."""
        return scan(listing.roots.proc, listing.roots.libvirt, listing.covered, listing.only, listing.known)

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        head, _, n = text.partition(":")
        tid, start = (digits(n, 10), digits(ident, 20)) if head == "task" else (None, None)
        return None if tid is None or start is None else Task(tid, start)

    def write(self, item: Item, value: str) -> None:
        setaffinity(item.key.tid, cpuset.parse(value))  # type: ignore[attr-defined]

    def read(self, item: Item) -> str | None:
        return affinity(sysfs.text(item.where) or "")

    def lookup(self, key: Task, roots, online: frozenset[int] = frozenset()) -> Item | Gone | None:
        return lookup(roots.proc, key)


def libvirt_pids(rundir: str) -> frozenset[int]:
    """The pids in libvirt's ``NAME.pid`` files that have a ``NAME.xml`` status file beside them
    (its running QEMU domains; ``driver.pid`` is libvirtd's own lock)."""
    out = set()
    try:
        names = set(os.listdir(rundir))
    except OSError:
        return frozenset()
    for name in names:
        if name.endswith(".pid") and name[:-4] + ".xml" in names:
            text = (sysfs.text(os.path.join(rundir, name)) or "").strip()
            if text.isdigit():
                out.add(int(text))
    return frozenset(out)


def cgroups_of(proc: str, pid: str) -> tuple[bool, str]:
    """(whether the process is in one of libvirt's cgroups, its cgroup v2 top-level group)."""
    libvirt, top = False, ""
    for line in (sysfs.text(os.path.join(proc, pid, "cgroup")) or "").splitlines():
        hier, _, path = line.partition(":")[2].partition(":")
        if LIBVIRT_GROUP.search(path):
            libvirt = True
        if hier == "" and line.startswith("0::"):
            top = path.strip("/").split("/", 1)[0]
    return libvirt, top


def stat_fields(text: str) -> list[str] | None:
    """``/proc/T/stat`` after the command name: field 3 (state) is index 0."""
    end = text.rfind(")")
    return text[end + 2:].split() if end > 0 else None


def comm_of(text: str) -> str:
    start, end = text.find("("), text.rfind(")")
    return text[start + 1:end] if 0 <= start < end else "?"


def affinity(status: str) -> str | None:
    for line in status.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return None


def named(proc: str, comm: str) -> list[int]:
    """The pids of the processes whose ``comm`` is ``comm``, whatever their cgroup."""
    try:
        pids = sorted((p for p in os.listdir(proc) if p.isdigit()), key=int)
    except OSError:
        return []
    return [int(p) for p in pids if (sysfs.text(os.path.join(proc, p, "comm")) or "").strip() == comm]


def scan(proc: str, rundir: str, covered: Collection[str] = (), only: Collection[int] | None = None,
         known: set[str] | None = None) -> Iterator[Item]:
    """The movable threads under ``proc`` (``only``: of these processes). ``known``: the thread ids
    read already, skipped; each thread read is added to it."""
    known = set() if known is None else known
    try:
        pids = sorted((p for p in os.listdir(proc) if p.isdigit()), key=int)
    except OSError:
        return
    managed = libvirt_pids(rundir)
    for pid in pids:
        if (only is not None and int(pid) not in only) or int(pid) in managed:
            continue
        try:
            tids = sorted((t for t in os.listdir(os.path.join(proc, pid, "task")) if t.isdigit() and t not in known),
                          key=int)
        except OSError:
            continue  # exited
        if not tids:
            continue
        libvirt, top = cgroups_of(proc, pid)
        if libvirt or (top and top in covered):
            continue
        for tid in tids:
            known.add(tid)
            item = _thread(proc, pid, tid, top)
            if item is not None and item is not KTHREAD:
                yield item


KTHREAD = Item(Task(0, 0), "", "")  # a thread the kernel keeps where it is


def _thread(proc: str, pid: str, tid: str, top: str) -> Item | None:
    """The thread ``/proc/P/task/T``; None when it exited while we looked."""
    rel = os.path.join(pid, "task", tid)
    stat = sysfs.text(os.path.join(proc, rel, "stat"))
    fields = stat_fields(stat or "")
    mask = affinity(sysfs.text(os.path.join(proc, rel, "status")) or "")
    if not fields or len(fields) < 20 or mask is None:
        return None
    try:
        flags, start = int(fields[6]), int(fields[19])
    except ValueError:
        return None
    if flags & PF_NO_SETAFFINITY:
        return KTHREAD
    return Item(Task(int(tid), start), mask, f"{comm_of(stat or '')}[{tid}]", proc, os.path.join(rel, "status"),
                born=start / TICK, top=top)


def lookup(proc: str, key: Task) -> Item | Gone | None:
    """The thread of ``key`` whatever its cgroup; ``GONE`` when it exited or its id now belongs to
    another thread (another start time); None when it cannot be read now."""
    tid = str(key.tid)
    stat = os.path.join(proc, tid, "task", tid, "stat")
    if not os.path.exists(stat):
        return GONE
    item = _thread(proc, tid, tid, cgroups_of(proc, tid)[1])
    if item is None:
        return GONE if not os.path.exists(stat) else None
    if item is KTHREAD or item.key != key:
        return GONE
    return item
