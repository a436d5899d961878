"""Whether a leased domain still runs, from libvirt's own status files (the hook must not call libvirt).

libvirt keeps ``NAME.xml`` (the live status, with the domain's ``<uuid>``) and ``NAME.pid`` for every
running QEMU domain in its state dir: ``/run/libvirt/qemu`` for the system daemon (monolithic or
virtqemud), ``$XDG_RUNTIME_DIR/libvirt/qemu/run`` for a session daemon (``Roots.libvirt``;
``$VMTUNE_LIBVIRT_RUNDIR`` overrides it for tests and unusual hosts).

A lease is stale when:

- its domain has no status file, and the lease is older than ``GRACE_S`` (a domain that is starting
  has passed ``prepare`` before libvirt writes its status). A ``since`` in the future (the clock was
  set back, or a bad value) counts the grace from now: the grace is ``GRACE_S`` either way, never
  forever;
- the status file names another UUID;
- the pid in ``NAME.pid`` is gone, or its command line is not that domain's QEMU. libvirt always
  passes ``-uuid UUID``: a lease kept by UUID is that QEMU when the UUID matches, and only then.
  Otherwise (a lease kept by name, a command line without ``-uuid``) the name is compared with the
  ``guest=`` of ``-name``, read as QEMU reads its options (``,,`` is a comma in a value).

A pid with no command line yet (a process being set up, a zombie) and a status file without a pid
file are a domain starting: not stale. When the run dir does not exist, nothing can be known and no
lease is stale; ``known`` says so, and the hook logs it once per call rather than reap blind.

Once the domain has started there is no grace: at ``started begin`` and ``reconnect begin`` the
hook records its QEMU (``Qemu``: pid and start time, ``qemu_of``), and from then on the lease is
judged by that process alone (``why_gone``), whether or not libvirt left its status files behind:
stale at once when the process is gone, has exited (a zombie), or is another process now (the pid
reused: another start time, or a command line that is not that domain's QEMU).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import NamedTuple

GRACE_S = 120.0
PROC = "/proc"  # the pids in libvirt's files are this machine's, whatever proc root the hook is given
UUID = re.compile(rb"<uuid>\s*([0-9a-fA-F-]{32,36})\s*</uuid>")
DOMSTATUS_PID = re.compile(rb"<domstatus\b[^>]*\spid=['\"]([0-9]+)['\"]")


OWN = "verify:"  # the key of a lease vmtune verify takes for itself: alive while its process runs


class Qemu(NamedTuple):
    """A domain's QEMU process: its pid and its start time (``/proc/PID/stat`` field 22, clock
    ticks after boot), which no later process with the same pid shares."""

    pid: int
    start: int


def known(folder: str) -> bool:
    """Whether libvirt's run dir exists, so that a missing status file means a domain that is not running."""
    return os.path.isdir(folder)


def _read(path: str, limit: int = 1 << 20) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return None


def qemu_options(value: str) -> dict[str, str]:
    """A QEMU option string (``guest=db,,1,debug-threads=on``) as QEMU reads it: ``,,`` is a comma
    inside a value; a first item without ``=`` is the implied key, ``guest`` for ``-name``."""
    items, part, i = [], [], 0
    while i < len(value):
        if value[i] == ",":
            if value[i + 1:i + 2] == ",":
                part.append(",")
                i += 2
                continue
            items.append("".join(part))
            part = []
        else:
            part.append(value[i])
        i += 1
    items.append("".join(part))
    out: dict[str, str] = {}
    for n, item in enumerate(items):
        key, eq, val = item.partition("=")
        if not eq:
            key, val = ("guest", item) if n == 0 else (item, "on")
        out.setdefault(key, val)
    return out


def identity(cmdline: bytes) -> tuple[str | None, str | None]:
    """(the ``-uuid``, the ``-name`` guest) of a QEMU command line; None where it has none."""
    args = [a.decode("utf-8", "replace") for a in cmdline.split(b"\0")]
    uuid = name = None
    for flag, value in zip(args, args[1:]):
        if flag in ("-uuid", "--uuid") and uuid is None:
            uuid = value.strip().lower()
        elif flag in ("-name", "--name") and name is None:
            name = qemu_options(value).get("guest")
    return uuid, name


def runs_as(cmdline: bytes, key: str, name: str) -> bool:
    """Whether the command line is the QEMU of the domain leased as ``key`` (a UUID, or ``name:NAME``)."""
    uuid, guest = identity(cmdline)
    if not key.startswith("name:") and uuid is not None:
        return uuid == key.lower()
    return guest == name


PF_KTHREAD = 0x00200000  # the flags field of /proc/PID/stat: a kernel thread


def _kernel_thread(proc: str, pid: str) -> bool:
    """Whether ``pid`` is a kernel thread (it never gets a command line: the pid was reused)."""
    stat = _read(os.path.join(proc, pid, "stat"))
    fields = stat.rpartition(b")")[2].split() if stat else []
    return len(fields) > 6 and fields[6].isdigit() and bool(int(fields[6]) & PF_KTHREAD)


def _stat(proc: str, pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of ``pid`` from its ``stat``; None when there is no such process."""
    raw = _read(os.path.join(proc, str(pid), "stat"))
    fields = raw.rpartition(b")")[2].split() if raw else []
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    return fields[0].decode("ascii", "replace"), int(fields[19])


def qemu_of(folder: str, proc: str, key: str, name: str) -> Qemu | None:
    """The QEMU libvirt runs for the domain leased as ``key``: the pid in ``NAME.pid`` (else the
    ``pid`` of the status file's ``<domstatus>``), if it is that domain's QEMU; None otherwise."""
    if not name or "/" in name or "\x00" in name or name in (".", ".."):
        return None
    pid = (_read(os.path.join(folder, f"{name}.pid")) or b"").strip()
    if not pid.isdigit():
        found = DOMSTATUS_PID.search(_read(os.path.join(folder, f"{name}.xml")) or b"")
        pid = found.group(1) if found else b""
    if not pid.isdigit() or not 0 < int(pid) < 1 << 31:
        return None
    seen = _stat(proc, int(pid))
    cmdline = _read(os.path.join(proc, pid.decode(), "cmdline"))
    if seen is None or seen[0] in "ZX" or not cmdline or not runs_as(cmdline, key, name):
        return None
    return Qemu(int(pid), seen[1])


def why_gone(proc: str, qemu: Qemu, key: str, name: str) -> str | None:
    """Why the recorded QEMU of the lease ``key`` no longer runs its domain; None while it does."""
    seen = _stat(proc, qemu.pid)
    if seen is None:
        return f"its QEMU (pid {qemu.pid}) is gone"
    if seen[1] != qemu.start:
        return f"pid {qemu.pid} is another process now, not its QEMU"
    if seen[0] in "ZX":
        return f"its QEMU (pid {qemu.pid}) has exited"
    if key.startswith(OWN):  # vmtune verify's lease: its own process, not a QEMU
        return None
    cmdline = _read(os.path.join(proc, str(qemu.pid), "cmdline"))
    if cmdline and not runs_as(cmdline, key, name):
        return f"pid {qemu.pid} is not its QEMU"
    return None


def process(pid: int, proc: str = PROC) -> Qemu | None:
    """A process as a lease records its QEMU (pid and start time): ``vmtune verify``'s own."""
    seen = _stat(proc, pid)
    return None if seen is None else Qemu(pid, seen[1])


def why_stale(folder: str, proc: str | None, key: str, name: str, since: float, now: float,
              qemu: Qemu | None = None) -> str | None:
    """Why the lease ``key`` (a UUID, or ``name:NAME``) of domain ``name`` is stale; None while it
    runs or nothing can be known. ``proc``: where the pid is looked up (None: not looked up).
    ``qemu``: the QEMU recorded once the domain started, which alone decides."""
    if qemu is not None:
        return None if proc is None else why_gone(proc, qemu, key, name)
    if not known(folder) or not name or "/" in name or "\x00" in name or name in (".", ".."):
        return None
    status = _read(os.path.join(folder, f"{name}.xml"))
    if status is None:
        return None if abs(now - since) < GRACE_S else f"libvirt has no status file {name}.xml: not running"
    found = UUID.search(status)
    if found and not key.startswith("name:") and found.group(1).decode().lower() != key.lower():
        return f"the running {name} is another domain (UUID {found.group(1).decode()})"
    pid = (_read(os.path.join(folder, f"{name}.pid")) or b"").strip()
    if not pid.isdigit() or proc is None:
        return None  # starting: no pid yet (or no proc tree to look in)
    cmdline = _read(os.path.join(proc, pid.decode(), "cmdline"))
    if cmdline is None:
        return f"its QEMU (pid {pid.decode()}) is gone"
    if not cmdline:
        if _kernel_thread(proc, pid.decode()):
            return f"pid {pid.decode()} is a kernel thread now, not its QEMU"
        return None  # a process that is just starting (or a zombie its parent reaps soon): ask again later
    if not runs_as(cmdline, key, name):
        return f"pid {pid.decode()} is not its QEMU"
    return None


def stale(folder: str | None, proc: str | None, leases: Mapping, now: float) -> tuple[dict[str, str], bool]:
    """Why each lease of ``leases`` (key -> a lease: ``name``, ``since``, ``qemu``) whose domain no
    longer runs is stale (``why_stale``), and whether the judgement was blind: libvirt's run dir
    ``folder`` missing while a lease has no recorded QEMU. Such a lease is not judged (nothing is
    reaped blind); one whose QEMU is recorded still is. The hook, ``vmtune status`` and the doctor
    all judge leases this way."""
    seen = bool(folder) and known(folder)  # type: ignore[arg-type]
    out = {}
    for key, lease in sorted(leases.items()):
        if lease.qemu is None and not seen:
            continue
        why = why_stale(folder, proc, key, lease.name, lease.since, now, lease.qemu)  # type: ignore[arg-type]
        if why:
            out[key] = why
    return out, not seen and any(lease.qemu is None for lease in leases.values())
