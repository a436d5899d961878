"""The hook's state, typed: ``decode`` is the one reader and validator, ``State.to_json`` the writer.

``state.json`` (leases.Store commits it; ``baseline.json`` beside it is a copy of the last
completed state, committed separately)::

    {"version": 1,
     "leases": {"<uuid>": {"name": "db1", "profile": "latency", "cpus": "2-3", "since": 1700000000.0,
                           "hugepages": {"0:2048": {"need": 512, "added": 100, "raising": {"from": 0, "to": 100}}},
                           "cstates": [KNOB, ...]}},
     "baseline": [KNOB, ...] | null,
     "isolation": {"cpus": "2-3", "irqs": "0-40",
                   "pairs": [{"kind": "task", "mask": "0-1", "removed": "2-3", "since": 345.6}],
                   "records": {"task:1234": {"before": "0-3", "after": "0-1", "label": "sshd[1234]",
                                             "ident": "4242"}}}}
    KNOB = {"path": "devices/system/cpu/cpu0/cpufreq/scaling_governor", "before": "powersave",
            "after": "performance", "pending": true}

``isolation`` is absent while nothing is isolated; ``pending``, ``raising``, ``lowering`` and an
isolation record's ``from`` are journal marks (lifecycle.py, isolation/). Keys are only ever added.

Anything else is damage (``Damaged``, one line naming the field): a value of the wrong type (``0``
is not an empty dict, nor ``""`` an empty list), a number that is not finite, a CPU beyond the
host's last one (so no structure grows past the host's size), an isolation value (``before``,
``after``, ``from``) that is not a CPU list of the host's CPUs (a hex mask for ``irq:default`` and
``wq:cpumask``), more pairs than the hook keeps, a pool key that is not ``node:size``, or a knob
path that is not a plain relative path inside the sysfs root. The hook refuses to tune through a
damaged state; it never starts from empty over one.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field

from .. import cpuset
from ..errors import InvalidInput

VERSION = 2  # 2: every key is written, and a missing one is damage (1: read as before)
VERSIONS = (1, 2)
# the only sysfs files a knob record may name: what hoststate.py writes (cpufreq, cpuidle, KSM)
KNOB_PATH = re.compile(r"devices/system/cpu/(cpu\d{1,5}/cpufreq|cpufreq/policy\d{1,5})/"
                       r"(scaling_governor|energy_performance_preference)"
                       r"|devices/system/cpu/cpu\d{1,5}/cpuidle/state\d{1,3}/disable|kernel/mm/ksm/run")
POOL_KEY = re.compile(r"\d{1,5}:\d{1,10}")
# a group's name is escaped into its key (isolation/items.key_of): one safe byte or %XX per byte
ISO_KEY = re.compile(r"(task|irq):\d{1,10}|irq:default|wq:cpumask"
                     r"|(cgroup|unit):(?:[A-Za-z0-9_.@:\\-]|%[0-9A-F]{2}){1,255}")
MASK_KEYS = ("irq:default", "wq:cpumask")  # their values are hex masks; every other item's a CPU list
MAX_PAIRS = 64
MAX_IRQS = 1 << 20  # IRQ numbers below it


class Damaged(Exception):
    """The state cannot be trusted: one line that says which field and why. ``advice``: what to do,
    when it is not the usual (``vmtune hook reap`` goes on from the last good copy)."""

    def __init__(self, message: str, advice: str | None = None):
        super().__init__(message)
        self.advice = advice


@dataclass
class KnobRecord:
    """One sysfs value the hook changed: what it was, what the kernel read back after the write."""

    path: str
    before: str
    after: str
    pending: bool = False  # journal: committed before the write, settled by the next call

    def to_json(self) -> dict:
        out: dict = {"path": self.path, "before": self.before, "after": self.after}
        if self.pending:
            out["pending"] = True
        return out


@dataclass
class Step:
    """A pool change under way (journal): nr_hugepages from ``start`` to ``to``."""

    start: int
    to: int

    def to_json(self) -> dict:
        return {"from": self.start, "to": self.to}


@dataclass
class PoolRecord:
    """A lease's share of one hugepage pool: the pages it needs, the pages its prepare added."""

    need: int = 0
    added: int = 0
    raising: Step | None = None
    lowering: Step | None = None

    def to_json(self) -> dict:
        out: dict = {"need": self.need, "added": self.added}
        for name in ("raising", "lowering"):
            step = getattr(self, name)
            if step is not None:
                out[name] = step.to_json()
        return out


@dataclass
class Lease:
    name: str
    profile: str = ""
    cpus: frozenset[int] = frozenset()
    since: float = 0.0
    hugepages: dict[str, PoolRecord] = field(default_factory=dict)
    cstates: list[KnobRecord] = field(default_factory=list)
    # its profile pins vCPUs to CPUs of their own (latency, realtime): they are isolated and may not
    # overlap another dedicated lease's. False: pinned to shared CPUs (e.g. pinning = "node")
    dedicated: bool = True

    def to_json(self) -> dict:
        return {"name": self.name, "profile": self.profile, "cpus": cpuset.format(self.cpus), "since": self.since,
                "dedicated": self.dedicated,
                "hugepages": {k: rec.to_json() for k, rec in sorted(self.hugepages.items())},
                "cstates": [rec.to_json() for rec in self.cstates]}


@dataclass
class IsoRecord:
    """One item the isolation moved: its value before, what the hook wrote (isolation/)."""

    before: str
    after: str
    label: str = ""
    ident: str = ""  # a task's start time
    was: str | None = None  # journal: the value found when the record was written

    def to_json(self) -> dict:
        out = {"before": self.before, "after": self.after, "label": self.label}
        if self.ident:
            out["ident"] = self.ident
        if self.was is not None:
            out["from"] = self.was
        return out


@dataclass(frozen=True)
class Pair:
    """A mask the isolation imposed (``kind`` task or irq) and the CPUs it removed, since when."""

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
    records: dict[str, IsoRecord] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"cpus": cpuset.format(self.cpus), "irqs": cpuset.format(self.irqs),
                "pairs": [p.to_json() for p in self.pairs],
                "records": {k: r.to_json() for k, r in sorted(self.records.items())}}


@dataclass
class State:
    leases: dict[str, Lease] = field(default_factory=dict)
    baseline: list[KnobRecord] | None = None
    isolation: Isolation | None = None
    unrestored: list[KnobRecord] = field(default_factory=list)  # restores that failed: tried again

    def to_json(self) -> dict:
        return {"version": VERSION, "leases": {k: lease.to_json() for k, lease in self.leases.items()},
                "baseline": None if self.baseline is None else [r.to_json() for r in self.baseline],
                "isolation": None if self.isolation is None else self.isolation.to_json(),
                "unrestored": [r.to_json() for r in self.unrestored]}

    @property
    def empty(self) -> bool:
        return not self.leases and self.baseline is None and self.isolation is None and not self.unrestored

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

    def add(self, uuid: str, name: str, profile: str, cpus: frozenset[int], dedicated: bool = True) -> Lease:
        """Record (or renew) the lease; a renewed lease keeps the records of what it changed."""
        old = self.leases.get(uuid)
        lease = Lease(name, profile, frozenset(cpus), time.time(), dedicated=dedicated)
        if old is not None:
            lease.hugepages, lease.cstates = old.hugepages, old.cstates
        self.leases[uuid] = lease
        return lease

    def conflicts(self, uuid: str, cpus: frozenset[int]) -> list[tuple[str, frozenset[int]]]:
        """(other domain's name, shared CPUs) for every other dedicated lease whose pins overlap
        ``cpus``."""
        out = []
        for key, lease in sorted(self.leases.items(), key=lambda kv: kv[1].name):
            shared = cpus & lease.cpus if key != uuid and lease.dedicated else frozenset()
            if shared:
                out.append((lease.name, frozenset(shared)))
        return out

    def held_cpus(self, but: str | None = None) -> frozenset[int]:
        """Every CPU a dedicated lease's vCPUs are pinned to (``but``: leaving out that lease)."""
        return frozenset().union(*(lease.cpus for key, lease in self.leases.items() if key != but and lease.dedicated))


# -- the reader ---------------------------------------------------------------------------------


class _Reader:
    """Checks one decoded JSON document against the shape above; ``limit`` bounds CPU ids."""

    def __init__(self, limit: int, sysfs: str | None):
        self.limit = limit
        self.sysfs = os.path.realpath(sysfs) if sysfs else None
        self.strict = True  # every key must be there (version 2); a version-1 file may lack some

    def get(self, rec: dict, key: str, default, where: str):
        """``rec[key]``; a key that is missing is damage in a version-2 file, ``default`` in a version-1 one."""
        if key not in rec:
            if self.strict:
                self.fail(f"{where}.{key}" if where else key, "missing")
            return default
        return rec[key]

    @staticmethod
    def fail(where: str, what: str):
        raise Damaged(f"{where}: {what}")

    def typed(self, value, kind, where: str, optional: bool = False):
        """``value`` if it is of ``kind`` (float: finite; int: 0 to 2**63 - 1), else damage. No
        falsy value stands in for another type: ``0`` is not a dict, ``""`` not a list."""
        if value is None and optional:
            return None
        if kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63
        else:
            ok = isinstance(value, kind)
        if not ok:
            self.fail(where, f"{type(value).__name__} {_show(value)} where {kind.__name__} belongs")
        return value

    def cpus(self, value, where: str) -> frozenset[int]:
        try:
            return cpuset.parse(self.typed(value, str, where), limit=self.limit)
        except InvalidInput as exc:
            self.fail(where, str(exc))
        raise AssertionError  # unreachable

    def cpu_text(self, value, where: str, mask: bool) -> str:
        """A value the isolation writes back: a CPU list (a hex mask when ``mask``) of the host's CPUs."""
        text = self.typed(value, str, where)
        try:
            cpuset.parse_mask(text, self.limit) if mask else cpuset.check(text, self.limit)
        except InvalidInput as exc:
            self.fail(where, str(exc))
        return text

    def path(self, value, where: str) -> str:
        rel = self.typed(value, str, where)
        parts = rel.split("/")
        if (rel.startswith("/") or os.path.normpath(rel) != rel or ".." in parts or "\x00" in rel
                or not KNOB_PATH.fullmatch(rel)):
            self.fail(where, f"{rel!r} is not a sysfs path vmtune writes")
        if self.sysfs is not None:
            real = os.path.realpath(os.path.join(self.sysfs, rel))
            if not real.startswith(self.sysfs.rstrip("/") + "/"):
                self.fail(where, f"{rel!r} resolves outside {self.sysfs}")
        return rel

    def knob(self, value, where: str) -> KnobRecord:
        rec = self.typed(value, dict, where)
        return KnobRecord(self.path(rec.get("path"), f"{where}.path"), self.typed(rec.get("before"), str, f"{where}.before"),
                          self.typed(rec.get("after"), str, f"{where}.after"),
                          bool(self.typed(rec.get("pending", False), bool, f"{where}.pending")))

    def knobs(self, value, where: str) -> list[KnobRecord]:
        return [self.knob(r, f"{where}[{i}]") for i, r in enumerate(self.typed(value, list, where))]

    def step(self, value, where: str) -> Step | None:
        if value is None:
            return None
        rec = self.typed(value, dict, where)
        return Step(self.typed(rec.get("from"), int, f"{where}.from"), self.typed(rec.get("to"), int, f"{where}.to"))

    def pool(self, value, where: str) -> PoolRecord:
        rec = self.typed(value, dict, where)
        return PoolRecord(self.typed(self.get(rec, "need", 0, where), int, f"{where}.need"),
                          self.typed(self.get(rec, "added", 0, where), int, f"{where}.added"),
                          self.step(rec.get("raising"), f"{where}.raising"),
                          self.step(rec.get("lowering"), f"{where}.lowering"))

    def lease(self, value, where: str) -> Lease:
        rec = self.typed(value, dict, where)
        pools = self.typed(self.get(rec, "hugepages", {}, where), dict, f"{where}.hugepages")
        for k in pools:
            if not POOL_KEY.fullmatch(k):
                self.fail(f"{where}.hugepages", f"{k!r} is not node:size")
        return Lease(self.typed(self.get(rec, "name", None, where), str, f"{where}.name"),
                     self.typed(self.get(rec, "profile", "", where), str, f"{where}.profile"),
                     self.cpus(self.get(rec, "cpus", "", where), f"{where}.cpus"),
                     float(self.typed(self.get(rec, "since", 0.0, where), float, f"{where}.since")),
                     {k: self.pool(v, f"{where}.hugepages.{k}") for k, v in pools.items()},
                     self.knobs(self.get(rec, "cstates", [], where), f"{where}.cstates"),
                     self.typed(self.get(rec, "dedicated", True, where), bool, f"{where}.dedicated"))

    def record(self, key: str, value, at: str) -> IsoRecord:
        if not ISO_KEY.fullmatch(key):
            self.fail(at, "not an item key the isolation writes")
        r = self.typed(value, dict, at)
        mask = key in MASK_KEYS
        return IsoRecord(self.cpu_text(r.get("before"), f"{at}.before", mask),
                         self.cpu_text(r.get("after"), f"{at}.after", mask),
                         self.typed(self.get(r, "label", "", at), str, f"{at}.label"),
                         self.typed(r.get("ident", ""), str, f"{at}.ident"),
                         None if r.get("from") is None else self.cpu_text(r.get("from"), f"{at}.from", mask))

    def pair(self, value, at: str) -> Pair:
        p = self.typed(value, dict, at)
        if p.get("kind") not in ("task", "irq"):
            self.fail(f"{at}.kind", "neither task nor irq")
        return Pair(p["kind"], self.cpus(p.get("mask"), f"{at}.mask"), self.cpus(p.get("removed"), f"{at}.removed"),
                    float(self.typed(p.get("since"), float, f"{at}.since")))

    def isolation(self, value, where: str) -> Isolation | None:
        if value is None:
            return None
        rec = self.typed(value, dict, where)
        records = {key: self.record(key, r, f"{where}.records.{key}")
                   for key, r in self.typed(self.get(rec, "records", {}, where), dict, f"{where}.records").items()}
        pairs = self.typed(self.get(rec, "pairs", [], where), list, f"{where}.pairs")
        if len(pairs) > MAX_PAIRS:
            self.fail(f"{where}.pairs", f"{len(pairs)} pairs, the hook keeps at most {MAX_PAIRS}")
        irqs = self.typed(self.get(rec, "irqs", "", where), str, f"{where}.irqs")
        try:
            irq_ids = cpuset.parse(irqs, limit=MAX_IRQS)
        except InvalidInput as exc:
            self.fail(f"{where}.irqs", str(exc))
        return Isolation(self.cpus(self.get(rec, "cpus", "", where), f"{where}.cpus"), irq_ids,
                         [self.pair(p, f"{where}.pairs[{i}]") for i, p in enumerate(pairs)], records)

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
                     self.knobs(self.get(doc, "unrestored", [], ""), "unrestored"))


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def decode(data, limit: int, sysfs: str | None = None) -> State:
    """The state in a decoded JSON document; Damaged (one line) for anything out of shape.

    ``limit``: CPU ids must be below it (the host's possible CPUs). ``sysfs``: knob paths must
    resolve inside it.
    """
    return _Reader(limit, sysfs).state(data)
