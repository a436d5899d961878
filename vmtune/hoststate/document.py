"""The hook's state, typed: ``read_state`` is the one reader and validator, ``State.to_json`` the writer.

``state.json`` (statedir.StateDir commits it; ``baseline.json`` beside it is a copy of the last
completed state, committed separately)::

    {"version": 2,
     "leases": {"<uuid>": {"name": "db1", "profile": "latency", "cpus": "2-3", "since": 1700000000.0,
                           "dedicated": true,
                           "hugepages": {"0:2048": {"need": 512, "added": 100, "raising": {"from": 0, "to": 100}}},
                           "cstates": [KNOB, ...],
                           "qemu": {"pid": 4321, "start": 123456}, "partition": "2-3",
                           "power": [KNOB, ...]}},
     "baseline": [KNOB, ...] | null,
     "isolation": {"cpus": "2-3", "irqs": "0-40",
                   "pairs": [{"kind": "task", "mask": "0-1", "removed": "2-3", "since": 345.6}],
                   "records": {"task:1234": {"before": "0-3", "after": "0-1", "label": "sshd[1234]",
                                             "ident": "4242"}}} | null,
     "unrestored": [KNOB, ...],
     "idle": [KNOB, ...]}
    KNOB = {"path": "devices/system/cpu/cpu0/cpufreq/scaling_governor", "before": "powersave",
            "after": "performance", "pending": true}

Every record is a ``record.Record``; the document keeps them in three sections, each for the kinds
that declare it (kinds/): ``knob`` records (the baseline, a lease's C-states, ``unrestored``) are
named by their path, ``isolation`` records by their key, and a ``pool``'s journal step is
``raising`` or ``lowering``. A record's journal mark is ``pending`` (a knob), ``from`` (an
isolation record, when the value found was not the original) or the step itself (a pool).

The reader is built from the kinds: a record's name must be a key of one of its section's kinds
(``Kind.parse_key``), and its values values of that kind (``Kind.check``: a CPU list of the host's
CPUs, a hex mask, a page count, or any text for a sysfs value). Anything else is damage
(``Damaged``, one line naming the field): a value of the wrong type (``0`` is not an empty dict,
nor ``""`` an empty list), a number that is not finite, a CPU beyond the host's last one, more
pairs than the hook keeps, a knob path that resolves outside the sysfs root. In a version-2 file a
missing key is damage too; a version-1 file (which may lack keys) reads with the defaults. A lease's
``qemu`` (its QEMU's pid and start time, recorded once the domain has started: alive.py) and
``partition`` (the CPUs its vCPU groups hold as isolated cpuset partitions) and ``power`` (its own
cpufreq records under ``power_scope = "pinned"``, hoststate/power.py) are the optional keys: a
lease of a domain still starting, or one written by an older hook, has none of them. So is the
document's ``idle`` (the dedicated CPUs no lease holds, saving power: ``[hook] idle_dedicated``). The
hook refuses to tune through a damaged state; it never starts from empty over one.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from .. import cpuset
from ..errors import InvalidInput
from .alive import Qemu
from .kinds import KINDS, Key, Pool, parse_key
from .record import Record

VERSION = 2  # 2: every key is written, and a missing one is damage (1: read as before)
VERSIONS = (1, 2)
MAX_PAIRS = 64
MAX_IRQS = 1 << 20  # IRQ numbers below it
NOT_A_KEY = {"knob": "a sysfs path vmtune writes", "isolation": "an item key the isolation writes",
             "pool": "node:size"}


class Damaged(Exception):
    """The state cannot be trusted: one line that says which field and why. ``advice``: what to do,
    when it is not the usual (``vmtune hook reap`` goes on from the last good copy)."""

    def __init__(self, message: str, advice: str | None = None):
        super().__init__(message)
        self.advice = advice


# -- the shape ------------------------------------------------------------------------------------

@dataclass
class PoolShare:
    """A lease's share of one hugepage pool: the pages it needs, the pages its prepare added, and
    the change under way (``steps``: journal records of ``nr_hugepages``, from ``before`` to ``after``)."""

    need: int = 0
    added: int = 0
    steps: list[Record] = field(default_factory=list)

    def to_json(self, key: Pool) -> dict:
        out: dict = {"need": self.need, "added": self.added}
        for step in self.steps:
            out["raising" if int(step.after) >= int(step.before) else "lowering"] = {
                "from": int(step.before), "to": int(step.after)}
        return out


def pool_step(key: Pool, start: int, to: int) -> Record:
    """The journal record of a change of pool ``key`` from ``start`` to ``to`` pages."""
    return Record(key, str(start), str(to), str(start), key.describe())


@dataclass
class Lease:
    name: str
    profile: str = ""
    cpus: frozenset[int] = frozenset()
    since: float = 0.0
    hugepages: dict[Pool, PoolShare] = field(default_factory=dict)
    cstates: list[Record] = field(default_factory=list)
    # its profile pins vCPUs to CPUs of their own (latency, realtime): they are isolated and may not
    # overlap another dedicated lease's. False: pinned to shared CPUs (e.g. pinning = "node")
    dedicated: bool = True
    qemu: Qemu | None = None  # its QEMU, once started (alive.py): from then on it alone says it runs
    # the CPUs its vCPU groups hold as isolated cpuset partitions ([hook] isolate = "partition",
    # once started and read back from the kernel; kinds/partition.py); empty: today's isolation only
    partition: frozenset[int] = frozenset()
    # its own cpufreq records (governor, EPP, floor) under [hook] power_scope = "pinned" (power.py)
    power: list[Record] = field(default_factory=list)

    def to_json(self) -> dict:
        out = {"name": self.name, "profile": self.profile, "cpus": cpuset.format(self.cpus), "since": self.since,
               "dedicated": self.dedicated,
               "hugepages": {k.text: share.to_json(k) for k, share in sorted(self.hugepages.items())},
               "cstates": [knob_json(r) for r in self.cstates]}
        if self.qemu is not None:
            out["qemu"] = {"pid": self.qemu.pid, "start": self.qemu.start}
        if self.partition:
            out["partition"] = cpuset.format(self.partition)
        if self.power:
            out["power"] = [knob_json(r) for r in self.power]
        return out


def knob_json(rec: Record) -> dict:
    out: dict = {"path": rec.key.text, "before": rec.before, "after": rec.after}
    if rec.pending:
        out["pending"] = True
    return out


def isolation_json(rec: Record) -> dict:
    out: dict = {"before": rec.before, "after": rec.after, "label": rec.label}
    if rec.key.ident:
        out["ident"] = rec.key.ident
    if rec.mark is not None and rec.mark.strip() != rec.before.strip():
        out["from"] = rec.mark
    return out


class Pair(NamedTuple):
    """A mask the isolation imposed on a kind whose new items inherit it (``kind``: task or irq),
    and the CPUs it removed, since when."""

    kind: str
    mask: frozenset[int]
    removed: frozenset[int]
    since: float

    def to_json(self) -> dict:
        return {"kind": self.kind, "mask": cpuset.format(self.mask), "removed": cpuset.format(self.removed),
                "since": self.since}


@dataclass
class Isolation:
    cpus: frozenset[int] = frozenset()
    irqs: frozenset[int] = frozenset()  # the IRQs that existed when the isolation began
    pairs: list[Pair] = field(default_factory=list)
    records: dict[Key, Record] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"cpus": cpuset.format(self.cpus), "irqs": cpuset.format(self.irqs),
                "pairs": [p.to_json() for p in self.pairs],
                "records": {r.key.text: isolation_json(r) for r in self.records.values()}}


@dataclass
class State:
    leases: dict[str, Lease] = field(default_factory=dict)
    baseline: list[Record] | None = None
    isolation: Isolation | None = None
    unrestored: list[Record] = field(default_factory=list)  # restores that failed: tried again
    # the dedicated CPUs no lease holds, saving power meanwhile ([hook] idle_dedicated, power.py)
    idle: list[Record] = field(default_factory=list)

    def to_json(self) -> dict:
        out = {"version": VERSION, "leases": {k: lease.to_json() for k, lease in self.leases.items()},
               "baseline": None if self.baseline is None else [knob_json(r) for r in self.baseline],
               "isolation": None if self.isolation is None else self.isolation.to_json(),
               "unrestored": [knob_json(r) for r in self.unrestored]}
        if self.idle:
            out["idle"] = [knob_json(r) for r in self.idle]
        return out

    @property
    def empty(self) -> bool:
        return (not self.leases and self.baseline is None and self.isolation is None and not self.unrestored
                and not self.idle)

    def find(self, uuid: str | None, name: str | None) -> str | None:
        """The key of the lease for this domain: a domain with a UUID by UUID only; one without (or
        whose XML cannot be read) by name, among the leases kept by name (``name:NAME``) only."""
        if uuid and not uuid.startswith("name:"):
            return uuid if uuid in self.leases else None
        key = uuid or f"name:{name}"
        return key if name and key in self.leases else None

    def named(self, name: str) -> list[str]:
        """The keys of the leases of domains called ``name``."""
        return sorted(key for key, lease in self.leases.items() if lease.name == name)

    def add(self, uuid: str, name: str, profile: str, cpus: frozenset[int], dedicated: bool = True,
            running: bool = False) -> Lease:
        """Record (or renew) the lease; a renewed lease keeps the records of what it changed, and with
        ``running`` (a reconnect: the domain never stopped) its ``since`` too, so that it stays the
        earlier of two leases on a CPU (power.py) after libvirtd comes back."""
        old = self.leases.get(uuid)
        lease = Lease(name, profile, frozenset(cpus), time.time(), dedicated=dedicated)
        if old is not None:
            lease.hugepages, lease.cstates, lease.power = old.hugepages, old.cstates, old.power
            if running:
                lease.since = old.since
        self.leases[uuid] = lease
        return lease

    def conflicts(self, uuid: str, cpus: frozenset[int]) -> list[tuple[str, frozenset[int]]]:
        """(other domain's name, shared CPUs) for every other dedicated lease whose pins overlap ``cpus``."""
        out = []
        for key, lease in sorted(self.leases.items(), key=lambda kv: kv[1].name):
            shared = cpus & lease.cpus if key != uuid and lease.dedicated else frozenset()
            if shared:
                out.append((lease.name, frozenset(shared)))
        return out

    def held_cpus(self, but: str | None = None) -> frozenset[int]:
        """Every CPU a dedicated lease's vCPUs are pinned to (``but``: leaving out that lease)."""
        return frozenset().union(*(lease.cpus for key, lease in self.leases.items() if key != but and lease.dedicated))


# -- the reader -----------------------------------------------------------------------------------

def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class RealPaths:
    """``os.path.realpath`` of paths below ``root``, their folders remembered: a state names several
    knobs in each folder (every CPU's C-states, governor and EPP), and the realpath of each walks
    every folder above it again. A link is resolved where it is, as realpath does."""

    def __init__(self, root: str):
        self.root = os.path.realpath(root)
        self._folders: dict[str, str] = {}  # a folder below root, as named -> where it resolves

    def of(self, rel: str) -> str:
        """Where ``root/rel`` resolves: ``os.path.realpath(os.path.join(root, rel))``."""
        parent, _, name = rel.rpartition("/")
        if not name or name in (".", "..") or rel.startswith("/"):
            return os.path.realpath(os.path.join(self.root, rel))
        base = self._folders.get(parent) if parent else self.root
        if base is None:
            base = self._folders[parent] = self.of(parent)
        path = f"{base}/{name}" if base != "/" else f"/{name}"
        return os.path.realpath(path) if os.path.islink(path) else path


class _Reader:
    """Checks one decoded JSON document against the shape above; ``limit`` bounds CPU ids."""

    def __init__(self, limit: int, sysfs: str | None):
        self.limit = limit
        self.paths = RealPaths(sysfs) if sysfs else None
        self.sysfs = self.paths.root if self.paths else None  # resolved
        self.strict = True  # every key must be there (version 2); a version-1 file may lack some

    @staticmethod
    def fail(where: str, what: str):
        raise Damaged(f"{where}: {what}")

    def get(self, rec: dict, key: str, default, where: str):
        """``rec[key]``; a key that is missing is damage in a version-2 file, ``default`` in a version-1 one."""
        if key not in rec:
            if self.strict:
                self.fail(f"{where}.{key}" if where else key, "missing")
            return default
        return rec[key]

    def typed(self, value, kind, where: str):
        """``value`` if it is of ``kind`` (float: finite; int: 0 to 2**63 - 1), else damage. No falsy
        value stands in for another type: ``0`` is not a dict, ``""`` not a list."""
        if kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63
        else:
            ok = isinstance(value, kind)
        if not ok:
            self.fail(where, f"{type(value).__name__} {_show(value)} where {kind.__name__} belongs")
        return value

    def cpus(self, value, where: str, limit: int | None = None) -> frozenset[int]:
        try:
            return cpuset.parse(self.typed(value, str, where), limit=limit or self.limit)
        except InvalidInput as exc:
            self.fail(where, str(exc))
        raise AssertionError  # unreachable

    def key(self, section: str, text, where: str, ident: str = "") -> Key:
        key = parse_key(section, self.typed(text, str, where), ident)
        if key is None:
            self.fail(where, f"{_show(text)} is not {NOT_A_KEY[section]}")
        if section == "knob" and self.sysfs is not None:
            real = self.paths.of(key.text)
            if not real.startswith(self.sysfs.rstrip("/") + "/"):
                self.fail(where, f"{key.text!r} resolves outside {self.sysfs}")
        return key

    def value(self, key: Key, value, where: str) -> str:
        """A value of ``key``'s kind (Kind.check), as text."""
        text = self.typed(value, str, where)
        try:
            KINDS[key.kind].check(text, self.limit, key)
        except InvalidInput as exc:
            self.fail(where, str(exc))
        return text

    # -- records, by section ------------------------------------------------------------------
    def knob(self, value, where: str) -> Record:
        rec = self.typed(value, dict, where)
        key = self.key("knob", rec.get("path"), f"{where}.path")
        before = self.value(key, rec.get("before"), f"{where}.before")
        pending = self.typed(rec.get("pending", False), bool, f"{where}.pending")
        return Record(key, before, self.value(key, rec.get("after"), f"{where}.after"), before if pending else None,
                      key.text)

    def knobs(self, value, where: str) -> list[Record]:
        return [self.knob(r, f"{where}[{i}]") for i, r in enumerate(self.typed(value, list, where))]

    def isolated(self, text: str, value, at: str) -> Record:
        r = self.typed(value, dict, at)
        key = self.key("isolation", text, at, self.typed(r.get("ident", ""), str, f"{at}.ident"))
        mark = r.get("from")
        return Record(key, self.value(key, r.get("before"), f"{at}.before"),
                      self.value(key, r.get("after"), f"{at}.after"),
                      None if mark is None else self.value(key, mark, f"{at}.from"),
                      self.typed(self.get(r, "label", "", at), str, f"{at}.label"))

    def pool(self, text: str, value, where: str) -> tuple[Pool, PoolShare]:
        key = self.key("pool", text, f"{where}.hugepages")
        at = f"{where}.hugepages.{text}"
        rec = self.typed(value, dict, at)
        steps = []
        for name in ("raising", "lowering"):
            step = rec.get(name)
            if step is not None:
                step = self.typed(step, dict, f"{at}.{name}")
                steps.append(pool_step(key, self.typed(step.get("from"), int, f"{at}.{name}.from"),
                                       self.typed(step.get("to"), int, f"{at}.{name}.to")))
        return key, PoolShare(self.typed(self.get(rec, "need", 0, at), int, f"{at}.need"),
                              self.typed(self.get(rec, "added", 0, at), int, f"{at}.added"), steps)

    # -- the objects ----------------------------------------------------------------------------
    def lease(self, value, where: str) -> Lease:
        rec = self.typed(value, dict, where)
        pools = self.typed(self.get(rec, "hugepages", {}, where), dict, f"{where}.hugepages")
        return Lease(self.typed(self.get(rec, "name", None, where), str, f"{where}.name"),
                     self.typed(self.get(rec, "profile", "", where), str, f"{where}.profile"),
                     self.cpus(self.get(rec, "cpus", "", where), f"{where}.cpus"),
                     float(self.typed(self.get(rec, "since", 0.0, where), float, f"{where}.since")),
                     dict(self.pool(k, v, where) for k, v in pools.items()),
                     self.knobs(self.get(rec, "cstates", [], where), f"{where}.cstates"),
                     self.typed(self.get(rec, "dedicated", True, where), bool, f"{where}.dedicated"),
                     self.qemu(rec.get("qemu"), f"{where}.qemu"),
                     self.cpus(rec.get("partition", ""), f"{where}.partition"),
                     self.knobs(rec.get("power", []), f"{where}.power"))

    def qemu(self, value, where: str) -> Qemu | None:
        if value is None:
            return None
        rec = self.typed(value, dict, where)
        pid = self.typed(rec.get("pid"), int, f"{where}.pid")
        if not 0 < pid < 1 << 31:
            self.fail(f"{where}.pid", f"{pid} is not a process id")
        return Qemu(pid, self.typed(rec.get("start"), int, f"{where}.start"))

    def pair(self, value, at: str) -> Pair:
        p = self.typed(value, dict, at)
        kind = p.get("kind")
        if not isinstance(kind, str) or kind not in KINDS or not KINDS[kind].inherits:
            self.fail(f"{at}.kind", "not a kind whose new items inherit a mask (task, irq)")
        return Pair(kind, self.cpus(p.get("mask"), f"{at}.mask"), self.cpus(p.get("removed"), f"{at}.removed"),
                    float(self.typed(p.get("since"), float, f"{at}.since")))

    def isolation(self, value, where: str) -> Isolation | None:
        if value is None:
            return None
        rec = self.typed(value, dict, where)
        found = self.typed(self.get(rec, "records", {}, where), dict, f"{where}.records")
        records = [self.isolated(key, r, f"{where}.records.{key}") for key, r in found.items()]
        pairs = self.typed(self.get(rec, "pairs", [], where), list, f"{where}.pairs")
        if len(pairs) > MAX_PAIRS:
            self.fail(f"{where}.pairs", f"{len(pairs)} pairs, the hook keeps at most {MAX_PAIRS}")
        return Isolation(self.cpus(self.get(rec, "cpus", "", where), f"{where}.cpus"),
                         self.cpus(self.get(rec, "irqs", "", where), f"{where}.irqs", MAX_IRQS),
                         [self.pair(p, f"{where}.pairs[{i}]") for i, p in enumerate(pairs)],
                         {r.key: r for r in records})

    def state(self, data) -> State:
        doc = self.typed(data, dict, "the document")
        version = self.typed(self.get(doc, "version", None, ""), int, "version")
        if version not in VERSIONS:
            self.fail("version", f"{version!r}, this vmtune reads {', '.join(map(str, VERSIONS))}")
        self.strict = version >= 2
        leases = self.typed(self.get(doc, "leases", {}, ""), dict, "leases")
        baseline = self.get(doc, "baseline", None, "")
        return State({str(k): self.lease(v, f"leases.{k}") for k, v in leases.items()},
                     None if baseline is None else self.knobs(baseline, "baseline"),
                     self.isolation(self.get(doc, "isolation", None, ""), "isolation"),
                     self.knobs(self.get(doc, "unrestored", [], ""), "unrestored"),
                     self.knobs(doc.get("idle", []), "idle"))


def read_state(data, limit: int, sysfs: str | None = None) -> State:
    """The state in a decoded JSON document; Damaged (one line) for anything out of shape.

    ``limit``: CPU ids must be below it (the host's possible CPUs). ``sysfs``: knob paths must
    resolve inside it.
    """
    return _Reader(limit, sysfs).state(data)
