"""The CPUs of running latency domains, kept clear of the host's own work (vmtune/hoststate/isolation).

The CPUs checked are those of the leases whose domain still runs (alive.py, the hook's own rule,
read-only), less the host's reserved CPUs (``Host.reserved``, the one rule). Each of them should
carry no host work the hook could move: a movable task (not a per-CPU kernel thread, not libvirt's
QEMU) that may run there and elsewhere, or an IRQ the hook could write. Found there, they are a
WARN, with counts and the first few names: the hook's isolation is off, was undone by hand, or
something (irqbalance, a cgroup manager) moved the work back.

Whether an IRQ can be written is known only by writing it, which the doctor never does. The hook's
records say which IRQs it wrote: while it isolates CPUs, an IRQ there without a record is one the
kernel refused (a managed IRQ) or one that appeared since, and is mentioned as INFO only.
"""

from __future__ import annotations

import time

from .. import cpuset
from ..host.sysfs import online_cpus
from ..hoststate import alive
from ..hoststate.document import State
from ..hoststate.isolation import reserved
from ..hoststate.kinds import Item, files, irqbalance, partition, tasks
from ..roots import Roots
from .findings import Context, Finding, maker
from .hookstate import libvirt_rundir, load, state_path

new = maker("isolation")
SHOWN = 3


def live_leases(ctx: Context, state) -> dict:
    """The leases whose domain libvirt still runs (or whose state cannot be known)."""
    folder, now = libvirt_rundir(ctx), time.time()
    proc = ctx.roots.proc or alive.PROC
    return {key: lease for key, lease in state.leases.items()
            if alive.why_stale(folder, proc, key, lease.name, lease.since, now, lease.qemu) is None}


def held_cpus(ctx: Context, leases: dict) -> frozenset[int]:
    """The running dedicated latency domains' CPUs less the host's reserved ones."""
    held = frozenset().union(*(lease.cpus for lease in leases.values() if lease.dedicated))
    if not ctx.has("sysfs"):  # no topology: only what the config names
        return held - frozenset(ctx.cfg.reserved_cpus or ())
    return held - reserved(ctx.roots.sysfs, ctx.cfg)


def online_of(ctx: Context) -> frozenset[int] | None:
    """The online CPUs, when the sysfs tree is given."""
    return frozenset(online_cpus(ctx.roots.sysfs)) if ctx.has("sysfs") else None


def _names(found: list[Item]) -> str:
    more = f", +{len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return ", ".join(i.label for i in found[:SHOWN]) + more


def strays(proc: str, rundir: str, held: frozenset[int],
           online: frozenset[int] | None = None) -> tuple[list[Item], list[Item]]:
    """(tasks, IRQs) that may run on a ``held`` CPU and could run elsewhere (on an ``online`` CPU,
    when known: a mask may name offline CPUs)."""
    def movable(item: Item) -> bool:
        cpus = item.cpus
        return bool(cpus & held) and bool((cpus if online is None else cpus & online) - held)

    irqs = [i for i in files.irqs(Roots(sysfs=None, proc=proc, root=None)) if movable(i)]
    return [t for t in tasks.scan(proc, rundir) if movable(t)], irqs


def check(ctx: Context) -> list[Finding]:
    if not ctx.has("root") or not ctx.has("proc"):
        return [new("SKIP", "(no --root or --proc)", "the leases or the tasks are not given: isolation not checked")]
    state = load(ctx, state_path(ctx))
    if not isinstance(state, State) or not state.leases:
        return [new("OK", state_path(ctx), "no latency lease: no CPU to keep clear")]
    leases = live_leases(ctx, state)
    if not leases:
        return [new("OK", state_path(ctx), "no lease of a running domain: no CPU to keep clear")]
    held = held_cpus(ctx, leases)
    if not held:
        return [new("INFO", state_path(ctx), "the leases hold only reserved CPUs: nothing to keep clear")]
    return _method(ctx, leases, held) + _irqbalance(ctx, held) + _strays(ctx, state, held)


def _method(ctx: Context, leases: dict, held: frozenset[int]) -> list[Finding]:
    """Which method holds each leased CPU (an isolated cpuset partition, or today's isolation), and
    whether this kernel makes partitions."""
    cgroupfs = ctx.roots.cgroupfs if ctx.has("sysfs") else None
    support = partition.supported(cgroupfs) if cgroupfs else "no sysfs tree given"
    parted = frozenset().union(*(lease.partition for lease in leases.values())) & held
    isolated = partition.isolated(ctx.roots) if cgroupfs and support is None else frozenset()
    source = ctx.path("sysfs", "fs/cgroup/cpuset.cpus.isolated")
    kinds = "; ".join(part for part in (
        f"CPUs {cpuset.format(parted)}: an isolated cpuset partition" if parted else "",
        f"CPUs {cpuset.format(held - parted)}: the hook's isolation (tasks, IRQs, masks, cgroups)"
        if held - parted else "") if part)
    can = "this kernel makes isolated partitions ([hook] isolate = \"auto\", the default, or \"partition\")" \
        if support is None else \
        f"no isolated partitions here: {support}"
    out = [new("INFO", source, f"{kinds}; {can}")]
    if parted - isolated:
        out.append(new("WARN", source, f"CPUs {cpuset.format(parted - isolated)} are recorded as an isolated "
                       f"partition, but the kernel's cpuset.cpus.isolated is {cpuset.format(isolated) or 'empty'}",
                       "the partitions the hook made are held by the kernel",
                       "start the domain again, or run `vmtune hook reap`"))
    return out


def _irqbalance(ctx: Context, held: frozenset[int]) -> list[Finding]:
    """irqbalance's ban against the held CPUs: the hook tells it to ban them (issue 17)."""
    found, pid = irqbalance.find(ctx.roots) if ctx.roots.live else (None, None)
    if pid is None:
        pids = tasks.named(ctx.roots.proc, "irqbalance")
        return [new("INFO", ctx.path("proc", f"{pids[0]}/comm"), "irqbalance runs in this tree: its ban is read on "
                    "the live host only")] if pids else []
    source = f"irqbalance[{pid}]"
    if found is None:
        return [new("WARN", source, "its socket does not answer (not root, or a build without it): it may move IRQs "
                    f"onto CPUs {cpuset.format(held)}", "irqbalance bans the held CPUs",
                    f"run the doctor as root; or give irqbalance IRQBALANCE_BANNED_CPULIST={cpuset.format(held)}")]
    banned = found.cpus
    if held <= banned:
        return [new("OK", source, f"bans CPUs {cpuset.format(banned)}: the held CPUs {cpuset.format(held)} among them")]
    return [new("WARN", source, f"bans CPUs {cpuset.format(banned) or 'none'}, not the held CPUs "
                f"{cpuset.format(held - banned)}: it may move IRQs onto them", "irqbalance bans the held CPUs",
                "[hook] isolate_irqbalance = \"on\" (the default); any start or stop of a latency domain, or "
                "`vmtune hook reap`, sets the ban again")]


def _strays(ctx: Context, state: State, held: frozenset[int]) -> list[Finding]:
    source = ctx.path("proc", "*/task/*/status, irq/*/smp_affinity_list")
    found_tasks, found_irqs = strays(ctx.roots.proc, libvirt_rundir(ctx), held, online_of(ctx))
    records = state.isolation.records if state.isolation is not None and state.isolation.cpus else None
    refused = [] if records is None else [i for i in found_irqs if i.key not in records]
    found_irqs = [i for i in found_irqs if records is None or i.key in records]
    where = f"CPUs {cpuset.format(held)} (held by running latency domains)"
    out = []
    if refused:
        out.append(new("INFO", source, f"{where}: {len(refused)} IRQ(s) the hook could not move ({_names(refused)}): "
                       "managed by the kernel, or new since the last start"))
    if not found_tasks and not found_irqs:
        return out + [new("OK", source, f"{where}: no movable host task or IRQ on them")]
    parts = []
    if found_tasks:
        parts.append(f"{len(found_tasks)} movable task(s) ({_names(found_tasks)})")
    if found_irqs:
        parts.append(f"{len(found_irqs)} IRQ(s) ({_names(found_irqs)})")
    return out + [new("WARN", source, f"{where}: {' and '.join(parts)} may run there",
                      "no host work on the CPUs of running latency domains",
                      "[hook] isolate = \"auto\" (the default) or \"on\", and start the domain again; stop irqbalance")]
