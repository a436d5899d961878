"""The CPUs of running latency domains, kept clear of the host's own work (vmtune/hook/isolation).

A CPU that a lease holds (the isolated CPUs the hook recorded, else the leases' vCPU CPUs less the
config's reserved ones) should carry no movable host task and no IRQ that could run elsewhere.
Each one found there is a WARN, with counts and the first few names: the hook's isolation is off,
was undone by hand, or something (irqbalance, a cgroup manager) moved the work back.
"""

from __future__ import annotations

from .. import cpuset
from ..hook.isolation import items, tasks
from ..hook.state import State
from .findings import Context, Finding, maker
from .state import load, state_path

new = maker("isolation")
SHOWN = 3


def held_cpus(ctx: Context, state) -> frozenset[int]:
    if state.isolation is not None and state.isolation.cpus:
        return state.isolation.cpus
    return state.held_cpus() - (ctx.cfg.reserved_cpus or frozenset())


def _names(found: list[items.Item]) -> str:
    more = f", +{len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return ", ".join(i.label for i in found[:SHOWN]) + more


def strays(proc: str, rundir: str, held: frozenset[int]) -> tuple[list[items.Item], list[items.Item]]:
    """(tasks, IRQs) that may run on a ``held`` CPU and could run elsewhere."""
    def movable(item: items.Item) -> bool:
        cpus = item.cpus
        return bool(cpus & held) and bool(cpus - held)

    irqs = [i for i in items.irqs(proc) if i.key != "irq:default" and movable(i)]
    return [t for t in tasks.scan(proc, rundir) if movable(t)], irqs


def check(ctx: Context) -> list[Finding]:
    if not ctx.has("root") or not ctx.has("proc"):
        return [new("SKIP", "(no --root or --proc)", "the leases or the tasks are not given: isolation not checked")]
    state = load(ctx, state_path(ctx))
    if not isinstance(state, State) or not state.leases:
        return [new("OK", state_path(ctx), "no latency lease: no CPU to keep clear")]
    held = held_cpus(ctx, state)
    if not held:
        return [new("INFO", state_path(ctx), "the leases hold only reserved CPUs: nothing to keep clear")]
    source = ctx.path("proc", "*/task/*/status, irq/*/smp_affinity_list")
    found_tasks, found_irqs = strays(ctx.roots.proc, ctx.path("root", "run/libvirt/qemu"), held)
    where = f"CPUs {cpuset.format(held)} (held by running latency domains)"
    if not found_tasks and not found_irqs:
        return [new("OK", source, f"{where}: no movable host task or IRQ on them")]
    parts = []
    if found_tasks:
        parts.append(f"{len(found_tasks)} movable task(s) ({_names(found_tasks)})")
    if found_irqs:
        parts.append(f"{len(found_irqs)} IRQ(s) ({_names(found_irqs)})")
    return [new("WARN", source, f"{where}: {' and '.join(parts)} may run there",
                "no host work on the CPUs of running latency domains",
                "[hook] isolate = \"on\" (the default) and start the domain again; stop irqbalance")]
