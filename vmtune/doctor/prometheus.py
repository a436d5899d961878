"""``vmtune doctor --prometheus FILE``: the findings and the host's state as node_exporter textfile metrics.

``text(report)`` gives the metrics in Prometheus' text format (prometheus_client's own writer, on a
private registry); ``write(report, path)`` writes them atomically, so node_exporter's textfile
collector never reads half a file (its temporary file is ``.vmtune-*.tmp``, which the collector
skips: it reads ``*.prom`` only). prometheus_client is imported only here, and only when asked for:
``pip install vmtune[prometheus]``; without it, Unavailable (one line, exit 4).

The metrics, all gauges (a CPU, node or page size is a label; absent data gives no sample):

    vmtune_doctor_findings{area,level}            findings per area and level (every pair, 0 included)
    vmtune_doctor_ok                              1 when nothing FAILs
    vmtune_doctor_timestamp_seconds               when the report was made
    vmtune_cpufreq_governor_info{cpu,governor}    1 per CPU, its scaling governor
    vmtune_cpuidle_state_disabled{cpu,state,name,latency_us}  1 when the C-state is disabled on the CPU
    vmtune_hook_state_readable                    0 when the hook's state file is damaged or unreadable
    vmtune_hook_leases                            leases the hook holds
    vmtune_hook_lease_info{domain,uuid,profile,cpus}  1 per lease
    vmtune_isolation_cpu{cpu}                     1 per CPU kept clear for running latency domains
    vmtune_isolation_stray_tasks, _irqs           movable host tasks / IRQs that may still run there
    vmtune_noise_interrupts_per_second{cpu,source}  what interrupted a held CPU, per second, in the
                                                  doctor's census (device IRQs, LOC, RES, ..., softirqs)
    vmtune_noise_task_ms_per_second{cpu}          host tasks' run time on a held CPU, per second
    vmtune_hugepages_pool_pages{node,page_kib}, vmtune_hugepages_free{node,page_kib}  pages in the pool; free
    vmtune_hugepages_needed{node,page_kib,state}  pages the domains need (state: running, stopped);
                                                  node "any" for domains not bound to a node
    vmtune_plan_domains                           domains audited
    vmtune_plan_problems{kind}                    audit problems per kind (every known kind, 0 included)
"""

from __future__ import annotations

import os
import time

from .. import cpuset
from ..atomic import write_atomic
from ..errors import Unavailable
from ..hoststate.document import Damaged, State
from ..hoststate.statedir import StateDir
from . import AREAS, Diagnosis, area_of, cpufreq, isolation, memory
from . import domains as domains_mod
from .findings import LEVELS, Context
from .hookstate import libvirt_rundir, state_path

INSTALL_HINT = "pip install vmtune[prometheus]"
CPU = "devices/system/cpu"


def _client():
    try:
        import prometheus_client
        import prometheus_client.exposition  # noqa: F401 - generate_latest
    except ImportError:
        raise Unavailable(f"prometheus_client is not installed: {INSTALL_HINT}") from None
    return prometheus_client


def require() -> None:
    """Raise Unavailable now (before a doctor run) when prometheus_client is missing."""
    _client()


class Metrics:
    """The gauges of one registry, made on first use: ``m.set(metric, help, value, **labels)``."""

    def __init__(self) -> None:
        self.client = _client()
        self.registry = self.client.CollectorRegistry(auto_describe=True)
        self.gauges: dict = {}

    def set(self, metric: str, doc: str, value: float, /, **labels: object) -> None:
        gauge = self.gauges.get(metric)
        if gauge is None:
            gauge = self.client.Gauge(metric, doc, sorted(labels), registry=self.registry)
            self.gauges[metric] = gauge
        (gauge.labels(**{k: str(v) for k, v in labels.items()}) if labels else gauge).set(value)

    def text(self) -> str:
        return self.client.generate_latest(self.registry).decode("utf-8")


def _findings(m: Metrics, report: Diagnosis) -> None:
    areas = [area_of(a) for a in AREAS] + sorted({f.area for f in report.findings})
    for area in dict.fromkeys(areas):
        for level in LEVELS:
            n = sum(1 for f in report.findings if f.area == area and f.level == level)
            m.set("vmtune_doctor_findings", "doctor findings per area and level", n, area=area, level=level)
    m.set("vmtune_doctor_ok", "1 when no doctor finding FAILs", 0 if report.failed else 1)
    m.set("vmtune_doctor_timestamp_seconds", "when the doctor report was made", time.time())


def _governors(m: Metrics, ctx: Context) -> None:
    for name, cpus in cpufreq.policies(ctx).items():
        governor = ctx.read("sysfs", f"{CPU}/cpufreq/{name}/scaling_governor")
        for cpu in sorted(cpus) if governor else ():
            m.set("vmtune_cpufreq_governor_info", "the CPU's cpufreq scaling governor", 1, cpu=cpu, governor=governor)


def _cstates(m: Metrics, ctx: Context) -> None:
    for cpu in ctx.cpus():
        for rel in ctx.glob("sysfs", f"{CPU}/cpu{cpu}/cpuidle/state[0-9]*"):
            disable, latency = ctx.read("sysfs", f"{rel}/disable"), ctx.read("sysfs", f"{rel}/latency") or ""
            if disable not in ("0", "1"):
                continue
            m.set("vmtune_cpuidle_state_disabled", "1 when the C-state is disabled on the CPU", int(disable),
                  cpu=cpu, state=rel.rsplit("/", 1)[1], name=ctx.read("sysfs", f"{rel}/name") or "",
                  latency_us=latency if latency.isdigit() else "")


def _state(ctx: Context) -> State | str | None:
    """The hook's state, read-only: None when there is none, a string when it cannot be read."""
    path = state_path(ctx)
    if not os.path.lexists(path):
        return None
    try:
        return StateDir(os.path.dirname(path), dry_run=True).read()
    except (OSError, Damaged) as exc:
        return str(exc) or type(exc).__name__


def _leases(m: Metrics, ctx: Context) -> None:
    if not ctx.has("root"):
        return
    state = _state(ctx)
    m.set("vmtune_hook_state_readable", "0 when the hook's state file is damaged or unreadable",
          0 if isinstance(state, str) else 1)
    if isinstance(state, str):
        return
    state = state or State()
    m.set("vmtune_hook_leases", "leases the hook holds", len(state.leases))
    for key, lease in sorted(state.leases.items()):
        m.set("vmtune_hook_lease_info", "one lease of the hook", 1, domain=lease.name, uuid=key,
              profile=lease.profile, cpus=cpuset.format(lease.cpus))
    if ctx.has("proc"):
        _isolation(m, ctx, state)


def _isolation(m: Metrics, ctx: Context, state: State) -> None:
    live = isolation.live_leases(ctx, state) if state.leases else {}
    held = isolation.held_cpus(ctx, live) if live else frozenset()
    for cpu in sorted(held):
        m.set("vmtune_isolation_cpu", "1 per CPU kept clear of host work for running latency domains", 1, cpu=cpu)
    found_tasks, found_irqs = (isolation.strays(ctx.roots.proc, libvirt_rundir(ctx), held, isolation.online_of(ctx))
                               if held else ([], []))
    m.set("vmtune_isolation_stray_tasks", "movable host tasks that may run on the isolated CPUs", len(found_tasks))
    m.set("vmtune_isolation_stray_irqs", "IRQs that may run on the isolated CPUs", len(found_irqs))
    _census(m, ctx.census)


def _census(m: Metrics, census) -> None:
    """The doctor's noise census, as rates per second (none when it was not taken)."""
    if census is None or not census.seconds:
        return
    for cpu in sorted(census.cpus):
        counts = {**census.interrupts.get(cpu, {}), **{f"softirq {k}": v for k, v in census.softirqs.get(cpu, {}).items()}}
        for source, n in sorted(counts.items()):
            m.set("vmtune_noise_interrupts_per_second", "what interrupted a CPU held by a latency domain, per second",
                  n / census.seconds, cpu=cpu, source=source)
        m.set("vmtune_noise_task_ms_per_second", "host tasks' run time on a CPU held by a latency domain, per second",
              sum(census.tasks.get(cpu, {}).values()) / census.seconds, cpu=cpu)


def _hugepages(m: Metrics, ctx: Context, audit) -> None:
    for (node, size), (total, free) in sorted(memory.pools(ctx).items(), key=lambda kv: (kv[0][0] or 0, kv[0][1])):
        where = "any" if node is None else node
        m.set("vmtune_hugepages_pool_pages", "hugepages in the pool", total, node=where, page_kib=size)
        m.set("vmtune_hugepages_free", "free hugepages in the pool", free, node=where, page_kib=size)
    if audit is None or isinstance(audit, str):
        return
    for (node, size), need in memory.demand(audit.rows).items():
        for state in ("running", "stopped"):
            m.set("vmtune_hugepages_needed", "hugepages the domains need", need[state],
                  node="any" if node is None else node, page_kib=size, state=state)


def _plan(m: Metrics, audit) -> None:
    from ..placement.audit import KINDS

    if audit is None or isinstance(audit, str):
        return
    m.set("vmtune_plan_domains", "domains audited", len(audit.rows))
    for kind in dict.fromkeys(KINDS + tuple(p.kind for p in audit.problems)):
        m.set("vmtune_plan_problems", "audit problems per kind", sum(1 for p in audit.problems if p.kind == kind),
              kind=kind)


def text(report: Diagnosis) -> str:
    """The report (and the host its context read) as Prometheus text-format metrics."""
    m = Metrics()
    _findings(m, report)
    ctx = report.context
    if ctx is not None:
        audit = domains_mod.report(ctx)
        if ctx.has("sysfs"):
            _governors(m, ctx)
            _cstates(m, ctx)
            _hugepages(m, ctx, audit)
        _leases(m, ctx)
        _plan(m, audit)
    return m.text()


def write(report: Diagnosis, path: str) -> None:
    """Write ``text(report)`` to ``path`` atomically (mode 0644, for node_exporter)."""
    write_atomic(path, text(report), mode=0o644)


__all__ = ["INSTALL_HINT", "require", "text", "write"]
