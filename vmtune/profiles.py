"""Tuning profiles: TOML data (vmtune/profiles/*.toml and the user's directory) as Profile."""

from __future__ import annotations

import functools
import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from . import schema
from .config import SmtPolicy, choice
from .errors import InvalidInput

USER_DIR = "/etc/vmtune/profiles"
DEFAULT = "balanced"
BUILTIN = ("balanced", "latency", "realtime", "throughput")


# passthrough: host-passthrough (KVM) or maximum (TCG); "host" is its older spelling; keep: <cpu> mode as it is
CpuMode = choice("CpuMode", "passthrough", "host", "keep", module=__name__)
# vCPUs on host CPUs of their own, on one node's shared CPUs, or floating
Pinning = choice("Pinning", "dedicated", "node", "float", module=__name__)
Scheduler = choice("Scheduler", "none", "fifo", "rr", module=__name__)
Pmu = choice("Pmu", "keep", "off", module=__name__)
Balloon = choice("Balloon", "keep", "none", module=__name__)
DiskCache = choice("DiskCache", "keep", "none", "writeback", "writethrough", "directsync", "unsafe",
                   module=__name__)
DiskIo = choice("DiskIo", "keep", "native", "threads", "io_uring", module=__name__)
Hpet = choice("Hpet", "keep", "off", module=__name__)
KvmClock = choice("KvmClock", "keep", "on", module=__name__)
# which cores of a hybrid host dedicated vCPUs take: performance cores only, or any (those first)
CpuKinds = choice("CpuKinds", "performance", "any", module=__name__)
# what a passthrough device's NUMA node means for the placement
DeviceLocality = choice("DeviceLocality", "required", "preferred", "ignore", module=__name__)
# whether a guest's boot disk moves to virtio with the others: auto, for a guest known to have virtio
# drivers of its own (Linux, the BSDs); virtio, for every guest but Windows (unknown ones too); keep.
# Windows keeps it unless --force-virtio (vmtune/xml/guestos.py, passes/disks.py).
BootDisk = choice("BootDisk", "auto", "virtio", "keep", module=__name__)
# the hook's frequency floor on a lease's CPUs ([hook] power_scope = "pinned"): scaling_min_freq as
# it is, raised to base_frequency, or to cpuinfo_max_freq
MinFreq = choice("MinFreq", "keep", "base", "max", module=__name__)
# a cpufreq policy over several CPUs: set only when leases hold all of them, or for any lease on one
SharedPolicy = choice("SharedPolicy", "skip", "set", module=__name__)
ENUMS = {e.__name__: e for e in (CpuMode, Pinning, SmtPolicy, Scheduler, Pmu, Balloon, DiskCache, DiskIo, Hpet,
                                 KvmClock, CpuKinds, DeviceLocality, BootDisk, MinFreq, SharedPolicy)}


@dataclass(frozen=True)
class Profile:
    """Everything a profile decides, flattened as ``section_key``."""

    name: str
    description: str = ""
    host_tuning: bool = False
    cpu_mode: CpuMode = CpuMode.KEEP
    cpu_pinning: Pinning = Pinning.FLOAT
    cpu_smt: SmtPolicy = SmtPolicy.THREADS
    cpu_scheduler: Scheduler = Scheduler.NONE
    cpu_priority: int = 1
    # the vCPUs that get ``cpu_scheduler`` when the domain has no real-time <vcpusched> of its own: a
    # libvirt cpulist of vCPU ids; one of exclusions only (``^0``) starts from every vCPU
    cpu_realtime_vcpus: str = "^0"
    cpu_pmu: Pmu = Pmu.KEEP
    cpu_kvm_hint_dedicated: bool = False
    cpu_kvm_poll_control: bool = False
    cpu_kinds: CpuKinds = CpuKinds.ANY
    device_locality: DeviceLocality = DeviceLocality.PREFERRED
    boot_disk: BootDisk = BootDisk.AUTO
    memory_hugepages: bool = False
    memory_nosharepages: bool = False
    memory_locked: bool = False
    memory_balloon: Balloon = Balloon.KEEP
    devices_virtio: bool = False
    devices_disk_cache: DiskCache = DiskCache.KEEP
    devices_disk_io: DiskIo = DiskIo.KEEP
    devices_iothreads: bool = False
    devices_vhost: bool = False
    devices_max_queues: int = 8
    guest_hpet: Hpet = Hpet.KEEP
    guest_kvmclock: KvmClock = KvmClock.KEEP
    guest_hyperv: bool = False
    # the hook's power settings of the lease's CPUs (vmtune/hoststate/power.py): None, the config's
    # [hook] max_cstate_latency_us
    power_max_cstate_latency_us: int | None = None
    power_min_freq: MinFreq = MinFreq.KEEP
    power_shared_policy: SharedPolicy = SharedPolicy.SKIP

    @property
    def dedicated(self) -> bool:
        """The one test of dedication: its vCPUs get host CPUs of their own."""
        return self.cpu_pinning == Pinning.DEDICATED

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def of(cls, name: str, values: dict) -> Profile:
        """The profile of flattened, schema-checked values: each enumeration as its StrEnum."""
        types = {f.name: f.type for f in fields(cls)}
        return cls(name=name, **{k: ENUMS[types[k]](v) if types[k] in ENUMS else v for k, v in values.items()})


def _flatten(data: dict) -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update({f"{key}_{k}": v for k, v in value.items()})
        elif key != "inherit":
            out[key] = value
    return out


_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiles")


@functools.lru_cache(maxsize=64)
def _builtin_text(name: str) -> str | None:
    """A built-in profile's text: the package's files do not change while vmtune runs."""
    try:
        with open(os.path.join(_HERE, f"{name}.toml"), encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


@functools.lru_cache(maxsize=64)
def _user_file(folder: str, name: str) -> str:
    """The path of profile ``name`` in the user's ``folder`` (a join, made once)."""
    return os.path.join(folder, f"{name}.toml")


def _source(name: str, user_dir: str | None, builtin_only: bool = False) -> tuple[str, str]:
    """(text, where) of profile ``name``: the user's directory first, then the built-ins."""
    if not name or "/" in name or "\0" in name or name.startswith("."):
        raise InvalidInput(f"bad profile name {name!r}")
    if not builtin_only:
        user = _user_file(user_dir or USER_DIR, name)
        try:
            if os.access(user, os.F_OK):  # most hosts have no profile of their own: no failed open a load
                with open(user, encoding="utf-8") as fh:
                    return fh.read(), user
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise InvalidInput(f"cannot read profile {user}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise InvalidInput(f"profile {user} is not UTF-8") from None
    text = _builtin_text(name)
    if text is not None:
        return text, f"vmtune/profiles/{name}.toml"
    raise InvalidInput(_unknown(name, None if builtin_only else (user_dir or USER_DIR)))


def _unknown(name: str, folder: str | None) -> str:
    """The one line of an unknown profile: the folders searched, and what each holds."""
    if folder is None:
        return f"unknown profile {name!r} (built-in: {', '.join(BUILTIN)})"
    try:
        found = sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".toml") and not f.startswith("."))
    except OSError as exc:
        held = f"not readable: {exc.strerror}" if not isinstance(exc, FileNotFoundError) else "does not exist"
    else:
        held = f"holds {', '.join(found)}" if found else "holds no profile"
    return (f"unknown profile {name!r}: not in {folder} ($VMTUNE_PROFILES, profiles_dir, else {USER_DIR}; it "
            f"{held}) nor built in ({', '.join(BUILTIN)})")


@functools.lru_cache(maxsize=64)
def _parse(text: str, where: str) -> dict:
    """The checked TOML of a profile. The file is read at every load (an edit shows at once); the
    parse and the schema check are remembered by its text, for they cost about a tenth of a
    rewrite. Callers never change what it returns."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{where}: {exc}") from None
    schema.check(data, "profile.schema.json", text, where)
    return data


def _chain(name: str, user_dir: str | None, seen: tuple[tuple[str, str], ...] = (),
           builtin_only: bool = False) -> tuple[tuple[str, str], ...]:
    """The (text, where) of profile ``name`` and of each profile it inherits from, in that order.
    Read at every load (an edit shows at once)."""
    text, where = _source(name, user_dir, builtin_only)
    if where in (w for _, w in seen):
        raise InvalidInput(f"profile {name!r} inherits from itself ({' -> '.join(_names(seen, name))})")
    parent = _parse(text, where).get("inherit")
    if not parent:
        return ((text, where),)
    # a user profile that overrides a built-in may extend it: ``inherit`` of its own name is the built-in
    own = parent == name
    if own and _builtin_text(name) is None:
        raise InvalidInput(f"profile {name!r} inherits from itself ({' -> '.join(_names(seen, name) + (name,))})")
    return ((text, where),) + _chain(parent, user_dir, seen + ((name, where),), builtin_only=own)


def _names(seen: tuple[tuple[str, str], ...], name: str) -> tuple[str, ...]:
    """The names of an inheritance chain so far, ``name`` last (for its error)."""
    return tuple(n for n, _ in seen) + (name,)


@functools.lru_cache(maxsize=64)
def _build(name: str, chain: tuple[tuple[str, str], ...]) -> Profile:
    """The Profile of a chain of texts (``_chain``), remembered by those texts: each inherits what
    the next one sets and overrides it."""
    values: dict = {}
    for text, where in reversed(chain):
        values.update(_flatten(_parse(text, where)))
    return Profile.of(name, values)


def load(name: str, user_dir: str | None = None) -> Profile:
    """Load profile ``name`` (the user's directory overrides a built-in of the same name)."""
    return _build(name, _chain(name, user_dir))


@functools.lru_cache(maxsize=None)
def builtin(name: str) -> Profile | None:
    """Built-in profile ``name`` as vmtune ships it (no user file read), or None for a name vmtune
    does not ship: what a profile's name alone says of a domain tagged with it (``holdings.dedicated``)."""
    return _build(name, _chain(name, None, builtin_only=True)) if name in BUILTIN else None


def host_tuning(name: str | None, user_dir: str | None = None) -> Profile | None:
    """The profile of a domain tagged ``name`` when it is a latency domain: its profile has
    ``host_tuning`` (the hook's leases, top-up and re-pin are for those only). Untagged: None."""
    prof = load(name, user_dir) if name else None
    return prof if prof is not None and prof.host_tuning else None


def tunes_host(name: str | None, user_dir: str | None = None) -> bool:
    """Whether a domain tagged ``name`` is a latency domain (``host_tuning``)."""
    return host_tuning(name, user_dir) is not None


def names(user_dir: str | None = None) -> list[str]:
    found = set(BUILTIN)
    folder = Path(user_dir or USER_DIR)
    if folder.is_dir():
        found.update(p.stem for p in folder.glob("*.toml") if not p.stem.startswith("."))
    return sorted(found)
