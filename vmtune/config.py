"""The host's choices: /etc/vmtune/vmtune.toml (or --config, or $VMTUNE_CONFIG, which the edges
pass as ``path``).

Every option is declared once, with its type and default: ``Config`` for the top level,
``HookSettings`` for ``[hook]`` (tuned's ``_get_config_options`` idea). A value that is one of a
few words is a ``StrEnum``, so that code compares with ``CStateScope.PINNED`` and never with a
bare string. The schema (schemas/config.schema.json) checks the file first, with line numbers.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from enum import StrEnum

from . import cpuset, schema
from .errors import InvalidInput

DEFAULT_PATH = "/etc/vmtune/vmtune.toml"


def choice(name: str, *values: str, module: str = __name__) -> type[StrEnum]:
    """A StrEnum of ``values``, each a member named in capitals (``top-up``: ``TOP_UP``): the few
    words an option may be, declared once. ``module``: the one that defines it (for pickle)."""
    return StrEnum(name, {v.upper().replace("-", "_"): v for v in values}, module=module)


SmtPolicy = choice("SmtPolicy", "threads", "isolate")  # the guest's sibling threads; one vCPU per core
PlacementPolicy = choice("PlacementPolicy", "spread", "pack")  # most free dedicated CPUs; fewest
OnConflict = choice("OnConflict", "refuse", "warn")
CStateScope = choice("CStateScope", "host", "pinned")  # every online CPU; the leases' pinned CPUs
KsmPolicy = choice("KsmPolicy", "off", "keep")
Isolate = choice("Isolate", "on", "off")
# the isolation's method: today's (tasks, IRQs, masks, cgroups); none; today's plus an isolated
# cpuset partition of each started domain's vCPU groups (cgroup v2, Linux 6.7+; else today's, with
# a warning); auto (the default): partition where the kernel makes them, else on, silently
# (BENCHMARKS.md: the partition takes the scheduler's softirqs off the held CPU)
IsolateMethod = choice("IsolateMethod", "on", "off", "partition", "auto")
HugepagePolicy = choice("HugepagePolicy", "top-up", "off")
# where the hook's power settings go: every online CPU (governor, EPP; C-states as cstate_scope says);
# each lease's own CPUs, with its profile's [power] values (vmtune/hoststate/power.py)
PowerScope = choice("PowerScope", "host", "pinned")
Uncore = choice("Uncore", "keep", "max")  # Intel's uncore frequency while latency domains run
# the config's dedicated_cpus that no lease holds, while latency domains run (power scope pinned)
IdleDedicated = choice("IdleDedicated", "keep", "powersave")



@dataclass
class HookSettings:
    """``[hook]``: what the libvirt hook does while latency domains run."""

    on_conflict: OnConflict = OnConflict.REFUSE
    max_cstate_latency_us: int = 10
    cstate_scope: CStateScope = CStateScope.HOST
    power_scope: PowerScope = PowerScope.HOST
    uncore: Uncore = Uncore.KEEP
    idle_dedicated: IdleDedicated = IdleDedicated.KEEP
    ksm: KsmPolicy = KsmPolicy.OFF
    lock_timeout_s: float = 30.0
    isolate: IsolateMethod = IsolateMethod.AUTO
    hugepages: HugepagePolicy = HugepagePolicy.TOP_UP
    # what the isolation does beyond tasks, IRQs, the two global masks and cgroups (issue 17)
    isolate_timers: Isolate = Isolate.ON  # kernel.timer_migration = 0
    isolate_watchdog: Isolate = Isolate.ON  # kernel.watchdog_cpumask less the isolated CPUs
    isolate_vmstat: Isolate = Isolate.ON  # vm.stat_interval = 10
    isolate_workqueues: Isolate = Isolate.ON  # /sys/bus/workqueue/devices/*/cpumask less them
    isolate_irqbalance: Isolate = Isolate.ON  # a running irqbalance bans them too
    # a task pinned to isolated CPUs only moves to the host's CPUs too (vmtune verify's own lease)
    isolate_pinned: Isolate = Isolate.OFF

    def extras(self, options: dict[str, str]) -> frozenset[str]:
        """The names of the extra isolation items that are on. Each kind declares its extras and the
        option of this class that turns each on (hoststate/kinds, ``Kind.extras``); the caller passes
        them all, ``kinds.extra_options()``, so that config imports nothing above it."""
        return frozenset(name for name, option in options.items() if getattr(self, option) == Isolate.ON)

    @classmethod
    def of(cls, table: dict) -> HookSettings:
        """The settings of a ``[hook]`` table the schema passed: each value as its field's type."""
        types = {f.name: f.type for f in fields(cls)}
        convert = {"int": int, "float": float, **{t.__name__: t for t in (OnConflict, CStateScope, KsmPolicy,
                                                                          Isolate, IsolateMethod, HugepagePolicy,
                                                                          PowerScope, Uncore, IdleDedicated)}}
        return cls(**{k: convert[types[k]](v) for k, v in table.items()})


@dataclass(frozen=True)
class Config:
    reserved_cpus: frozenset[int] | None = None  # None: Host.default_reserved() (Host.reserved applies it)
    # a hybrid host's efficiency cores, where the host cannot say (capabilities XML): None: as read
    efficiency_cpus: frozenset[int] | None = None
    # the host CPUs meant for latency domains' vCPUs ([hook] idle_dedicated): None, none named
    dedicated_cpus: frozenset[int] | None = None
    placement: PlacementPolicy = PlacementPolicy.SPREAD
    profiles_dir: str | None = None
    smt: dict[str, SmtPolicy] = field(default_factory=dict)
    hook: HookSettings = field(default_factory=HookSettings)
    source: str | None = None
    # the libvirt and QEMU the outputs are for, offline (a live command asks the connection): None,
    # the conservative form (passes/iothreads.py)
    libvirt_version: tuple[int, ...] | None = None
    qemu_version: tuple[int, ...] | None = None

    __hash__ = object.__hash__


def load(path: str | None = None, profiles_dir: str | None = None) -> Config:
    """Read the config at ``path`` (None: ``DEFAULT_PATH``, which may be missing: the defaults); a
    malformed one is an error naming the line. ``profiles_dir``: where user profiles are when the
    file does not say (``$VMTUNE_PROFILES``, which the edges pass)."""
    where = path or DEFAULT_PATH
    try:
        with open(where, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        if path:
            raise InvalidInput(f"config file {where} does not exist") from None
        return Config(profiles_dir=profiles_dir)
    except OSError as exc:
        raise InvalidInput(f"cannot read config {where}: {exc.strerror}") from None
    text = raw.decode("utf-8", errors="replace")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{where}: {exc}") from None
    schema.check(data, "config.schema.json", text, where)
    reserved = data.get("reserved_cpus")
    try:
        reserved_cpus = cpuset.parse(reserved) if reserved is not None else None
    except InvalidInput as exc:
        line = schema.line_of(text, "reserved_cpus")
        raise InvalidInput(f"{where}:{line}: reserved_cpus: {exc}" if line else f"{where}: {exc}") from None
    efficiency_cpus, dedicated_cpus = (_cpus(data, text, where, key) for key in ("efficiency_cpus", "dedicated_cpus"))
    return Config(
        reserved_cpus=reserved_cpus,
        efficiency_cpus=efficiency_cpus,
        dedicated_cpus=dedicated_cpus,
        placement=PlacementPolicy(data.get("placement", Config.placement)),
        profiles_dir=data.get("profiles_dir") or profiles_dir,
        smt={name: SmtPolicy(v) for name, v in data.get("smt", {}).items()},
        hook=HookSettings.of(data.get("hook", {})),
        source=where,
        libvirt_version=version(data.get("libvirt_version")),
        qemu_version=version(data.get("qemu_version")),
    )


def version(text: str | None) -> tuple[int, ...] | None:
    """``"10.0"`` -> (10, 0); None stays None (the schema checked the form)."""
    return None if text is None else tuple(int(part) for part in text.split("."))


def _cpus(data: dict, text: str, where: str, key: str) -> frozenset[int] | None:
    """The CPU list of ``key`` (None where the file does not give it); an error naming its line."""
    value = data.get(key)
    try:
        return cpuset.parse(value) if value is not None else None
    except InvalidInput as exc:
        line = schema.line_of(text, key)
        raise InvalidInput(f"{where}:{line}: {key}: {exc}" if line else f"{where}: {exc}") from None
