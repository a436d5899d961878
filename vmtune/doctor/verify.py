"""``vmtune verify``: a measured acceptance of CPUs meant for latency domains, on the user's own host.

oslat (oslat.py) spins on each of the CPUs for ``seconds``; around it the doctor's census
(noise.py) reads ``/proc/interrupts``, ``/proc/softirqs`` and every host thread's run time, so that
each CPU's figures come with what ran there. Per CPU: the largest gap (oslat's exact maximum), the
99th and 99.9th percentiles (upper bounds, from its 1 µs buckets), the stalls of 10, 100 and 1,000 µs
or more, and the sources: IRQs by number and name, the architecture's own interrupts (the local
timer ``LOC``, rescheduling ``RES``, ...), softirqs by kind, threads by name and id with their run
time. The verdict: every CPU's largest gap at most ``max_us``.

``DEFAULT_MAX_US`` is Red Hat's pass mark for oslat in its real-time virtualization guide (20 µs;
cyclictest's is 40 µs). On a virtual machine (this project's test machines are) the hypervisor's own
stalls of a few milliseconds are measured too: the verdict is then a FAIL whatever the host does.

Without ``as_is``, ``held`` takes a lease of verify's own for the CPUs first, through the hook's
own code (vmtune/hoststate/leases.py), as a latency domain's start would: the host's work kept off
them (with ``[hook] isolate_pinned`` on: a task pinned to them alone moves too, so that what is
measured is what a vCPU there would get), power as its profile says; and it releases the lease
however the measurement ends (SIGTERM and Ctrl-C included). The lease is keyed ``verify:PID`` and
records verify's own process: killed (SIGKILL), it is stale at once, and the next hook call or the
reaper gives everything back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import signal
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .. import cpuset
from ..errors import InvalidInput
from ..host.sysfs import online_cpus
from . import noise, oslat
from .findings import Context

DEFAULT_MAX_US = 20  # Red Hat's oslat pass mark (real-time virtualization guide)
DEFAULT_SECONDS = 10
STALLS_US = (10, 100, 1000)
_TASK = re.compile(r"^(?P<comm>.*)\[(?P<tid>\d+)\]$")


@dataclass
class CpuResult:
    """One CPU's figures and what ran there."""

    cpu: int
    max_us: int
    p99_us: int
    p999_us: int
    samples: int
    stalls: dict[int, int]  # µs -> samples of that many µs or more
    sources: list[dict] = field(default_factory=list)  # {kind, name, pid?, count}, the most first

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "max_us": self.max_us, "p99_us": self.p99_us, "p999_us": self.p999_us,
                "samples": self.samples, "stalls": {f"over_{k}us": v for k, v in self.stalls.items()},
                "sources": self.sources}


@dataclass
class Verification:
    """What ``verify`` measured, and its verdict against ``max_us``."""

    cpus: frozenset[int]
    seconds: float
    max_us: int
    as_is: bool
    results: list[CpuResult]
    tool: str

    @property
    def passed(self) -> bool:
        return all(r.max_us <= self.max_us for r in self.results)

    def to_dict(self) -> dict:
        return {"cpus": [r.to_dict() for r in self.results], "pass": self.passed, "max_us": self.max_us,
                "seconds": self.seconds, "as_is": self.as_is, "tool": self.tool}

    def lines(self, shown: int = 3) -> list[str]:
        """A table, a CPU a row, then the verdict."""
        out = [f"{'CPU':>4} {'max µs':>8} {'p99 µs':>7} {'p99.9 µs':>8} {'>10µs':>7} {'>100µs':>7} {'>1ms':>6}"
               "  what ran there (the most first)"]
        for r in self.results:
            what = ", ".join(_said(s) for s in r.sources[:shown]) or "nothing counted"
            if len(r.sources) > shown:
                what += f", +{len(r.sources) - shown} more"
            out.append(f"{r.cpu:>4} {r.max_us:>8} {r.p99_us:>7} {r.p999_us:>8} {r.stalls[10]:>7} {r.stalls[100]:>7} "
                       f"{r.stalls[1000]:>6}  {what}")
        worst = max(self.results, key=lambda r: r.max_us)
        verdict = "PASS" if self.passed else "FAIL"
        out.append(f"{verdict}: the largest gap is {worst.max_us} µs (CPU {worst.cpu}), the mark {self.max_us} µs, "
                   f"over {self.seconds:g} s {'as the CPUs are' if self.as_is else 'under a lease'}")
        return out


def _said(source: dict) -> str:
    if source["kind"] == "thread":
        return f"{source['name']}[{source['pid']}] {source['count']} ms"
    return f"{source['name']} ×{source['count']}"


def sources(census: noise.Census, cpu: int) -> list[dict]:
    """What ran on ``cpu`` during the census, the most first: IRQs (``irq``, by number and name), the
    architecture's interrupts (``interrupt``), softirqs (``softirq``), threads (``thread``: name, id
    and its run time in ms as ``count``)."""
    out = []
    for label, count in census.interrupts.get(cpu, {}).items():
        kind = "irq" if label.startswith("IRQ ") else "interrupt"
        out.append({"kind": kind, "name": label, "count": count})
    out += [{"kind": "softirq", "name": label, "count": count} for label, count in census.softirqs.get(cpu, {}).items()]
    for label, ms in census.tasks.get(cpu, {}).items():
        m = _TASK.match(label)
        name, tid = (m.group("comm"), int(m.group("tid"))) if m else (label, None)
        out.append({"kind": "thread", "name": name, "pid": tid, "count": round(ms)})
    rank = {"thread": 0, "irq": 1, "interrupt": 2, "softirq": 3}  # a thread's ms outweighs a count
    return sorted(out, key=lambda s: (rank[s["kind"]], -s["count"], s["name"]))


def main_cpu(cpus: frozenset[int], online: list[int]) -> int:
    """The CPU oslat's main thread waits on: the first online one not measured."""
    spare = [c for c in online if c not in cpus]
    if not spare:
        raise InvalidInput(f"CPUs {cpuset.format(cpus)} are every online CPU: oslat needs one more for its main "
                           "thread (and the host one for itself)")
    return spare[0]


def check(ctx: Context, cpus: frozenset[int]) -> int:
    """InvalidInput (one line) unless ``cpus`` are online and leave one for oslat's main thread:
    that one."""
    online = online_cpus(ctx.roots.sysfs)
    missing = cpus - frozenset(online)
    if missing:
        raise InvalidInput(f"CPUs {cpuset.format(missing)} are not online (online: {cpuset.format(online)})")
    return main_cpu(cpus, online)


def measure(ctx: Context, cpus: frozenset[int], seconds: float, max_us: int = DEFAULT_MAX_US, *,
            tool: str | None = None, as_is: bool = True, run: Callable | None = None) -> Verification:
    """oslat on ``cpus`` for ``seconds``, with the census around it (``run``: how oslat runs, for
    the tests: the arguments of ``oslat.run``)."""
    main = check(ctx, cpus)
    tool = tool or oslat.find()
    found: dict = {}
    with tempfile.TemporaryDirectory(prefix="vmtune-verify-") as work:
        out = os.path.join(work, "oslat.json")

        def spin(_seconds: float) -> None:  # the census's wait: oslat's run
            found.update((run or oslat.run)(tool, cpus, main, seconds, out))

        census = noise.take(ctx, cpus, seconds, sleep=spin)
    per = oslat.threads(found)
    results = []
    for cpu in sorted(cpus):
        if cpu not in per:
            raise RuntimeError(f"oslat measured no thread on CPU {cpu}")
        hist = oslat.histogram(per[cpu])
        results.append(CpuResult(cpu, int(per[cpu]["max"]), oslat.quantile(hist, 0.99), oslat.quantile(hist, 0.999),
                                 sum(hist.values()), {x: oslat.stalls(hist, x) for x in STALLS_US},
                                 sources(census, cpu)))
    return Verification(cpus, seconds, max_us, as_is, results, tool)


LEASE_NAME = "vmtune-verify"


@contextlib.contextmanager
def held(ctx: Context, cpus: frozenset[int], profile: str = "latency") -> Iterator[str]:
    """A lease of verify's own on ``cpus`` while the block runs (its key), released however it
    ends; InvalidInput (one line) when the hook's rules refuse it (CPUs a running latency domain
    holds, no CPU left for the host, a state it cannot read)."""
    from ..config import Isolate
    from ..hoststate import alive
    from ..hoststate.leases import LeaseRequest, Leases

    me = alive.process(os.getpid(), ctx.roots.proc or alive.PROC)
    key = f"{alive.OWN}{os.getpid()}"
    cfg = dataclasses.replace(ctx.cfg, hook=dataclasses.replace(ctx.cfg.hook, isolate_pinned=Isolate.ON))
    leases = Leases(cfg, ctx.roots)
    said = _Said()
    log = logging.getLogger("vmtune.hoststate")
    previous = signal.signal(signal.SIGTERM, _terminate)  # from before the lease: a SIGTERM anywhere releases it
    try:
        log.addHandler(said)
        try:
            refused = leases.lease(LeaseRequest(LEASE_NAME, key, profile, cpus), refuse_conflicts=True,
                                   top_up=False, owner=me)
        finally:
            log.removeHandler(said)
        if refused:
            raise InvalidInput(f"verify: no lease for CPUs {cpuset.format(cpus)}: {said.last or 'refused'}")
        yield key
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the release is not cut short
        try:
            leases.release(key, LEASE_NAME)  # none taken (refused, interrupted): nothing to give back
        finally:
            signal.signal(signal.SIGTERM, previous)


class _Said(logging.Handler):
    """The last error the hook's code logged (why a lease was refused)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.last = record.getMessage()


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)  # the lease's release runs (``held``'s finally)
