"""The host's low-latency state while latency VMs run: which knobs, and the value each gets.

Per online CPU, its ``energy_performance_preference`` then its governor go to ``performance``
(EPP first: intel_pstate refuses a non-performance EPP under the performance governor, so the
governor is set last and, restore walking backwards, restored first); the idle states whose exit
latency is above ``max_cstate_latency_us`` are disabled; KSM stops (unless ``ksm = "keep"``).

With ``cstate_scope = "pinned"`` the C-states are each lease's own (``cstates_for_leases``): a CPU
two leases pin goes to the earlier one, which is also the one that restores it last. With
``power_scope = "pinned"`` the governor, EPP and C-states are each lease's, by its profile
(power.py), and only KSM and the uncore floor (``uncore = "max"``) stay host-wide. The engine
(engine.py) applies, verifies and restores what this module asks for.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping

from ..config import HookSettings, KsmPolicy, Uncore
from ..host.sysfs import CPU_DIR, online_cpus
from .engine import Knob, complete
from .kinds import CState, Cpufreq, Ksm, UncoreMin, read_file
from .kinds.files import UNCORE_DIR
from .document import Lease
from .record import Record

log = logging.getLogger("vmtune.hoststate")

PERFORMANCE = "performance"
DEFAULT_MAX_CSTATE_LATENCY_US = HookSettings.max_cstate_latency_us


def cpufreq_knobs(sysfs: str, cpu: int) -> list[Knob]:
    """EPP then governor ``performance`` on ``cpu``'s cpufreq (none without one, or without the
    performance governor: a warning)."""
    governor = Cpufreq(cpu, "scaling_governor")
    if read_file(sysfs, governor.text) is None:
        return []
    available = read_file(sysfs, f"{CPU_DIR}/cpu{cpu}/cpufreq/scaling_available_governors")
    if available is not None and PERFORMANCE not in available.split():
        log.warning("cpu%d: no %s governor (available: %s); cpufreq left alone", cpu, PERFORMANCE, available)
        return []
    epp = Cpufreq(cpu, "energy_performance_preference")
    first = [Knob(epp, PERFORMANCE)] if read_file(sysfs, epp.text) is not None else []
    return first + [Knob(governor, PERFORMANCE)]


def idle_states(sysfs: str, cpu: int) -> list[int]:
    """The numbers of ``cpu``'s idle states (``cpuidle/stateN``), in order; none without cpuidle."""
    try:
        names = os.listdir(os.path.join(sysfs, CPU_DIR, f"cpu{cpu}", "cpuidle"))
    except OSError:
        return []
    return sorted(int(n[5:]) for n in names if n.startswith("state") and n[5:].isascii() and n[5:].isdigit())


def _cpuidle(sysfs: str, cpu: int, max_latency_us: int) -> list[Knob]:
    knobs = []
    for state in idle_states(sysfs, cpu):
        key = CState(cpu, state)
        try:
            latency = int(read_file(sysfs, f"{CPU_DIR}/cpu{cpu}/cpuidle/state{state}/latency") or "")
        except ValueError:
            continue
        if latency > max_latency_us and read_file(sysfs, key.text) is not None:
            knobs.append(Knob(key, "1"))
    return knobs


def knobs(sysfs: str, max_cstate_latency_us: int = DEFAULT_MAX_CSTATE_LATENCY_US, ksm: KsmPolicy = KsmPolicy.OFF,
          cpus: list[int] | None = None, cstates: bool = True, cpufreq: bool = True,
          uncore: Uncore = Uncore.KEEP) -> list[Knob]:
    """The host's low-latency state, in the order to apply it: per CPU EPP then governor (unless
    ``cpufreq`` is false: power scope ``pinned`` leaves them to power.py), the C-states deeper than
    ``max_cstate_latency_us`` (unless ``cstates`` is false: scope ``pinned`` leaves them to
    ``cstate_knobs`` or power.py), then KSM off (unless ``ksm`` is ``KsmPolicy.KEEP``), then with
    ``uncore = "max"`` each uncore frequency floor at its ceiling."""
    targets = online_cpus(sysfs) if cpus is None else sorted(cpus)
    out: list[Knob] = []
    if cpufreq:
        for cpu in targets:
            out += cpufreq_knobs(sysfs, cpu)
    if cstates:
        out += cstate_knobs(sysfs, targets, max_cstate_latency_us)
    if ksm == KsmPolicy.OFF and read_file(sysfs, Ksm().text) is not None:
        out.append(Knob(Ksm(), "0"))
    if uncore == Uncore.MAX:
        out += uncore_knobs(sysfs)
    return out


def uncore_knobs(sysfs: str) -> list[Knob]:
    """Each package and die's uncore frequency floor (``min_freq_khz``) at its ceiling
    (``max_freq_khz``): the intel-uncore-frequency driver's folders, none where it is not loaded."""
    try:
        names = sorted(os.listdir(os.path.join(sysfs, UNCORE_DIR)))
    except OSError:
        return []
    out = []
    for name in names:
        key = UncoreMin(name)
        now, top = read_file(sysfs, key.text), read_file(sysfs, f"{UNCORE_DIR}/{name}/max_freq_khz")
        if now is not None and top is not None and top.isdigit():
            out.append(Knob(key, top))
    return out


def cstate_knobs(sysfs: str, cpus: Iterable[int], max_cstate_latency_us: int = DEFAULT_MAX_CSTATE_LATENCY_US,
                 ) -> list[Knob]:
    """The C-states deeper than ``max_cstate_latency_us`` on those of ``cpus`` that are online."""
    online = set(online_cpus(sysfs))
    out: list[Knob] = []
    for cpu in sorted(set(cpus) & online):
        out += _cpuidle(sysfs, cpu, max_cstate_latency_us)
    return out


def cstates_for_leases(roots, leases: Mapping[str, Lease], max_latency_us: int = DEFAULT_MAX_CSTATE_LATENCY_US,
                       ) -> tuple[dict[str, list[Record]], list[Knob]]:
    """Scope ``pinned``: what is missing for every lease's CPUs to have their deep C-states off, as
    ``engine.complete`` sees it against the C-state records of all leases: (per lease key, journal
    records for its CPUs' knobs nobody recorded; the recorded knobs found back at their original
    value). A CPU two leases pin goes to the earlier one, which is also the one that restores it last."""
    recorded = [r for lease in leases.values() for r in lease.cstates]
    taken: set = set()
    fresh_by: dict[str, list[Record]] = {}
    again: list[Knob] = []
    for key, lease in sorted(leases.items(), key=lambda kv: (kv[1].since, kv[0])):
        todo = [k for k in cstate_knobs(roots.sysfs, lease.cpus, max_latency_us) if k.key not in taken]
        taken.update(k.key for k in todo)
        fresh, back = complete(roots, recorded, todo)
        if fresh:
            fresh_by[key] = fresh
        again += back
    return fresh_by, again
