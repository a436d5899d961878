"""C-states: the cpuidle driver, each state's exit latency and disabled flags, the PM QoS resume
latency per CPU, and the kernel command line's limits.

``power/pm_qos_resume_latency_us`` reads ``0`` for no constraint and ``n/a`` for "polling only";
any other number N keeps the CPU out of states whose exit latency is above N µs. A deep state
counts as reachable on a CPU only when it is enabled and the CPU's constraint lets it in.
"""

from __future__ import annotations

from .. import cpuset
from .findings import Context, Finding, grouped, maker, on_cpus

new = maker("cpuidle")
CPU = "devices/system/cpu"
CSTATE_FIX = ("vmtune's hook disables it while a latency VM runs; for always: "
              "cpupower idle-set -D {limit}")
CMDLINE = {  # kernel parameter -> (level, what it does)
    "idle": None,  # by value below
    "intel_idle.max_cstate": ("INFO", "a static limit: deeper C-states are gone even while no latency VM runs"),
    "processor.max_cstate": ("INFO", "a static limit: deeper C-states are gone even while no latency VM runs"),
    "cpuidle.off": ("INFO", "cpuidle off: idle is the default HLT/WFI"),
}
IDLE = {
    "poll": ("WARN", "every idle CPU spins: power, heat, and less turbo and SMT headroom for busy cores",
             "remove idle=poll; limit C-states per CPU instead (vmtune's hook, or guest haltpoll)"),
    "halt": ("INFO", "idle is HLT only (C1): no deep C-states", ""),
    "nomwait": ("INFO", "idle without MWAIT (acpi_idle by I/O port)", ""),
}


def qos_allows(qos: str | None, latency: int) -> bool:
    """Whether a CPU whose pm_qos_resume_latency_us reads ``qos`` may enter a state of ``latency`` µs."""
    if qos is None or qos == "0":
        return True  # 0: no constraint
    if qos == "n/a":
        return False  # polling only
    return not qos.isdigit() or latency <= int(qos)


def _qos_meaning(value: str) -> str:
    if value == "0":
        return "0 (no constraint)"
    if value == "n/a":
        return "n/a (polling only)"
    return f"{value} (states with exit latency above {value} µs unused)"


def _states(ctx: Context, cpus: list[int]) -> dict[int, dict]:
    """state index -> {name, latency (max over CPUs), enabled: CPUs, reachable: CPUs}."""
    out: dict[int, dict] = {}
    for cpu in cpus:
        qos = ctx.read("sysfs", f"{CPU}/cpu{cpu}/power/pm_qos_resume_latency_us")
        for rel in ctx.glob("sysfs", f"{CPU}/cpu{cpu}/cpuidle/state[0-9]*"):
            index = int(rel.rsplit("state", 1)[1])
            latency = ctx.read("sysfs", f"{rel}/latency") or ""
            if not latency.isdigit():
                continue
            entry = out.setdefault(index, {"name": ctx.read("sysfs", f"{rel}/name") or f"state{index}",
                                           "latency": 0, "enabled": set(), "reachable": set()})
            entry["latency"] = max(entry["latency"], int(latency))
            if ctx.read("sysfs", f"{rel}/disable") == "0":
                entry["enabled"].add(cpu)
                if qos_allows(qos, int(latency)):
                    entry["reachable"].add(cpu)
    return out


def _cmdline(ctx: Context) -> list[Finding]:
    source = ctx.path("proc", "cmdline")
    out = []
    for name, meaning in CMDLINE.items():
        value = ctx.param(name)
        if value is None:
            continue
        if name == "idle":
            level, what, fix = IDLE.get(value, ("INFO", "an unusual idle= mode", ""))
            out.append(new(level, source, f"idle={value}: {what}", "" if level == "INFO" else "no idle=", fix))
        else:
            out.append(new(meaning[0], source, f"{name}={value}: {meaning[1]}"))
    if not out and ctx.has("proc"):
        out.append(new("OK", source, "no C-state limits on the kernel command line"))
    return out


def check(ctx: Context) -> list[Finding]:
    if not ctx.has("sysfs"):
        return [new("SKIP", "(no --sysfs)", "no sysfs tree given")] + _cmdline(ctx)
    limit = ctx.cfg.hook.max_cstate_latency_us
    driver = ctx.read("sysfs", f"{CPU}/cpuidle/current_driver")
    governor = ctx.read("sysfs", f"{CPU}/cpuidle/current_governor_ro") or \
        ctx.read("sysfs", f"{CPU}/cpuidle/current_governor")
    cpus = ctx.cpus()
    states = _states(ctx, cpus)
    out = [new("INFO", ctx.path("sysfs", f"{CPU}/cpuidle/current_driver"),
               f"driver {driver or 'unknown'}, governor {governor or 'unknown'}; states: " +
               (", ".join(f"{s['name']} {s['latency']} µs" for _, s in sorted(states.items())) or "none"))]
    if not states and ctx.env is not None and ctx.env.guest:
        out.append(new("SKIP", ctx.path("sysfs", f"{CPU}/cpu*/cpuidle"),
                       "no C-states in this guest: its idle is a HLT exit to the host, whose C-states decide "
                       "the wake-up", fix="run vmtune doctor on the host"))
    for _, state in sorted(states.items()):
        if state["latency"] <= limit:
            continue
        source = ctx.path("sysfs", f"{CPU}/cpu*/cpuidle/state*/disable ({state['name']})")
        what = f"{state['name']} (exit {state['latency']} µs)"
        if state["reachable"]:
            out.append(new("WARN", source, f"{what} enabled on CPUs {cpuset.format(state['reachable'])}",
                           f"disabled (exit latency above {limit} µs)", CSTATE_FIX.format(limit=limit)))
        elif state["enabled"]:
            out.append(new("OK", source, f"{what} enabled, but pm_qos_resume_latency_us keeps every CPU out"))
        else:
            out.append(new("OK", source, f"{what} disabled"))
    qos = {cpu: v for cpu in cpus if (v := ctx.read("sysfs", f"{CPU}/cpu{cpu}/power/pm_qos_resume_latency_us"))}
    if qos:
        groups = grouped({cpu: _qos_meaning(v) for cpu, v in qos.items()})
        out.append(new("INFO", ctx.path("sysfs", f"{CPU}/cpu*/power/pm_qos_resume_latency_us"), on_cpus(groups)))
    return out + _cmdline(ctx)
