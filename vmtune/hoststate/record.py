"""The one record type, and the rules that judge a record against the live value.

A ``Record`` is one value the engine changed: its key, the value it had before (``before``), and
what the kernel read back after the write (``after``). While it is a journal entry, committed to
the state file before the write, ``mark`` holds the value found when it was committed; a hook
killed between the commit and the write leaves it so, and the next call settles it (``settle``).

The rules, written once for every kind:

- ``judge``: a live value is the original (``before``), one of ours (``after``, or ``mark`` while
  pending), gone (the item no longer exists), or someone else's: changed by hand since vmtune wrote
  it, which is left alone, with a warning;
- ``settle``: a journal entry whose item still holds ``mark`` was never written: it is dropped when
  ``mark`` was the original, else it goes back to what it was before (``after = mark``); any
  other value makes it an ordinary record, judged as any other;
- ``refused``: a restore the kernel refuses keeps its record, as the live value now, so the next
  call tries it again (unless the item is at its original value after all).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

from .kinds import KINDS, Key, Kind

Same = Callable[[str, str], bool]


def plain(a: str, b: str) -> bool:
    return a.strip() == b.strip()


@dataclass
class Record:
    key: Key
    before: str
    after: str
    mark: str | None = None  # journal: the live value when the record was committed before the write
    label: str = ""

    @property
    def kind(self) -> Kind:
        return KINDS[self.key.kind]

    @property
    def pending(self) -> bool:
        return self.mark is not None


class Verdict(enum.Enum):
    GONE = "gone"
    ORIGINAL = "original"
    OURS = "ours"
    BY_HAND = "by hand"


def judge(rec: Record, live: str | None, same: Same = plain) -> Verdict:
    """What the live value of ``rec``'s item says of it."""
    if live is None:
        return Verdict.GONE
    if same(live, rec.before):
        return Verdict.ORIGINAL
    if same(live, rec.after) or (rec.mark is not None and same(live, rec.mark)):
        return Verdict.OURS
    return Verdict.BY_HAND


def intend(key: Key, before: str, want: str, live: str, label: str = "") -> Record:
    """The journal entry of a write of ``want`` over ``live``; ``before`` is the original value."""
    return Record(key, before, want, live, label)


def settle(rec: Record, live: str | None, same: Same = plain) -> Record | None:
    """A journal entry made exact against the live value (see the module); None: nothing changed."""
    if rec.mark is None:
        return rec
    if live is None or same(live, rec.mark):
        return None if live is None or same(rec.mark, rec.before) else replace(rec, after=rec.mark, mark=None)
    return replace(rec, mark=None)


def written(rec: Record, readback: str | None, same: Same = plain) -> Record | None:
    """The record of a write, as the kernel read it back; None when the value is the original."""
    after = rec.after if readback is None else readback
    return None if same(after, rec.before) else replace(rec, after=after, mark=None)


def refused(rec: Record, live: str | None, same: Same = plain) -> Record | None:
    """The record to keep after the kernel refused to write ``rec.before`` back: the live value is
    ours still, and the next call tries again. None when there is nothing left to restore."""
    if live is None or same(live, rec.before):
        return None
    return replace(rec, after=live, mark=None)
