"""The host-state engine: journal, write, read back, settle, restore; for any kind, with tuned's lifecycle.

A ``Knob`` is a key and the value vmtune wants in it. The lifecycle of a change:

1. ``intend`` / ``complete``: the journal, a pending record for every knob not at its value yet,
   committed to the state file (by the caller) before anything is written;
2. ``apply``: write each value, read back what the kernel made of it, and return the records as
   read back (a knob still at its original value after the write gets none);
3. ``settle``: after a hook that died, each journal entry made exact against the live value
   (record.py's rule);
4. ``restore``: newest first, write ``before`` back where the live value is still ours; a value
   changed by hand since is left alone, with a warning; a restore the kernel refuses keeps its
   record in ``failed``, to be tried again; ``verify`` lists the records that drifted.

The isolation (isolation/) decides its own values and uses the same record rules and ``write``.
Every item is found through its kind (``lookup``): the kinds' table is the only place that knows
where a key lives.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from .kinds import GONE, KINDS, Item, Key
from .record import Record, Verdict, intend as journal_entry, judge, refused, settle as settle_one, written

log = logging.getLogger("vmtune.hoststate")


class Knob(NamedTuple):
    """A key and the value vmtune wants in it."""

    key: Key
    want: str


def lookup(key: Key, roots, online: frozenset[int] = frozenset()):
    """The live item of ``key``; ``GONE``; or None when it cannot be read now."""
    return KINDS[key.kind].lookup(key, roots, online)


def live(key: Key, roots) -> str | None:
    """The live value of ``key``; None when its item does not exist."""
    found = lookup(key, roots)
    return found.raw if isinstance(found, Item) else None


def write(item: Item, value: str) -> str | None:
    """Write ``value`` over the item; what the kernel reads back. OSError when it refuses."""
    item.kind.write(item, value)
    return item.kind.read_back(item, value)


def intend(roots, knobs: list[Knob]) -> list[Record]:
    """The journal of an ``apply``: a pending record for every knob not at its value yet."""
    out = []
    for knob in knobs:
        now = live(knob.key, roots)
        if now is not None and now != knob.want:
            out.append(journal_entry(knob.key, now, knob.want, now))
    return out


def complete(roots, saved: list[Record], knobs: list[Knob]) -> tuple[list[Record], list[Knob]]:
    """What is still missing for the host to be as ``saved`` says (verify, never assume): (journal
    records for the knobs not saved yet and not at their value, the saved knobs found back at their
    original value). A saved knob at any other value was changed by hand: left alone."""
    by_key = {r.key: r for r in saved}
    fresh: list[Record] = []
    again: list[Knob] = []
    for knob in knobs:
        now = live(knob.key, roots)
        if now is None or now == knob.want:
            continue
        rec = by_key.get(knob.key)
        if rec is None:
            fresh.append(journal_entry(knob.key, now, knob.want, now))
        elif judge(rec, now) is Verdict.ORIGINAL:
            again.append(knob)
    return fresh, again


def settle_journal(roots, records: list[Record]) -> list[Record]:
    """The journal entries of a hook that died, made exact (record.settle); the others as they are."""
    out = []
    for rec in records:
        rec = settle_one(rec, live(rec.key, roots)) if rec.pending else rec
        if rec is not None:
            out.append(rec)
    return out


def apply(roots, knobs: list[Knob], dry_run: bool = False) -> list[Record]:
    """Set every knob that is not already at its value; return what was changed, in order. A knob
    that cannot be written is logged and skipped (the rest of the host still gets tuned)."""
    saved: list[Record] = []
    for knob in knobs:
        item = lookup(knob.key, roots)
        if not isinstance(item, Item) or item.raw == knob.want:
            continue
        if dry_run:
            log.info("dry run: would set %s: %s -> %s", knob.key.text, item.raw, knob.want)
            continue
        try:
            back = write(item, knob.want)
        except OSError as exc:
            log.warning("cannot set %s to %s: %s", knob.key.text, knob.want, exc.strerror or exc)
            continue
        rec = written(journal_entry(knob.key, item.raw, knob.want, item.raw), back) if back is not None else None
        if rec is not None:
            saved.append(rec)
    if saved:
        log.info("host tuned: %d value(s) changed", len(saved))
    return saved


def verify(roots, saved: list[Record]) -> list[tuple[Key, str, str | None]]:
    """The records whose live value is no longer what vmtune wrote: (key, wrote, now)."""
    drifted = []
    for rec in saved:
        now = live(rec.key, roots)
        if now != rec.after:
            drifted.append((rec.key, rec.after, now))
    return drifted


def restore(roots, saved: list[Record], dry_run: bool = False, failed: list[Record] | None = None) -> list[Key]:
    """Write back the values ``apply`` saved, newest first; return the keys left alone.

    A value someone changed since vmtune wrote it is theirs now: left alone, with a warning. A value
    the kernel refuses to take back is logged and skipped, and its record goes into ``failed``
    (oldest first), for the caller to keep and try again.
    """
    left: list[Key] = []
    for rec in reversed(saved):
        item = lookup(rec.key, roots)
        now = item.raw if isinstance(item, Item) else None
        verdict = judge(rec, now)
        if verdict is Verdict.GONE:
            log.warning("%s is gone; not restored", rec.key.text)
            left.append(rec.key)
        elif verdict is Verdict.BY_HAND:
            log.warning("%s was changed since vmtune set it to %s (now %s); left alone, not restored to %s",
                        rec.key.text, rec.after, now, rec.before)
            left.append(rec.key)
        elif verdict is Verdict.OURS and dry_run:
            log.info("dry run: would restore %s: %s -> %s", rec.key.text, now, rec.before)
        elif verdict is Verdict.OURS:
            try:
                item.kind.write(item, rec.before)  # no read-back: the record goes either way
            except OSError as exc:
                log.warning("cannot restore %s to %s: %s%s", rec.key.text, rec.before, exc.strerror or exc,
                            "; kept, to try again at the next start or stop" if failed is not None else "")
                left.append(rec.key)
                kept = refused(rec, now)
                if failed is not None and kept is not None:
                    failed.insert(0, kept)
    return left


__all__ = ["GONE", "Knob", "apply", "complete", "intend", "live", "lookup", "restore", "settle_journal", "verify", "write"]
