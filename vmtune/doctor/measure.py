"""The effective clock of one CPU under load: a short busy loop pinned to it.

The loop pins this thread to the CPU (``os.sched_setaffinity``), spins for ``seconds`` (0.2 by
default) and reads the clock from the best source there is, first found wins:

1. ``perf cycles``: the loop counts its own user-mode cycles (``perf_event_open``; no root needed
   while ``kernel.perf_event_paranoid`` <= 2) and divides them by the time it ran, as
   ``perf stat`` does. A guest has this only with a virtual PMU.
2. ``/proc/cpuinfo``: that CPU's ``cpu MHz``, read while it is still busy, when the CPU has the
   ``aperfmperf`` flag (x86 then computes it from the APERF/MPERF counters; without the flag it is
   the fixed TSC rate and says nothing).
3. ``scaling_cur_freq``: the cpufreq driver's view of that CPU, read while it is busy (APERF/MPERF
   on x86's intel_pstate and acpi-cpufreq; the last request elsewhere).

Nothing here runs unless the doctor is pointed at this machine's own ``/sys``: a captured tree's
CPUs are not this machine's.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import time
from dataclasses import dataclass

from ..host import sysfs as host_sysfs

SECONDS = 0.2
SYSCALL_NR = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "ppc64": 319, "s390x": 331, "i686": 336,
              "riscv64": 241, "loongarch64": 241}
PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE = 0, 1
PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_SW_TASK_CLOCK = 0, 1
EXCLUDE_KERNEL, EXCLUDE_HV = 1 << 5, 1 << 6
READ_TIMES = 1 | 2  # PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
ATTR = struct.Struct("=IIQQQQQIIQ")  # perf_event_attr up to config1: PERF_ATTR_SIZE_VER0, 64 bytes


@dataclass(frozen=True)
class Measurement:
    mhz: float
    source: str  # "perf cycles", "/proc/cpuinfo" or "scaling_cur_freq"


class Counter:
    """A perf counter on this thread, counting from its creation: ``read() -> (count, ns running)``."""

    def __init__(self, fd: int):
        self.fd = fd

    @classmethod
    def open(cls, kind: int = PERF_TYPE_HARDWARE, config: int = PERF_COUNT_HW_CPU_CYCLES) -> Counter | None:
        """The counter, or None where perf cannot count it (no PMU, paranoid, seccomp, other arch)."""
        nr = SYSCALL_NR.get(platform.machine())
        if nr is None:
            return None
        attr = ctypes.create_string_buffer(ATTR.pack(kind, ATTR.size, config, 0, 0, READ_TIMES,
                                                      EXCLUDE_KERNEL | EXCLUDE_HV, 0, 0, 0), ATTR.size)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.syscall(ctypes.c_long(nr), attr, ctypes.c_int(0), ctypes.c_int(-1), ctypes.c_int(-1),
                              ctypes.c_ulong(0))
        except (OSError, AttributeError):
            return None
        return cls(fd) if fd >= 0 else None

    def read(self) -> tuple[int, int]:
        count, _enabled, running = struct.unpack("=QQQ", os.read(self.fd, 24))
        return count, running

    def close(self) -> None:
        os.close(self.fd)


def spin(seconds: float) -> int:
    """Keep this CPU busy for ``seconds``; the number of rounds (so the loop is not optimised away)."""
    end = time.perf_counter() + seconds
    rounds = 0
    while time.perf_counter() < end:
        rounds += 1
    return rounds


def _cpuinfo_mhz(proc: str, cpu: int) -> float | None:
    for fields in host_sysfs.cpuinfo(proc):
        if fields.get("processor") == str(cpu):
            if "aperfmperf" not in fields.get("flags", "").split():
                return None
            try:
                return float(fields["cpu MHz"])
            except (KeyError, ValueError):
                return None
    return None


def _cur_freq_mhz(sysfs: str, cpu: int) -> float | None:
    khz = host_sysfs.number(os.path.join(sysfs, host_sysfs.CPU_DIR, f"cpu{cpu}/cpufreq/scaling_cur_freq"))
    return None if khz is None else khz / 1000


def effective_mhz(cpu: int, sysfs: str = "/sys", proc: str = "/proc", seconds: float = SECONDS,
                  counter=Counter.open) -> Measurement | None:
    """Pin to ``cpu``, spin ``seconds`` and read its clock; None when nothing can measure it."""
    try:
        allowed = os.sched_getaffinity(0)
        if cpu not in allowed:
            return None
        os.sched_setaffinity(0, {cpu})
    except OSError:
        return None
    try:
        perf = counter()
        try:
            spin(seconds)
            cycles, running = perf.read() if perf else (0, 0)
        finally:
            if perf:
                perf.close()
        if cycles > 0 and running > 0:
            return Measurement(cycles * 1000 / running, "perf cycles")
        mhz = _cpuinfo_mhz(proc, cpu)
        if mhz:
            return Measurement(mhz, "/proc/cpuinfo")
        mhz = _cur_freq_mhz(sysfs, cpu)
        return Measurement(mhz, "scaling_cur_freq") if mhz else None
    finally:
        os.sched_setaffinity(0, allowed)


def measurer(sysfs: str = "/sys", proc: str = "/proc", seconds: float = SECONDS):
    """``cpu -> Measurement | None`` for this machine."""
    return lambda cpu: effective_mhz(cpu, sysfs, proc, seconds)
