"""``vmtune doctor``: what is wrong with a host, before anyone tunes anything. Read-only.

    from vmtune.doctor import Roots, diagnose

    report = diagnose()                                   # this machine
    report = diagnose(Roots.given(sysfs="cap/sys", proc="cap/proc", root="cap"), measure=False)
    report.findings       # Finding(level, area, source, found, want, fix), one per line of the report
    report.failed         # True when a finding is FAIL (the CLI exits 1)
    report.to_dict()      # {"ok", "environment", "roots", "counts", "findings"}
    report.context        # the Context the checks read (domains, audit), for other outputs (prometheus.py)

One module per area, each ``check(ctx) -> list[Finding]``, run in this order: environment (the
others read what it found), cpufreq, cpuidle, memory, virt, tuners, hook (hookinstall.py: the hook's
file), state (hookstate.py), isolation,
domains. The domains
(``domains=[(xml, state)]``, else libvirt with ``connect``, else the /run/libvirt/qemu status files) are
loaded first, because memory and state compare against them too.

``measure``: True (the default) measures the clock with a 0.2 s pinned busy loop per core, but only
when the sysfs root is this machine's /sys; False never; a callable ``cpu -> Measurement | None``
replaces the measurement (tests feed it the figures of a captured tree).

``connect`` names a libvirt URI: its domains are judged against its host (one host per URI,
vmtune/live/hostview.py). When it is not this machine's system daemon and no tree is given
(``trees``), this machine's /sys, /proc and /run describe another host: every other area says
SKIP, for that one reason (``ELSEWHERE``), until its trees are given.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ..config import Config
from ..roots import Roots
from . import cpufreq, cpuidle, environment, hookinstall, hookstate, isolation, memory, noise, tuners, virt
from . import domains as _domains
from .findings import LEVELS, Context, Finding
from .measure import Measurement, measurer

__all__ = ["AREAS", "Diagnosis", "Finding", "Measurement", "Roots", "diagnose", "trees"]

AREAS = (environment, cpufreq, cpuidle, memory, virt, tuners, hookinstall, hookstate, isolation, noise, _domains)
log = logging.getLogger("vmtune.doctor")
ELSEWHERE = "not this machine's system daemon: this machine's /sys, /proc and /run describe another host"
ELSEWHERE_FIX = "give --sysfs/--proc/--root of that host's trees"


@dataclass(frozen=True)
class Diagnosis:
    findings: tuple[Finding, ...]
    environment: environment.Environment
    roots: Roots
    context: Context | None = field(default=None, repr=False, compare=False)  # what the checks read

    @property
    def failed(self) -> bool:
        return any(f.level == "FAIL" for f in self.findings)

    def counts(self) -> dict[str, int]:
        seen = Counter(f.level for f in self.findings)
        return {level: seen[level] for level in LEVELS if seen[level]}

    def to_dict(self) -> dict:
        out = {"ok": not self.failed, "environment": asdict(self.environment),
               "roots": {"sysfs": self.roots.sysfs, "proc": self.roots.proc, "root": self.roots.root},
               "counts": self.counts(), "findings": [f.to_dict() for f in self.findings]}
        census = getattr(self.context, "census", None)
        if census is not None:  # the noise census of the held CPUs, when one was taken
            out["census"] = census.to_dict()
        host = getattr(self.context, "host", None)
        if host is not None and not isinstance(host, str) and host.host is not None:
            out["host"] = host.to_dict()  # the host the domains were judged against
        return out


def area_of(module) -> str:
    """The area an area module reports as: its ``AREA``, else its name."""
    return getattr(module, "AREA", module.__name__.rsplit(".", 1)[1])


def elsewhere(connect: str | None, roots: Roots) -> bool:
    """Whether ``connect`` names another host than this machine's and no tree of it is given."""
    from ..live.hostview import local_system

    return bool(connect) and not local_system(connect) and roots.sysfs is None and roots.proc is None \
        and roots.root is None


def trees(connect: str | None = None, sysfs: str | None = None, proc: str | None = None, root: str | None = None,
          here: Roots | None = None) -> Roots:
    """The trees ``vmtune doctor`` reads: those given (``Roots.given``); with none given, this
    machine's, unless ``connect`` names a daemon other than this machine's system one: then none
    (its host is not this machine)."""
    if sysfs is None and proc is None and root is None and connect:
        from ..live.hostview import local_system

        if not local_system(connect):
            return Roots(None, None, None)
    return Roots.given(sysfs, proc, root, here)


def diagnose(roots: Roots | None = None, *, measure: bool | Callable[[int], Measurement | None] = True,
             connect: str | None = None, config: Config | None = None,
             domains: list[tuple[str, str]] | None = None, census_seconds: float | None = None,
             sleep: Callable[[float], None] = time.sleep) -> Diagnosis:
    """Run every check; raise InvalidInput (one line) when a root is not the tree it claims to be.
    ``census_seconds``: how long the noise census samples the held CPUs (None: 2 s on this
    machine, none on a captured tree; 0: none)."""
    roots = roots or trees(connect)
    roots.check()
    if measure is True:
        measure = measurer(roots.sysfs, roots.proc or "/proc") if roots.live else None
    if census_seconds is None:
        census_seconds = noise.DEFAULT_SECONDS if roots.live else 0.0
    ctx = Context(roots, config or Config(), measure=measure or None, census_seconds=census_seconds, sleep=sleep)
    if domains is not None:
        ctx.domains, ctx.domains_source = list(domains), "given domains"
    else:
        _domains.load(ctx, connect)
    findings: list[Finding] = []
    away = elsewhere(connect, roots)
    for area in AREAS:
        if away and area is not _domains:
            findings.append(Finding("SKIP", area_of(area), f"--connect {connect}", ELSEWHERE, fix=ELSEWHERE_FIX))
            continue
        try:
            findings += area.check(ctx)
        except Exception as exc:  # one odd file must not hide the rest of the report
            log.debug("doctor check %s failed", area_of(area), exc_info=True)
            findings.append(Finding("WARN", area_of(area), "vmtune", f"check failed: {type(exc).__name__}: {exc}",
                                    fix="report this as a vmtune bug, with the tree it read"))
    env = ctx.env if ctx.env is not None else environment.Environment("unknown")
    return Diagnosis(tuple(findings), env, roots, ctx)
