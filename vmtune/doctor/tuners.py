"""Other tuners that would fight vmtune over the same knobs: tuned (and its profile), ksmtuned,
irqbalance. Found by process name in the proc tree (``/proc/PID/comm``), so no root is needed.
"""

from __future__ import annotations

from .findings import Context, Finding, maker

new = maker("tuners")


def running(ctx: Context) -> dict[str, list[int]]:
    """Process name -> PIDs, from ``PID/comm`` (a script's comm is its file name: ``tuned``, ``ksmtuned``)."""
    out: dict[str, list[int]] = {}
    for rel in ctx.glob("proc", "[0-9]*/comm"):
        pid = rel.split("/", 1)[0]
        name = ctx.read("proc", rel)
        if name and pid.isdigit():
            out.setdefault(name, []).append(int(pid))
    return out


def _tuned(ctx: Context, procs: dict[str, list[int]]) -> Finding:
    pids = procs.get("tuned")
    source = ctx.path("proc", f"{pids[0]}/comm" if pids else "*/comm")
    if not pids:
        return new("OK", source, "tuned not running")
    profile = ctx.read("root", "etc/tuned/active_profile") if ctx.has("root") else None
    mode = ctx.read("root", "etc/tuned/profile_mode") if ctx.has("root") else None
    what = f"tuned running (pid {pids[0]}), profile {profile or 'unknown'}" + (f" ({mode})" if mode else "")
    return new("WARN", source, what + ": it sets the governor, EPP, C-states and THP too, and vmtune's hook "
               "restores what it found", "one tuner for the host",
               "systemctl disable --now tuned, or keep tuned and do not install vmtune's hook")


def _ksmtuned(ctx: Context, procs: dict[str, list[int]]) -> Finding:
    pids = procs.get("ksmtuned")
    if not pids:
        return new("OK", ctx.path("proc", "*/comm"), "ksmtuned not running")
    return new("WARN", ctx.path("proc", f"{pids[0]}/comm"),
               f"ksmtuned running (pid {pids[0]}): it turns KSM back on under memory pressure", "not running",
               "systemctl disable --now ksmtuned")


def _irqbalance(ctx: Context, procs: dict[str, list[int]]) -> Finding:
    pids = procs.get("irqbalance")
    if not pids:
        return new("INFO", ctx.path("proc", "*/comm"), "irqbalance not running: IRQs stay where they are")
    return new("INFO", ctx.path("proc", f"{pids[0]}/comm"),
               f"irqbalance running (pid {pids[0]}): it keeps IRQs off isolcpus/nohz_full CPUs, not off "
               "CPUs pinned without them", fix="IRQBALANCE_BANNED_CPULIST=<dedicated CPUs> in its config, "
               "or isolcpus for the dedicated cores")


def check(ctx: Context) -> list[Finding]:
    if not ctx.has("proc"):
        return [new("SKIP", "(no --proc)", "no proc tree given: running tuners not known")]
    procs = running(ctx)
    return [_tuned(ctx, procs), _ksmtuned(ctx, procs), _irqbalance(ctx, procs)]
