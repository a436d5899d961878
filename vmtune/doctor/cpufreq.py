"""CPU frequency: driver and mode, governor and EPP per policy, turbo, caps, and the measured clock.

The first seed's lesson: the CPUs ran at 1.2 GHz of 2.4 under the powersave governor. The
measurement (measure.py: a 0.2 s busy loop pinned to one thread of each core) compares the
effective clock with the nominal maximum: WARN below 90%, FAIL below 60% (half speed).
No cpufreq at all on bare metal means the BIOS owns the P-states (the Dell "OS Controlled" lesson).
"""

from __future__ import annotations

import re

from .. import cpuset
from ..host.sysfs import cpu_list
from .findings import Context, Finding, grouped, maker, on_cpus

new = maker("cpufreq")
CPU = "devices/system/cpu"
PSTATE = f"{CPU}/intel_pstate"
WANT_GOVERNOR = WANT_EPP = "performance"
WARN_RATIO, FAIL_RATIO = 0.9, 0.6
GOVERNOR_FIX = "cpupower frequency-set -g performance (vmtune's hook sets it while a latency VM runs)"


def policies(ctx: Context) -> dict[str, frozenset[int]]:
    """``policyN`` -> the CPUs it governs."""
    out = {}
    for rel in ctx.glob("sysfs", f"{CPU}/cpufreq/policy[0-9]*"):
        name = rel.rsplit("/", 1)[1]
        out[name] = cpu_list(ctx.read("sysfs", f"{rel}/affected_cpus") or ctx.read("sysfs", f"{rel}/related_cpus"))
    return out


def _per_cpu(ctx: Context, pols: dict[str, frozenset[int]], attr: str) -> dict[int, str]:
    values = {}
    for name, cpus in pols.items():
        value = ctx.read("sysfs", f"{CPU}/cpufreq/{name}/{attr}")
        if value is not None:
            values.update({cpu: value for cpu in cpus})
    return values


def _source(ctx: Context, pols: dict[str, frozenset[int]], attr: str) -> str:
    name = next(iter(pols)) if len(pols) == 1 else "policy*"
    return ctx.path("sysfs", f"{CPU}/cpufreq/{name}/{attr}")


def _want_everywhere(ctx, pols, attr, want, fix) -> list[Finding]:
    values = _per_cpu(ctx, pols, attr)
    if not values:
        return []
    groups = grouped(values)
    found = on_cpus(groups)
    if len(groups) > 1:
        return [new("WARN", _source(ctx, pols, attr), f"mixed: {found}", want, fix)]
    return [new("OK" if found == want else "WARN", _source(ctx, pols, attr), found, want,
                "" if found == want else fix)]


def _driver(ctx: Context, pols) -> Finding:
    drivers = on_cpus(grouped(_per_cpu(ctx, pols, "scaling_driver"))) or "unknown"
    extra = [f"status {status}" for d in ("intel_pstate", "amd_pstate")
             if (status := ctx.read("sysfs", f"{CPU}/{d}/status"))]
    if _per_cpu(ctx, pols, "energy_performance_preference"):
        extra.append("EPP")
    return new("INFO", _source(ctx, pols, "scaling_driver"), drivers + (f" ({', '.join(extra)})" if extra else ""))


def _limits(ctx: Context, pols) -> list[Finding]:
    out = []
    boost = ctx.read("sysfs", f"{CPU}/cpufreq/boost")
    if boost == "0":
        out.append(new("WARN", ctx.path("sysfs", f"{CPU}/cpufreq/boost"), "0 (turbo off)", "1",
                       "echo 1 > /sys/devices/system/cpu/cpufreq/boost (keep 0 only for fixed realtime clocks)"))
    if ctx.read("sysfs", f"{PSTATE}/no_turbo") == "1":
        out.append(new("WARN", ctx.path("sysfs", f"{PSTATE}/no_turbo"), "1 (turbo off)", "0",
                       "echo 0 > /sys/devices/system/cpu/intel_pstate/no_turbo (and check the BIOS turbo setting)"))
    top = ctx.read("sysfs", f"{PSTATE}/max_perf_pct")
    if top is not None and top != "100":
        out.append(new("WARN", ctx.path("sysfs", f"{PSTATE}/max_perf_pct"), f"{top}% (clock capped)", "100%",
                       "echo 100 > /sys/devices/system/cpu/intel_pstate/max_perf_pct"))
    low = ctx.read("sysfs", f"{PSTATE}/min_perf_pct")
    if low is not None:
        out.append(new("INFO", ctx.path("sysfs", f"{PSTATE}/min_perf_pct"),
                       f"{low}% (the floor; the performance governor runs at the top regardless)"))
    capped = {}
    for name, cpus in pols.items():
        top = ctx.read("sysfs", f"{CPU}/cpufreq/{name}/cpuinfo_max_freq")
        lid = ctx.read("sysfs", f"{CPU}/cpufreq/{name}/scaling_max_freq")
        if top and lid and top.isdigit() and lid.isdigit() and int(lid) < int(top):
            capped.update({cpu: f"{int(lid) // 1000} of {int(top) // 1000} MHz" for cpu in cpus})
    if capped:
        out.append(new("WARN", _source(ctx, pols, "scaling_max_freq"), on_cpus(grouped(capped)),
                       "scaling_max_freq = cpuinfo_max_freq", "cpupower frequency-set -u <cpuinfo_max_freq>"))
    return out


def _nominal(ctx: Context, pols) -> dict[int, tuple[float, str]]:
    """cpu -> (nominal maximum MHz, where it came from)."""
    out: dict[int, tuple[float, str]] = {}
    for name, cpus in pols.items():
        for attr in ("base_frequency", "cpuinfo_max_freq"):
            value = ctx.read("sysfs", f"{CPU}/cpufreq/{name}/{attr}")
            if value and value.isdigit() and int(value) > 0:
                out.update({cpu: (int(value) / 1000, attr) for cpu in cpus})
                break
    for entry in ctx.cpuinfo():  # "Intel(R) Xeon(R) CPU E5-2630 v3 @ 2.40GHz"
        m = re.search(r"@\s*([\d.]+)\s*GHz", entry.get("model name", ""))
        cpu = entry.get("processor", "")
        if m and cpu.isdigit() and int(cpu) not in out:
            out[int(cpu)] = (float(m.group(1)) * 1000, "model name")
    return out


def _one_per_core(ctx: Context) -> list[int]:
    seen: set[int] = set()
    out = []
    for cpu in ctx.cpus():
        if cpu in seen:
            continue
        siblings = ctx.read("sysfs", f"{CPU}/cpu{cpu}/topology/thread_siblings_list")
        seen |= cpu_list(siblings) | {cpu}
        out.append(cpu)
    return out


def _measured(ctx: Context, pols, fix: str) -> list[Finding]:
    if ctx.measure is None:
        return [new("SKIP", "busy loop", "clock not measured (--no-measure, or a captured tree whose CPUs "
                    "are not this machine's)")]
    nominal = _nominal(ctx, pols)
    cpus = [cpu for cpu in _one_per_core(ctx) if cpu in nominal]
    if not cpus:
        return [new("SKIP", "busy loop", "clock not measured: no nominal maximum known "
                    "(no cpufreq, no GHz in the CPU model name)")]
    got = {cpu: m for cpu in cpus if (m := ctx.measure(cpu)) is not None}
    if not got:
        return [new("SKIP", "busy loop", "nothing here can measure the clock (no perf cycles: no PMU or "
                    "perf_event_paranoid > 2; no aperfmperf; no scaling_cur_freq)")]
    levels: dict[str, list[int]] = {}
    for cpu, m in got.items():
        ratio = m.mhz / nominal[cpu][0]
        level = "FAIL" if ratio < FAIL_RATIO else "WARN" if ratio < WARN_RATIO else "OK"
        levels.setdefault(level, []).append(cpu)
    out = []
    sources = sorted({m.source for m in got.values()})
    for level in ("FAIL", "WARN", "OK"):
        if level not in levels:
            continue
        members = levels[level]
        lo = min(got[c].mhz for c in members)
        hi = max(got[c].mhz for c in members)
        nom, where = nominal[members[0]]
        pct = round(100 * lo / nom)
        span = f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"
        found = f"{span} MHz under load, {pct}% of {nom:.0f} MHz nominal ({where}) on CPUs {cpuset.format(members)}"
        out.append(new(level, f"{', '.join(sources)} during a busy loop per core", found,
                       f">= {WARN_RATIO:.0%} of nominal", fix if level != "OK" else ""))
    return out


def check(ctx: Context) -> list[Finding]:
    env = ctx.env
    if not ctx.has("sysfs"):
        return [new("SKIP", "(no --sysfs)", "no sysfs tree given")]
    pols = policies(ctx)
    if not pols:
        where = ctx.path("sysfs", f"{CPU}/cpufreq")
        if env is not None and env.guest:
            out = [new("SKIP", where, "no cpufreq in a guest: the host sets the clock",
                       fix="run vmtune doctor on the host")]
        else:
            out = [new("WARN", where, "no cpufreq driver: the BIOS owns the P-states (or no driver is loaded)",
                       "OS-controlled P-states (intel_pstate, amd-pstate or acpi-cpufreq)",
                       "BIOS power management: 'OS Controlled' (Dell) or maximum performance")]
        return out + _measured(ctx, pols, "BIOS power profile: maximum performance, or 'OS Controlled' and "
                                          "the performance governor")
    out = [_driver(ctx, pols)]
    out += _want_everywhere(ctx, pols, "scaling_governor", WANT_GOVERNOR, GOVERNOR_FIX)
    out += _want_everywhere(ctx, pols, "energy_performance_preference", WANT_EPP,
                            "echo performance > .../cpufreq/policy*/energy_performance_preference")
    out += _limits(ctx, pols)
    governors = set(_per_cpu(ctx, pols, "scaling_governor").values())
    fix = GOVERNOR_FIX if governors - {WANT_GOVERNOR} else \
        "check the BIOS power profile, thermal throttling and power capping (max_perf_pct, RAPL)"
    return out + _measured(ctx, pols, fix)
