"""What a doctor check returns, and the trees it reads.

A ``Finding`` is one line of the report: its level, the area, what was looked at (a path or a
source), the value found, the value wanted and a one-line fix. Levels, mildest first:

    OK    as vmtune wants it
    INFO  worth knowing, nothing to fix
    SKIP  cannot be known from here (a guest cannot see its host; a part of the tree not given)
    WARN  costs latency or throughput; fix it
    FAIL  broken: guests will not start, cannot be placed, or run at a fraction of their speed

``Roots`` (vmtune/roots.py) names the trees: a sysfs root, a proc root and a filesystem root (for
``/dev``, ``/run`` and ``/etc``). ``Roots()`` is this machine. A captured tree gives the roots it
has; a root that is None is not read, and the checks that need it say SKIP.
"""

from __future__ import annotations

import glob
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .. import cpuset
from ..config import Config
from ..host import sysfs as host_sysfs
from ..roots import Roots

LEVELS = ("OK", "INFO", "SKIP", "WARN", "FAIL")
SEVERITY = {level: i for i, level in enumerate(LEVELS)}


@dataclass(frozen=True)
class Finding:
    level: str
    area: str
    source: str  # the path or the source looked at
    found: str
    want: str = ""
    fix: str = ""

    def __post_init__(self) -> None:
        if self.level not in SEVERITY:
            raise ValueError(f"unknown level {self.level!r}")

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    def line(self) -> str:
        text = f"{self.level:<5} {self.area:<11} {self.source}  {self.found}"
        if self.want and self.level not in ("OK", "INFO"):
            text += f" (want {self.want})"
        if self.fix:
            text += f"  fix: {self.fix}"
        return text


def maker(area: str) -> Callable[..., Finding]:
    """``new(level, source, found, want="", fix="")`` for one area."""

    def new(level: str, source: str, found: str, want: str = "", fix: str = "") -> Finding:
        return Finding(level, area, source, found, want, fix)

    return new


_NUM = re.compile(r"(\d+)")


def natural(text: str) -> list:
    return [int(p) if p.isdigit() else p for p in _NUM.split(text)]


@dataclass
class Context:
    """What every check gets: the trees, the config, and what earlier checks found."""

    roots: Roots
    cfg: Config = field(default_factory=Config)
    env: object = None  # environment.Environment, set by the environment check
    domains: list[tuple[str, str]] | None = None  # (domain XML, state), None while unknown
    domains_source: str = ""  # where the domains came from, or why they are unknown
    connect: str | None = None  # the libvirt URI to read the domains from (--connect)
    audit: object = None  # vmtune.placement.audit.Report of the domains, or the error text; None until asked
    # the host the domains are judged against (vmtune.live.hostview.Seen), or why it cannot be read
    host: object = None
    measure: Callable[[int], object] | None = None  # cpu -> measure.Measurement | None
    census_seconds: float = 0.0  # how long the noise census samples the held CPUs (0: not taken)
    sleep: Callable[[float], None] = time.sleep  # how it waits (tests change the tree meanwhile)
    census: object = None  # noise.Census, once taken

    def has(self, where: str) -> bool:
        return getattr(self.roots, where) is not None

    def path(self, where: str, rel: str) -> str:
        """The path of ``rel`` under the ``sysfs``, ``proc`` or ``root`` tree, for reading and showing."""
        base = getattr(self.roots, where)
        if base is None:
            return f"({where} not given)/{rel}"
        return os.path.join(base, rel)

    def read(self, where: str, rel: str) -> str | None:
        """The file's text, stripped; None when the tree is not given or the file is missing or unreadable."""
        return host_sysfs.value(self.path(where, rel)) if self.has(where) else None

    def exists(self, where: str, rel: str) -> bool:
        return self.has(where) and os.path.lexists(self.path(where, rel))

    def glob(self, where: str, pattern: str) -> list[str]:
        """Paths relative to the tree that match ``pattern``, in natural order (cpu2 before cpu10)."""
        if not self.has(where):
            return []
        base = getattr(self.roots, where)
        found = glob.glob(os.path.join(glob.escape(base), pattern))
        return sorted((os.path.relpath(p, base) for p in found), key=natural)

    def cpuinfo(self) -> list[dict[str, str]]:
        """/proc/cpuinfo as one dict per processor (empty when there is no proc tree)."""
        return host_sysfs.cpuinfo(self.roots.proc) if self.has("proc") else []

    def cpus(self) -> list[int]:
        """The online CPUs (``devices/system/cpu/online``, else every ``cpuN`` directory)."""
        return host_sysfs.online_cpus(self.roots.sysfs) if self.has("sysfs") else []

    def cmdline(self) -> list[str]:
        """The kernel's parameters (what follows ``--`` goes to init, not the kernel)."""
        words = (self.read("proc", "cmdline") or "").split()
        return words[: words.index("--")] if "--" in words else words

    def param(self, name: str) -> str | None:
        """The value of ``name=value`` on the kernel command line (the last one wins); None if absent."""
        value = None
        for word in self.cmdline():
            key, _, val = word.partition("=")
            if key == name:
                value = val
        return value


def grouped(values: dict[int, str]) -> dict[str, frozenset[int]]:
    """``{cpu: value}`` -> ``{value: cpus}``, values in the order of their first CPU."""
    out: dict[str, set[int]] = {}
    for cpu in sorted(values):
        out.setdefault(values[cpu], set()).add(cpu)
    return {value: frozenset(cpus) for value, cpus in out.items()}


def on_cpus(groups: dict[str, frozenset[int]]) -> str:
    """``performance on CPUs 0-3, powersave on CPUs 4-7`` (just the value when there is one)."""
    if len(groups) == 1:
        return next(iter(groups))
    return ", ".join(f"{value} on CPUs {cpuset.format(cpus)}" for value, cpus in groups.items())
