"""What every knob kind has: a typed key, a live item, one file reader and one file writer.

A **key** names one thing the engine may change (CPU 3's governor, IRQ 24, the task 1234 started
at tick 4242, pool ``0:2048``): a frozen dataclass of typed fields, never a string to be parsed
back apart. Its ``text`` is the name the state document gives it; its kind's ``parse_key`` reads
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
from dataclasses import dataclass
from typing import ClassVar

from ... import cpuset
from ...errors import InvalidInput
from ...host import sysfs as files


def read_file(root: str, rel: str) -> str | None:
    """The value of the host file ``root/rel``, stripped; None when it does not exist (any other
    error is raised)."""
    return files.value(os.path.join(root, rel), absent=FileNotFoundError)


def write_file(root: str, rel: str, value: str) -> None:
    """Write ``value`` to the host file ``root/rel``: the one writer of sysfs, procfs and cgroupfs
    files (knobs, C-states, hugepage pools, IRQs, CPU masks, cgroups)."""
    with open(os.path.join(root, rel), "w", encoding="ascii") as fh:
        fh.write(value)


class Key:
    """A typed key: a small immutable value. A subclass declares its fields as ``__slots__`` (with
    their types as annotations, and ``DEFAULTS`` for the optional ones), its ``kind``, and the
    ``NAME`` pattern of its text (``str.format`` of its fields). Keys of two classes are never
    equal. (Plain classes, not dataclasses: a hook call imports them all, and a frozen dataclass
    costs half a millisecond to define.)"""

    __slots__ = ("_id", "_text")  # (class name, fields), for equality and hashing; the text, once made
    kind: ClassVar[str]
    NAME: ClassVar[str] = ""
    DEFAULTS: ClassVar[dict] = {}
    FIELDS: ClassVar[tuple[str, ...]] = ()  # every class's slots, the base's first

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
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
    """How one kind of item is read, parsed, formatted, written and validated.

    ``section``: where the state document keeps its records (``knob``: the baseline and a lease's
    C-states; ``isolation``; ``pool``: a lease's hugepages). ``cpus``: its values are CPU sets
    (compared as sets); else plain text (compared as text). ``mask``: a CPU set written as a hex
    mask. ``inherits``: a new item of the kind copies a mask the isolation imposed.
    """

    name: ClassVar[str]
    section: ClassVar[str]
    cpus: ClassVar[bool] = True
    mask: ClassVar[bool] = False
    inherits: ClassVar[bool] = False

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        """The key the state document names ``text`` (``ident``: a task's start time); None when it
        is not one of this kind's."""
        raise NotImplementedError

    def check(self, text: str, limit: int) -> None:
        """InvalidInput when ``text`` is not a value of this kind on a host of ``limit`` CPUs."""
        if self.mask:
            cpuset.parse_mask(text, limit)
        elif self.cpus:
            cpuset.check(text, limit)

    def parse(self, raw: str, item: Item) -> frozenset[int]:
        if self.mask:
            return cpuset.parse_mask(raw)
        return cpuset.parse(raw) if raw.strip() or not item.full else item.full

    def format(self, cpus: frozenset[int]) -> str:
        return cpuset.format_mask(cpus) if self.mask else cpuset.format(cpus)

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
        return files.value(item.where)

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


KINDS: dict[str, Kind] = {}


def register(cls: type[Kind]) -> type[Kind]:
    """Class decorator: one instance of the kind in ``KINDS``, by its name."""
    KINDS[cls.name] = cls()
    return cls


def digits(text: str, most: int) -> int | None:
    """``text`` as a number of at most ``most`` ASCII digits; None otherwise."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= most else None
