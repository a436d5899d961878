"""What still interrupts the CPUs running latency domains hold: a census over a short time (area ``noise``).

For each held CPU (the isolation area's: the leases of running domains, less the reserved CPUs),
the census reads twice, ``seconds`` apart (2 s by default; ``vmtune doctor --census-seconds``):

- ``/proc/interrupts``: each row's count on that CPU: device IRQs (named by their action, e.g.
  ``IRQ 26 (ttyS0)``) and the architecture's own (``LOC`` local timer, ``RES`` rescheduling,
  ``CAL`` function calls, ``TLB`` shootdowns, ...);
- ``/proc/softirqs``: each softirq's count on that CPU;
- the host's threads that ran there: ``/proc/*/task/*/stat`` shows the CPU (field 39) and the run
  time (fields 14 and 15) grew; libvirt's own QEMU threads are left out (they are the guest).

What grew is sorted into what can be moved at runtime (a device IRQ whose affinity also allows a
CPU that is not held, a host task that may run elsewhere: WARN, the hook's isolation moves them
while ``[hook] isolate`` is on) and what only a boot parameter moves (the tick: ``nohz_full=``;
RCU callbacks: ``rcu_nocbs=``; an IRQ that allows the held CPUs only, a managed one:
``irqaffinity=``; per-CPU kernel threads: nothing): INFO, with the exact kernel command line for
the held CPUs. The census itself (rates per second, per CPU and source) goes into the JSON report
and into the Prometheus metrics.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import cpuset
from ..host import sysfs
from ..hoststate.kinds.tasks import PF_NO_SETAFFINITY, TICK, cgroups_of, comm_of, libvirt_pids, stat_fields
from .findings import Context, Finding, maker
from .hookstate import libvirt_rundir, load, state_path
from .isolation import held_cpus, live_leases

AREA = "noise"
new = maker(AREA)
DEFAULT_SECONDS = 2.0
SHOWN = 4
BOOT = {"LOC": "nohz_full", "RCU": "rcu_nocbs", "TIMER": "nohz_full", "SCHED": "nohz_full"}


@dataclass
class Census:
    """What interrupted each held CPU over ``seconds``: counts per source, per CPU."""

    seconds: float
    cpus: frozenset[int]
    interrupts: dict[int, dict[str, int]] = field(default_factory=dict)  # cpu -> source -> count
    softirqs: dict[int, dict[str, int]] = field(default_factory=dict)
    tasks: dict[int, dict[str, float]] = field(default_factory=dict)  # cpu -> "comm[tid]" -> run ms
    movable_irqs: set[str] = field(default_factory=set)  # sources that may run elsewhere
    movable_tasks: set[str] = field(default_factory=set)

    def to_dict(self) -> dict:
        rate = (lambda n: round(n / self.seconds, 3)) if self.seconds else (lambda n: n)
        return {"seconds": self.seconds, "cpus": cpuset.format(self.cpus),
                "per_cpu": {str(cpu): {"interrupts_per_s": {k: rate(v) for k, v in self.interrupts.get(cpu, {}).items()},
                                       "softirqs_per_s": {k: rate(v) for k, v in self.softirqs.get(cpu, {}).items()},
                                       "tasks_ms": dict(self.tasks.get(cpu, {}))}
                            for cpu in sorted(self.cpus)}}


def read_table(text: str | None) -> tuple[list[int], dict[str, list[int]], dict[str, str]]:
    """(CPU ids of the columns, source -> counts, source -> label) of /proc/interrupts or /proc/softirqs."""
    lines = (text or "").splitlines()
    if not lines:
        return [], {}, {}
    cpus = [int(c[3:]) for c in lines[0].split() if c.startswith("CPU") and c[3:].isdigit()]
    counts: dict[str, list[int]] = {}
    labels: dict[str, str] = {}
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        words = rest.split()
        values = [int(w) for w in words[:len(cpus)] if w.isdigit()]
        if not name.strip() or len(values) != len(cpus):
            continue
        source = name.strip()
        tail = " ".join(words[len(cpus):])
        labels[source] = (f"IRQ {source} ({tail.split()[-1]})" if source.isdigit() and tail else
                          f"IRQ {source}" if source.isdigit() else f"{source} ({tail})" if tail else source)
        counts[source] = values
    return cpus, counts, labels


def _threads(proc: str, rundir: str, held: frozenset[int]) -> dict[str, tuple[int, int, bool]]:
    """"comm[tid]" -> (last CPU, run ticks, may run elsewhere) of the host's threads that last ran
    on a held CPU (libvirt's QEMUs left out)."""
    out = {}
    managed = libvirt_pids(rundir)
    for pid in (p for p in os.listdir(proc) if p.isdigit() and int(p) not in managed):
        if cgroups_of(proc, pid)[0]:
            continue
        try:
            tids = os.listdir(os.path.join(proc, pid, "task"))
        except OSError:
            continue
        for tid in tids:
            text = sysfs.text(os.path.join(proc, pid, "task", tid, "stat")) or ""
            f = stat_fields(text)
            if not f or len(f) < 37 or not f[36].isdigit() or int(f[36]) not in held:
                continue
            status = sysfs.text(os.path.join(proc, pid, "task", tid, "status")) or ""
            allowed = re.search(r"Cpus_allowed_list:\s*(\S+)", status)
            elsewhere = bool(allowed) and bool(cpuset.parse(allowed.group(1)) - held)
            out[f"{comm_of(text)}[{tid}]"] = (int(f[36]), int(f[11]) + int(f[12]),
                                             elsewhere and not int(f[6]) & PF_NO_SETAFFINITY)
    return out


def take(ctx: Context, held: frozenset[int], seconds: float, sleep: Callable[[float], None] = time.sleep) -> Census:
    """Read, wait ``seconds``, read again: what grew on each held CPU."""
    proc = ctx.roots.proc
    first = [read_table(ctx.read("proc", name)) for name in ("interrupts", "softirqs")]
    tasks_first = _threads(proc, libvirt_rundir(ctx), held)
    sleep(seconds)
    census = Census(seconds, held)
    for (cpus, before, labels), name in zip(first, ("interrupts", "softirqs")):
        cpus2, after, _ = read_table(ctx.read("proc", name))
        out = getattr(census, name)
        for source, values in after.items():
            for cpu in held & set(cpus) & set(cpus2):
                grew = values[cpus2.index(cpu)] - before.get(source, [0] * len(cpus))[cpus.index(cpu)]
                if grew > 0:
                    out.setdefault(cpu, {})[labels.get(source, source)] = grew
                    if name == "interrupts" and source.isdigit() and _elsewhere(ctx, source, held):
                        census.movable_irqs.add(labels.get(source, source))
    for label, (cpu, ticks, elsewhere) in _threads(proc, libvirt_rundir(ctx), held).items():
        grew = ticks - (tasks_first[label][1] if label in tasks_first else 0)  # a thread born since: all of it
        if grew > 0:
            census.tasks.setdefault(cpu, {})[label] = round(grew * 1000.0 / TICK, 1)
            if elsewhere:
                census.movable_tasks.add(label)
    return census


def _elsewhere(ctx: Context, irq: str, held: frozenset[int]) -> bool:
    """Whether the IRQ's affinity allows a CPU that is not held (so it can be moved off them)."""
    text = ctx.read("proc", f"irq/{irq}/smp_affinity_list")
    try:
        return bool(cpuset.parse(text) - held) if text else False
    except Exception:  # noqa: BLE001 - an odd file: not movable as far as we know
        return False


def cmdline(ctx: Context, held: frozenset[int]) -> str:
    """The kernel parameters that move what only a boot can move off the held CPUs."""
    online = frozenset(ctx.cpus()) or held
    rest = cpuset.format(online - held) or cpuset.format(online)
    cpus = cpuset.format(held)
    return f"nohz_full={cpus} rcu_nocbs={cpus} irqaffinity={rest}"


def findings(ctx: Context, census: Census) -> list[Finding]:
    where = f"CPUs {cpuset.format(census.cpus)}"
    source = ctx.path("proc", "interrupts, softirqs, */task/*/stat")
    out = []
    movable = sorted(census.movable_irqs) + sorted(census.movable_tasks)
    if movable:
        more = f", +{len(movable) - SHOWN} more" if len(movable) > SHOWN else ""
        out.append(new("WARN", source, f"{where}: in {census.seconds:g} s, {', '.join(movable[:SHOWN])}{more} ran "
                       "there and could run elsewhere", "no movable host work on the held CPUs",
                       "[hook] isolate = \"auto\" (the default) or \"on\"; stop irqbalance or let the hook ban them"))
    fixed = {label for counts in census.interrupts.values() for label in counts if label not in census.movable_irqs}
    fixed |= {label for counts in census.softirqs.values() for label in counts}
    fixed |= {label for counts in census.tasks.values() for label in counts if label not in census.movable_tasks}
    if fixed:
        shown = sorted(fixed)
        more = f", +{len(shown) - SHOWN} more" if len(shown) > SHOWN else ""
        out.append(new("INFO", source, f"{where}: {', '.join(shown[:SHOWN])}{more} only a boot parameter moves "
                       f"(the tick, RCU callbacks, managed IRQs, per-CPU kernel threads): {cmdline(ctx, census.cpus)}"))
    if not out:
        out.append(new("OK", source, f"{where}: nothing interrupted them in {census.seconds:g} s"))
    return out


def check(ctx: Context) -> list[Finding]:
    seconds = ctx.census_seconds
    if not seconds or not ctx.has("root") or not ctx.has("proc"):
        return []
    state = load(ctx, state_path(ctx))
    leases = live_leases(ctx, state) if state is not None and hasattr(state, "leases") else {}
    held = held_cpus(ctx, leases) if leases else frozenset()
    if not held:
        return []
    ctx.census = take(ctx, held, seconds, ctx.sleep)
    return findings(ctx, ctx.census)
