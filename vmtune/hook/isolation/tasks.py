"""Tasks as isolation items: every thread under the proc root whose affinity the hook may narrow.

Left out, before any write is tried:

- threads the kernel keeps where they are (``PF_NO_SETAFFINITY`` in ``/proc/T/stat``'s flags: the
  per-CPU kernel threads); a write that still fails with EINVAL is skipped at write time;
- every thread of a QEMU that libvirt manages: a process in one of libvirt's cgroups (a path with
  ``machine.slice``, ``machine/`` or ``.libvirt-qemu``), or whose pid is in a domain's ``NAME.pid``
  in libvirt's run dir (``/run/libvirt/qemu``; ``$VMTUNE_LIBVIRT_RUNDIR``). libvirt pins those itself;
- threads whose cgroup v2 top-level group the isolation narrows as a whole (``covered``): the
  cgroup limit already keeps them off.

A task is keyed by its thread id and known by its start time (``/proc/T/stat`` field 22), so a
record of a thread that exited is never applied to a new thread that got its id.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterator

from ... import cpuset
from .items import Item, Kind

PF_NO_SETAFFINITY = 0x04000000
LIBVIRT_GROUP = re.compile(r"(^|/)machine(\.slice)?(/|$)|\.libvirt-qemu(/|$)|(^|/)machine-qemu")


class Task(Kind):
    name = "task"
    inherits = True  # a new thread copies its parent's affinity

    def write(self, item: Item, raw: str) -> None:
        os.sched_setaffinity(int(item.where), cpuset.parse(raw))


TASK = Task()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


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
            text = (_read(os.path.join(rundir, name)) or "").strip()
            if text.isdigit():
                out.add(int(text))
    return frozenset(out)


def _groups(proc: str, pid: str) -> tuple[bool, str]:
    """(whether the process is in one of libvirt's cgroups, its cgroup v2 top-level group)."""
    libvirt, top = False, ""
    for line in (_read(os.path.join(proc, pid, "cgroup")) or "").splitlines():
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


def scan(proc: str, rundir: str, covered: Collection[str] = (), only: Collection[int] | None = None,
          qemu: set[int] | None = None) -> Iterator[Item]:
    """The movable threads under ``proc`` (``only``: of these processes). ``qemu`` collects the
    pids left out as libvirt's QEMUs."""
    try:
        pids = sorted((p for p in os.listdir(proc) if p.isdigit()), key=int)
    except OSError:
        return
    managed = libvirt_pids(rundir)
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for pid in pids:
        if only is not None and int(pid) not in only:
            continue
        libvirt, top = _groups(proc, pid)
        if libvirt or int(pid) in managed:
            if qemu is not None:
                qemu.add(int(pid))
            continue
        if top and top in covered:
            continue
        yield from _threads(proc, pid, top, tick)


def _threads(proc: str, pid: str, top: str, tick: int) -> Iterator[Item]:
    base = os.path.join(proc, pid, "task")
    try:
        tids = sorted((t for t in os.listdir(base) if t.isdigit()), key=int)
    except OSError:
        return
    for tid in tids:
        stat = _read(os.path.join(base, tid, "stat"))
        status = _read(os.path.join(base, tid, "status"))
        fields = stat_fields(stat or "")
        mask = affinity(status or "")
        if not fields or len(fields) < 20 or mask is None:
            continue  # exited while we looked
        try:
            flags, start = int(fields[6]), int(fields[19])
        except ValueError:
            continue
        if flags & PF_NO_SETAFFINITY:
            continue
        yield Item(f"task:{tid}", TASK, tid, mask, f"{comm_of(stat or '')}[{tid}]", ident=str(start),
                   born=start / tick, top=top)
