"""What every knob kind has: a typed key, a live item, one file reader and one file writer.

A **key** names one thing the engine may change (CPU 3's governor, IRQ 24, the task 1234 started
at tick 4242, pool ``0:2048``): a small immutable value of typed fields (``Key``), never a string
to be parsed back apart. Its ``text`` is the name the state document gives it; its kind's ``parse_key`` reads
that name back, at the document's edge only.

An **item** is a key as found on the live host: its value (``raw``, the text as read), a label for
log lines, and where it lives (``root`` + ``rel``: every kind that is a file is written through
``write_file``, the one writer of host files).

A **kind** (``Kind``) declares, once, how its items are read, parsed, formatted, written and
validated. Kinds register in ``KINDS`` (``register``), the one table; the state document's reader
is built from it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import ClassVar

from ... import cpuset
from ...errors import InvalidInput
from ...host import sysfs as host_sysfs


# -- names ------------------------------------------------------------------------------------------

MAX_NAME = 255
SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.@:-\\")


def key_of(kind: str, name: str) -> str:
    """The state's name of a named item: ``kind:NAME`` with every byte outside ``SAFE`` as ``%XX``."""
    raw = name.encode("utf-8", "surrogateescape")
    return kind + ":" + "".join(chr(b) if b in SAFE else f"%{b:02X}" for b in raw)


def name_of(key: str) -> str | None:
    """The name in a ``kind:NAME`` text (``key_of`` undone); None when the escapes are broken or a
    byte that needs one is bare."""
    text = key.partition(":")[2]
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] == "%":
            part = text[i + 1:i + 3]
            if len(part) != 2 or not all(c in "0123456789ABCDEF" for c in part):
                return None
            out.append(int(part, 16))
            i += 3
        elif ord(text[i]) < 128 and ord(text[i]) in SAFE:
            out.append(ord(text[i]))
            i += 1
        else:
            return None
    return out.decode("utf-8", "surrogateescape") if out and len(out) <= MAX_NAME else None


def printable(name: str) -> str:
    """A name for a log line or a label: escaped when it holds anything unprintable."""
    return name if name.isprintable() else key_of("", name)[1:]


# -- files ------------------------------------------------------------------------------------------

def read_file(root: str, rel: str) -> str | None:
    """The value of the host file ``root/rel``, stripped; None when it does not exist (any other
    error is raised)."""
    return host_sysfs.value(os.path.join(root, rel), absent=FileNotFoundError)


def write_file(root: str, rel: str, value: str) -> None:
    """Write ``value`` to the host file ``root/rel``: the one writer of sysfs, procfs and cgroupfs
    files (knobs, C-states, hugepage pools, IRQs, CPU masks, cgroups)."""
    with open(os.path.join(root, rel), "w", encoding="ascii") as fh:
        fh.write(value)


def write_list(root: str, rel: str, value: str) -> None:
    """``write_file`` for a CPU list that may be empty (a cgroup's ``cpuset.cpus`` or
    ``cpuset.cpus.exclusive``): the empty list as a newline, since a zero-byte write never reaches
    the kernel."""
    write_file(root, rel, value if value.strip() else "\n")


def inside(root: str, path: str) -> bool:
    """Whether ``path`` resolves inside ``root`` (links included: sysfs' workqueue folders are
    links inside it)."""
    return os.path.realpath(path).startswith(os.path.realpath(root).rstrip("/") + "/")


class Key:
    """A typed key: a small immutable value. A subclass declares its fields as ``__slots__``
    (``DEFAULTS`` for the optional ones), and its kind and the pattern of its text (``str.format`` of
    its fields) as class keywords: ``class Irq(Key, kind="irq", name="irq:{number}")``. Keys of two
    classes are never equal. (Plain classes, not dataclasses: a hook call imports them all, and a frozen dataclass
    costs half a millisecond to define.)"""

    __slots__ = ("_id", "_text")  # (class name, fields), for equality and hashing; the text, once made
    kind: ClassVar[str]
    NAME: ClassVar[str] = ""
    DEFAULTS: ClassVar[dict] = {}
    FIELDS: ClassVar[tuple[str, ...]] = ()  # every class's slots, the base's first

    def __init_subclass__(cls, kind: str | None = None, name: str | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if kind is not None:
            cls.kind = kind
        if name is not None:
            cls.NAME = name
        cls.FIELDS = tuple(name for c in reversed(cls.__mro__[:-2]) for name in c.__dict__.get("__slots__", ()))

    def __init__(self, *values, **named) -> None:
        names = self.FIELDS
        given = dict(zip(names, values), **named)
        if len(values) > len(names) or set(given) - set(names):
            raise TypeError(f"{type(self).__name__} takes {', '.join(names) or 'nothing'}")
        values = tuple(given[name] if name in given else self.DEFAULTS[name] for name in names)
        for name, value in zip(names, values):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_id", (type(self).__name__, *values))
        object.__setattr__(self, "_text", None)

    def fields(self) -> tuple:
        return self._id[1:]

    def __reduce__(self):
        return type(self), self.fields()

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other._id == self._id

    def __hash__(self) -> int:
        return hash(self._id)

    def __lt__(self, other: Key) -> bool:
        return (self.kind, self._id) < (other.kind, other._id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.fields()))})"

    @property
    def text(self) -> str:
        """The state document's name for the key."""
        if self._text is None:
            object.__setattr__(self, "_text", self.NAME.format(**dict(zip(self.FIELDS, self.fields()))))
        return self._text

    @property
    def cpu(self) -> int | None:
        """The CPU the item belongs to, None for host-wide items."""
        return None

    @property
    def ident(self) -> str:
        """What the state keeps beside the key's text to know the item again (a process's start
        time: its id may be reused); empty for most."""
        return ""


@dataclass
class Item:
    """A key as found on the live host."""

    key: Key
    raw: str  # the value as read; a restore writes it back as it was
    label: str
    root: str = ""  # the file: root/rel (a task: its status file; a unit: its runtime drop-in)
    rel: str = ""
    full: frozenset[int] = frozenset()  # what an empty value means (cgroups, units: every CPU)
    born: float | None = None  # a task's start, in seconds since boot
    top: str = ""  # a task's (or a group's) top-level cgroup v2 group

    @property
    def kind(self) -> Kind:
        return KINDS[self.key.kind]

    @property
    def where(self) -> str:
        return os.path.join(self.root, self.rel)

    @property
    def cpus(self) -> frozenset[int]:
        return self.kind.parse(self.raw, self)

    def same(self, a: str, b: str) -> bool:
        """Whether two values of this item mean the same thing."""
        return self.kind.same(a, b, self)


class Kind:
    """How one kind of item is read, parsed, formatted, written and validated, and the value it
    gets while CPUs are isolated.

    ``section``: where the state document keeps its records (``knob``: the baseline and a lease's
    C-states; ``isolation``; ``pool``: a lease's hugepages). ``cpus``: its values are CPU sets
    (compared as sets); else plain text (compared as text). ``mask``: a CPU set written as a hex
    mask (``is_hex`` may decide per key). ``inherits``: a new item of the kind copies a mask the
    isolation imposed. ``deferred``: a write takes effect later (the live value may still show an
    older one): while the hook holds a record every value is its own, and it writes at every call.
    ``exits``: an item may vanish under a write (ESRCH: gone, not refused). ``holds_tasks``: the
    item narrows the tasks in it as a whole (when it refuses, they are moved one by one).
    ``quiet``: refusals are expected (per-CPU kernel threads, managed IRQs): not warned about.
    ``swept``: listed after the others (a group that holds tasks covers them) and again by the
    sweep (the tasks). ``resets_affinity``: a write makes the kernel reset the affinity of the tasks
    in the root cgroup (a cpuset partition made or undone): those the pass did not move get theirs
    back. ``extras``: the ``[hook]`` options that turn some of its items on (an extra's
    name -> the option; ``extra`` says which item needs which).

    A kind lists its own items (``items``), and ``register`` checks its declaration: a flag the
    engine does not read (a misspelt one) or an unknown section is an error at import.
    """

    name: ClassVar[str]
    section: ClassVar[str]
    cpus: ClassVar[bool] = True
    mask: ClassVar[bool] = False
    inherits: ClassVar[bool] = False
    deferred: ClassVar[bool] = False
    exits: ClassVar[bool] = False
    holds_tasks: ClassVar[bool] = False
    quiet: ClassVar[bool] = False
    swept: ClassVar[bool] = False
    resets_affinity: ClassVar[bool] = False
    extras: ClassVar[dict[str, str]] = {}

    def items(self, listing: Listing) -> Iterable[Item]:
        """The live items of this kind that a reconcile looks at (isolation kinds); none by default."""
        return ()

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        """The key the state document names ``text`` (``ident``: a task's start time); None when it
        is not one of this kind's."""
        raise NotImplementedError

    def is_hex(self, key: Key | None) -> bool:
        """Whether values of ``key`` are hex masks (else CPU lists, or text)."""
        return self.mask

    def check(self, text: str, limit: int, key: Key | None = None) -> None:
        """InvalidInput when ``text`` is not a value of ``key`` on a host of ``limit`` CPUs."""
        if self.is_hex(key):
            cpuset.parse_mask(text, limit)
        elif self.cpus:
            cpuset.check(text, limit)

    def parse(self, raw: str, item: Item) -> frozenset[int]:
        if self.is_hex(item.key):
            return cpuset.parse_mask(raw)
        return cpuset.parse(raw) if raw.strip() or not item.full else item.full

    def format(self, cpus: frozenset[int], item: Item | None = None) -> str:
        return cpuset.format_mask(cpus) if self.is_hex(item.key if item else None) else cpuset.format(cpus)

    def isolated(self, item: Item, before: str, cpus: frozenset[int], online: frozenset[int]) -> str | None:
        """The value the item gets while ``cpus`` are isolated, its original value being ``before``;
        None: it keeps ``before``. A CPU set loses the isolated CPUs, unless nothing online would be
        left (a set of offline CPUs only is no narrowing: a cgroup falls back to its parent's CPUs,
        the kernel refuses it for a task or an IRQ)."""
        orig = self.parse(before, item)
        target = orig - cpus
        return self.format(target, item) if target & online and target != orig else None

    def extra(self, key: Key) -> str | None:
        """The extra (of ``extras``) that turns isolating ``key`` on; None: always on."""
        return None

    def read_back(self, item: Item, value: str) -> str | None:
        """What the item holds right after ``value`` was written: read again (what the kernel made
        of it); a kind whose writes take effect later says ``value``."""
        return self.read(item)

    def same(self, a: str, b: str, item: Item) -> bool:
        if a.strip() == b.strip():
            return True
        if not self.cpus:
            return False
        try:
            return self.parse(a, item) == self.parse(b, item)
        except InvalidInput:
            return False

    def read(self, item: Item) -> str | None:
        """The live value, read again (after a write: what the kernel made of it); None: unreadable."""
        return host_sysfs.value(item.where)

    def write(self, item: Item, value: str) -> None:
        write_file(item.root, item.rel, value)

    def lookup(self, key: Key, roots, online: frozenset[int] = frozenset()):
        """The live item of ``key`` under ``roots``; ``GONE`` when it provably no longer exists; None
        when it cannot be read now."""
        raise NotImplementedError


def valid(item: Item) -> Item | None:
    """The item, when its value reads as its kind's; None (with a warning: left alone) when not."""
    try:
        item.cpus
    except InvalidInput:
        logging.getLogger("vmtune.hoststate").warning("%s: cannot read %r as CPUs; left alone", item.label, item.raw)
        return None
    return item


class Listing:
    """What a reconcile lists the isolation kinds' items for: the roots, the online CPUs, the CPUs
    isolated, the extras on, the partitions claimed (partition.PartitionClaim), the keys recorded before;
    for the tasks, ``only`` (these pids), ``covered`` (top-level groups narrowed as a whole) and
    ``known`` (thread ids read already)."""

    __slots__ = ("roots", "online", "cpus", "extras", "claims", "recorded", "only", "covered", "known")

    def __init__(self, roots, online: frozenset[int], cpus: frozenset[int], extras: Collection[str] = (),
                 claims: Collection = (), recorded: Collection[Key] = (), only: Collection[int] | None = None):
        self.roots, self.online, self.cpus, self.extras = roots, online, cpus, extras
        self.claims, self.recorded, self.only = claims, recorded, only
        self.covered: set[str] = set()
        self.known: set[str] = set()


KINDS: dict[str, Kind] = {}
SECTIONS = ("knob", "isolation", "pool")
FLAGS = frozenset(name for name, value in vars(Kind).items() if isinstance(value, bool))


def register(cls: type[Kind]) -> type[Kind]:
    """Class decorator: one instance of the kind in ``KINDS``, by its name. A flag that the engine
    does not read (``FLAGS``: Kind's own), an unknown section or extras that are not a table of
    option names is a TypeError here, at import."""
    for klass in cls.__mro__[:cls.__mro__.index(Kind)]:
        for name, value in vars(klass).items():
            if isinstance(value, bool) and name not in FLAGS:
                raise TypeError(f"kind {cls.name}: {name} is not a flag the engine reads ({', '.join(sorted(FLAGS))})")
    if cls.section not in SECTIONS:
        raise TypeError(f"kind {cls.name}: section {cls.section!r} is not one of {', '.join(SECTIONS)}")
    if not all(isinstance(k, str) and isinstance(v, str) and v.startswith("isolate_") for k, v in cls.extras.items()):
        raise TypeError(f"kind {cls.name}: extras must map an extra's name to its [hook] isolate_* option")
    if cls.name in KINDS:
        raise TypeError(f"kind {cls.name} is registered twice")
    KINDS[cls.name] = cls()
    return cls


def extra_options() -> dict[str, str]:
    """Every kind's extras: an extra's name -> the ``[hook]`` option that turns it on."""
    return {name: option for kind in KINDS.values() for name, option in kind.extras.items()}


def digits(text: str, most: int) -> int | None:
    """``text`` as a number of at most ``most`` ASCII digits; None otherwise."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= most else None
