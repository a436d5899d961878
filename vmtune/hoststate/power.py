"""Power scoped to each lease (``[hook] power_scope = "pinned"``): each lease's CPUs, and only they,
get its profile's ``[power]`` settings, and each goes back when no lease holds the CPU any more.

Per CPU of a lease, in the order to apply them (restore walks them backwards):

1. EPP, then the governor, ``performance`` (tuning.py's order: intel_pstate refuses a
   non-performance EPP under the performance governor);
2. ``scaling_min_freq`` raised to the floor the profile's ``min_freq`` names: ``base_frequency``
   (``base``; a driver without one keeps the value, with a log line) or ``cpuinfo_max_freq``
   (``max``), at most the CPU's ``scaling_max_freq`` (the kernel clamps it there); never lowered;
3. the C-states whose exit latency is above the profile's ``max_cstate_latency_us`` (else the
   config's) disabled.

A cpufreq policy that spans several CPUs is one clock: its knobs are named by its first online CPU,
and set only when the leases hold every CPU of it, or the lease's profile says
``shared_policy = "set"``; a log line says which. A knob two leases want belongs to the earlier
(``since``), as C-states do under ``cstate_scope = "pinned"``. At every call, before anything is
completed, each record passes to the lease that wants that knob at that value now (``reconcile``: a
release leaves its CPUs to another lease; a reconnect keeps its lease's ``since``); the others are
written back, and what the leases still lack is completed (leases.py), so the last lease on a CPU
restores what the CPU had before the first.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import NamedTuple

from .. import cpuset, profiles
from ..config import HookSettings
from ..errors import InvalidInput
from ..host.sysfs import CPU_DIR, online_cpus
from ..profiles import MinFreq, SharedPolicy
from .document import Lease
from .engine import Knob, complete
from .kinds import CState, Cpufreq, read_file
from .record import Record
from .tuning import cpufreq_knobs, cstate_knobs, idle_states

log = logging.getLogger("vmtune.hoststate")

FLOOR_FILES = {MinFreq.BASE: "base_frequency", MinFreq.MAX: "cpuinfo_max_freq"}


class Power(NamedTuple):
    """A lease's power settings: its profile's ``[power]``, the config's C-state limit where the
    profile has none."""

    cap_us: int
    min_freq: MinFreq = MinFreq.KEEP
    shared: SharedPolicy = SharedPolicy.SKIP


def of(profile: str, settings: HookSettings, profiles_dir: str | None = None) -> Power | None:
    """The power settings of a lease of ``profile``; None for a profile that cannot be read now
    (``wanted`` says what its lease gets then)."""
    try:
        prof = profiles.load(profile, profiles_dir) if profile else None
    except InvalidInput as exc:
        log.warning("profile %s: %s", profile, exc)
        return None
    if prof is None:
        return Power(settings.max_cstate_latency_us)
    cap = prof.power_max_cstate_latency_us
    return Power(settings.max_cstate_latency_us if cap is None else cap, prof.power_min_freq, prof.power_shared_policy)


def policy_of(sysfs: str, cpu: int, online: frozenset[int]) -> frozenset[int]:
    """The online CPUs of ``cpu``'s cpufreq policy (``related_cpus``, else ``affected_cpus``; a
    driver that names neither: the CPU alone)."""
    for name in ("related_cpus", "affected_cpus"):
        text = read_file(sysfs, f"{CPU_DIR}/cpu{cpu}/cpufreq/{name}")
        if text:
            try:
                found = frozenset(int(n) for n in text.split())
            except ValueError:
                continue
            return (found & online) | {cpu}
    return frozenset({cpu})


def _floor(sysfs: str, cpu: int, how: MinFreq) -> list[Knob]:
    """``scaling_min_freq`` raised to the floor ``how`` names: listed where it is at most that high
    (at it: ``engine.complete`` skips it, and a record of it still holds), none where it is higher."""
    if how == MinFreq.KEEP:
        return []
    key = Cpufreq(cpu, "scaling_min_freq")
    now = read_file(sysfs, key.text)
    floor = read_file(sysfs, f"{CPU_DIR}/cpu{cpu}/cpufreq/{FLOOR_FILES[how]}")
    if now is None:
        return []
    if floor is None or not floor.isdigit():
        log.info("cpu%d: no %s: scaling_min_freq kept (min_freq = \"%s\")", cpu, FLOOR_FILES[how], how)
        return []
    top = read_file(sysfs, f"{CPU_DIR}/cpu{cpu}/cpufreq/scaling_max_freq")
    if top is not None and top.isdigit() and int(top) < int(floor):  # the kernel clamps the floor there
        floor = top
    return [Knob(key, floor)] if not now.isdigit() or int(now) <= int(floor) else []


def _cpufreq(sysfs: str, cpu: int, power: Power) -> list[Knob]:
    """EPP, governor (tuning.py's, as the host scope sets them) and floor of the policy named by ``cpu``."""
    if read_file(sysfs, Cpufreq(cpu, "scaling_governor").text) is None:
        return []
    return cpufreq_knobs(sysfs, cpu) + _floor(sysfs, cpu, power.min_freq)


def lease_knobs(sysfs: str, cpus: frozenset[int], power: Power, held: frozenset[int],
                online: frozenset[int]) -> tuple[list[Knob], list[Knob]]:
    """(cpufreq knobs, C-state knobs) of a lease on ``cpus`` with ``power``; ``held``: every CPU the
    leases hold (a shared policy is set when they hold all of it)."""
    freq: list[Knob] = []
    idle: list[Knob] = []
    named: set[int] = set()
    for cpu in sorted(cpus & online):
        policy = policy_of(sysfs, cpu, online)
        first = min(policy)
        if first not in named:
            named.add(first)
            if len(policy) == 1 or policy <= held or power.shared == SharedPolicy.SET:
                if len(policy) > 1:
                    log.info("cpu%d: its cpufreq policy spans CPUs %s: set (%s)", cpu, cpuset.format(policy),
                             "the leases hold them all" if policy <= held else "shared_policy = \"set\"")
                freq += _cpufreq(sysfs, first, power)
            else:
                log.info("cpu%d: its cpufreq policy spans CPUs %s, not all held: its governor, EPP and floor are "
                         "left alone (shared_policy = \"set\" sets them)", cpu, cpuset.format(policy))
        idle += cstate_knobs(sysfs, [cpu], power.cap_us)
    return freq, idle


def _ordered(leases: Mapping[str, Lease]) -> list[tuple[str, Lease]]:
    return sorted(leases.items(), key=lambda kv: (kv[1].since, kv[0]))


def wanted(sysfs: str, leases: Mapping[str, Lease], settings: HookSettings,
           profiles_dir: str | None = None) -> dict[str, tuple[list[Knob], list[Knob]]]:
    """Per lease key, earliest first: the (cpufreq, C-state) knobs it owns. A CPU two leases hold is
    the earlier one's, all of it; so is a shared policy's clock."""
    online = frozenset(online_cpus(sysfs))
    held = frozenset().union(*(lease.cpus for lease in leases.values()))
    powers: dict[str, Power] = {}
    owned: frozenset[int] = frozenset()
    taken: set = set()
    out: dict[str, tuple[list[Knob], list[Knob]]] = {}
    for key, lease in _ordered(leases):
        if lease.profile not in powers:
            powers[lease.profile] = of(lease.profile, settings, profiles_dir)
        power = powers[lease.profile]
        if power is None and (lease.power or lease.cstates):
            # its profile was removed or broken since the lease took its CPUs: they stay as they are
            # (a running domain's CPUs change at its next start, not when a file goes)
            log.warning("the lease of %s keeps what its CPUs run at: its profile %s cannot be read", lease.name,
                        lease.profile)
            freq, idle = [Knob(r.key, r.after) for r in lease.power], [Knob(r.key, r.after) for r in lease.cstates]
        else:  # (a new lease of a profile that cannot be read: the config's C-state limit only)
            freq, idle = lease_knobs(sysfs, lease.cpus - owned, power or Power(settings.max_cstate_latency_us),
                                     held, online)
        owned |= lease.cpus
        freq = [k for k in freq if k.key not in taken]
        taken.update(k.key for k in freq)
        out[key] = (freq, idle)
    return out


def for_leases(roots, leases: Mapping[str, Lease], settings: HookSettings, profiles_dir: str | None = None,
               ) -> tuple[dict[str, list[Record]], dict[str, list[Record]], list[Knob]]:
    """What is missing for every lease's CPUs to be as its power settings say, as ``engine.complete``
    sees it against the records of all leases: (per lease key, journal records of cpufreq knobs
    nobody recorded; the same of C-states; recorded knobs found back at their original value)."""
    recorded = [r for lease in leases.values() for r in lease.power + lease.cstates]
    power_by: dict[str, list[Record]] = {}
    cstates_by: dict[str, list[Record]] = {}
    again: list[Knob] = []
    for key, (freq, idle) in wanted(roots.sysfs, leases, settings, profiles_dir).items():
        for knobs, by in ((freq, power_by), (idle, cstates_by)):
            fresh, back = complete(roots, recorded, knobs)
            if fresh:
                by[key] = fresh
            again += back
    return power_by, cstates_by, again


def reconcile(leases: Mapping[str, Lease], sysfs: str, settings: HookSettings, profiles_dir: str | None = None,
              loose: list[tuple[str, Record]] = ()) -> list[Record]:
    """Every record of the leases (and ``loose`` ones: (group, record) of a lease that goes) to the
    lease that wants its knob at its value now (``wanted``: a release leaves its CPUs to another lease,
    a lease's profile may have changed), the value staying; the others are returned, to be written
    back (``engine.restore``, newest last). What the leases then lack, ``for_leases`` finds."""
    owner = {knob.key: (key, knob.want)
             for key, (freq, idle) in wanted(sysfs, leases, settings, profiles_dir).items() for knob in freq + idle}
    pool = [(group, rec) for lease in leases.values() for group in ("power", "cstates")
            for rec in getattr(lease, group)]
    pool += list(loose)
    for lease in leases.values():
        lease.power, lease.cstates = [], []
    back: list[Record] = []
    for group, rec in pool:
        heir = owner.get(rec.key)
        if heir is None or heir[1] != rec.after:
            back.append(rec)
        else:
            getattr(leases[heir[0]], group).append(rec)
    return back


# -- the dedicated CPUs no lease holds ([hook] idle_dedicated = "powersave") -----------------------

POWERSAVE = "powersave"


def idle_cpus(sysfs: str, dedicated: frozenset[int] | None, leases: Mapping[str, Lease]) -> frozenset[int]:
    """The online CPUs of ``dedicated`` that no lease holds."""
    if not dedicated or not leases:
        return frozenset()
    held = frozenset().union(*(lease.cpus for lease in leases.values()))
    return (dedicated & frozenset(online_cpus(sysfs))) - held


def idle_knobs(sysfs: str, cpus: frozenset[int]) -> list[Knob]:
    """What the idle dedicated ``cpus`` run at: the powersave governor (a policy that spans other
    CPUs only when they are all idle too), and every idle state enabled. Each knob is listed
    whatever its value now (``engine.complete`` skips those at it): the list also says which
    records still hold."""
    online = frozenset(online_cpus(sysfs))
    out: list[Knob] = []
    named: set[int] = set()
    for cpu in sorted(cpus & online):
        policy = policy_of(sysfs, cpu, online)
        first = min(policy)
        governor = Cpufreq(first, "scaling_governor")
        available = read_file(sysfs, f"{CPU_DIR}/cpu{first}/cpufreq/scaling_available_governors") or ""
        if first not in named and policy <= cpus and POWERSAVE in available.split():
            named.add(first)
            out.append(Knob(governor, POWERSAVE))
        out += [Knob(CState(cpu, state), "0") for state in idle_states(sysfs, cpu)
                if read_file(sysfs, CState(cpu, state).text) is not None]
    return out


# -- what a CPU runs at now (vmtune status, the doctor) ---------------------------------------------

def owners(leases: Mapping[str, Lease]) -> dict[int, Lease]:
    """Each held CPU -> the lease that owns it: the earlier (``since``) of two."""
    out: dict[int, Lease] = {}
    for _, lease in _ordered(leases):
        for cpu in lease.cpus:
            out.setdefault(cpu, lease)
    return out


def held(sysfs: str, leases: Mapping[str, Lease]) -> list[dict]:
    """Each held CPU as ``vmtune status``, ``vmtune map`` and the doctor show it: what it runs at
    now (``CpuPower.to_dict``), with ``lease`` (its owner's name) and ``text`` (``CpuPower.text``)."""
    owner = owners(leases)
    return [{**(found := cpu_power(sysfs, cpu)).to_dict(), "lease": owner[cpu].name, "text": found.text()}
            for cpu in sorted(owner)]


class CpuPower(NamedTuple):
    """A CPU's power state as sysfs reads now: its governor, EPP and frequency floor (None: not
    there), and its idle states left enabled (name, exit latency in µs)."""

    cpu: int
    governor: str | None
    epp: str | None
    min_khz: int | None
    idle: tuple[tuple[str, int], ...]

    def text(self) -> str:
        """``performance, EPP performance, floor 2.1 GHz, idle down to C1E (10 µs)``."""
        parts = [self.governor or "no cpufreq"]
        if self.epp:
            parts.append(f"EPP {self.epp}")
        if self.min_khz:
            parts.append(f"floor {self.min_khz / 1e6:g} GHz")
        if self.idle:
            name, latency = max(self.idle, key=lambda s: s[1])
            parts.append(f"idle down to {name} ({latency} µs)")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "governor": self.governor, "epp": self.epp, "min_freq_khz": self.min_khz,
                "idle_states": [{"name": n, "latency_us": lat} for n, lat in self.idle]}


def _policy_dir(sysfs: str, cpu: int) -> str:
    """``cpu``'s cpufreq folder: ``cpuN/cpufreq`` (the kernel's link to its policy), else the policy
    that names it (a tree captured without the links)."""
    mine = f"{CPU_DIR}/cpu{cpu}/cpufreq"
    if os.path.isdir(os.path.join(sysfs, mine)):
        return mine
    try:
        names = sorted(n for n in os.listdir(os.path.join(sysfs, CPU_DIR, "cpufreq")) if n.startswith("policy"))
    except OSError:
        return mine
    for name in names:
        folder = f"{CPU_DIR}/cpufreq/{name}"
        cpus = read_file(sysfs, f"{folder}/related_cpus") or read_file(sysfs, f"{folder}/affected_cpus") or ""
        if str(cpu) in cpus.split():
            return folder
    return mine


def cpu_power(sysfs: str, cpu: int) -> CpuPower:
    """What ``cpu`` runs at now."""
    freq = _policy_dir(sysfs, cpu)
    low = read_file(sysfs, f"{freq}/scaling_min_freq")
    idle = []
    for state in idle_states(sysfs, cpu):
        base = f"{CPU_DIR}/cpu{cpu}/cpuidle/state{state}"
        off = read_file(sysfs, f"{base}/disable")
        latency = read_file(sysfs, f"{base}/latency") or ""
        if off == "0" and latency.isdigit():
            idle.append((read_file(sysfs, f"{base}/name") or f"state{state}", int(latency)))
    return CpuPower(cpu, read_file(sysfs, f"{freq}/scaling_governor"),
                    read_file(sysfs, f"{freq}/energy_performance_preference"),
                    int(low) if low and low.isdigit() else None, tuple(idle))
