"""One reconcile's moves: each item's original value, the value it gets now, and its record.

A record (record.Record) stays in the state for as long as its item is not at its original value:
it goes when the item is restored (the write succeeded), when the item is provably gone (a task
that exited or whose pid was reused, an IRQ or a group whose folder is gone), or when the item was
changed by hand (record.judge: neither its original value nor one the hook wrote: left alone, with
a warning). A restore that fails (record.refused), or an item that cannot be read now, keeps its
record for the next call.

The journal record of a move marks the value found before the write (``mark``), so a hook killed
half-way leaves records the next call settles (record.settle). After a write, ``after`` is what the
kernel (or systemd) reads back, so a value it normalises never looks changed by hand.

**Inherited masks.** A task started while CPUs are isolated inherits its parent's narrowed
affinity, and a new IRQ the narrowed ``default_smp_affinity``; neither has a record. Each pass that
isolates CPUs imposes a housekeeping set (every online CPU less the isolated ones): the history
keeps it as a ``Pair`` (kind ``task``: the set, the CPUs it lacks, since when), and the narrowed
default IRQ mask likewise (kind ``irq``). An unrecorded task born since a pair was made, or an IRQ
that did not exist when the isolation began, whose affinity is that pair's mask on the online CPUs
(offline CPUs may be in a task's mask since Linux 6.2, and are never in a new IRQ's), is taken to
have inherited it: its original value is its own affinity plus the CPUs the mask lacks (for a
task, every CPU that was online). So at every shrink, the last release included, such tasks are widened to the new
housekeeping set, or to every CPU. A pass that moved everything it found keeps only its own pairs
(no task can still hold an older set); a pass that could not (a refused write, a sweep that did
not settle) keeps the older ones too, at most ``MAX_PAIRS`` (the oldest beyond are forgotten, with
a warning: a task still confined to a forgotten set stays so).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ... import cpuset
from ..document import MAX_PAIRS, Isolation, Pair
from ..kinds import CpuMask, Irq, Item, Key
from ..record import Record, Verdict, intend, judge, refused, settle

log = logging.getLogger("vmtune.hoststate")
DEFAULT_IRQ = CpuMask("irq:default")  # new IRQs copy it


@dataclass
class Move:
    item: Item
    original: str  # the item's original value
    want: str  # the value written now
    narrowed: bool  # ``want`` is not ``before``: a record stays after the write


class Moves:
    """One reconcile: the previous isolation, the isolated CPUs wanted, and what was found."""

    def __init__(self, previous: Isolation, cpus: frozenset[int], online: frozenset[int], irqs: frozenset[int],
                 since: float, enabled: Callable[[Key], bool] = lambda key: True, evict: bool = False):
        self.previous = previous
        self.enabled = enabled  # whether an item is isolated at all (an extra turned off: restored)
        self.evict = evict  # a task pinned to isolated CPUs only moves to the others ([hook] isolate_pinned)
        self.cpus, self.online, self.irqs, self.since = cpus, online, irqs, since
        self.records: dict[Key, Record] = {}  # the state's records as of now (journal, then final)
        self.moves: list[Move] = []
        self.by_hand: list[Item] = []
        self.kept: list[str] = []  # labels of records kept because a restore failed or the item is unreadable
        self.seen: set[Key] = set()
        self.stuck = False  # an item that may hold an older imposed mask could not be moved
        self.pairs: list[Pair] = []  # imposed by this pass
        if cpus:
            self.pairs.append(Pair("task", online - cpus, cpus & online, since))

    # -- deciding -----------------------------------------------------------------------------
    def decide(self, item: Item) -> Move | None:
        """Decide the item's value; the move to make, if any."""
        self.seen.add(item.key)
        rec = self.previous.records.get(item.key)  # a task's key has its start time: a reused id is another task
        if rec is not None:
            rec = settle(rec, item.raw, item.same)
        ours = rec is not None and item.kind.deferred  # its live value may lag: whatever it shows is ours
        if rec is not None and not ours and judge(rec, item.raw, item.same) is Verdict.BY_HAND:
            self.by_hand.append(item)
            return None
        before = rec.before if rec is not None else (self._inherited(item) or item.raw)
        isolated = item.kind.isolated(item, before, self.cpus, self.online) if self.enabled(item.key) else None
        if isolated is None and self.evict and item.key.kind == "task":
            isolated = self._evicted(item, before)
        narrowed = isolated is not None
        want = before if isolated is None else isolated
        if narrowed and item.key == DEFAULT_IRQ:  # new IRQs copy it
            orig, target = item.kind.parse(before, item), item.kind.parse(want, item)
            self.pairs.append(Pair("irq", target, orig - target, self.since))
        if item.same(item.raw, want) and not ours:
            if narrowed:
                self.records[item.key] = Record(item.key, before, item.raw, None, item.label)
            return None
        self.records[item.key] = intend(item.key, before, want, item.raw, item.label)
        move = Move(item, before, want, narrowed)
        self.moves.append(move)
        return move

    def _evicted(self, item: Item, before: str) -> str | None:
        """A task pinned to isolated CPUs only: the others (``evict``); None for any other task."""
        pinned = item.kind.parse(before, item) & self.online
        rest = self.online - self.cpus
        return item.kind.format(rest, item) if pinned and pinned <= self.cpus and rest else None

    def _inherited(self, item: Item) -> str | None:
        """The original value of an unrecorded item that holds a mask the hook imposed; None if none."""
        if not item.kind.inherits:
            return None
        for pair in self.previous.pairs:
            if pair.kind != item.key.kind or not self._holds(item, pair):
                continue
            if isinstance(item.key, Irq):
                if item.key.number not in self.irqs:
                    return item.kind.format(item.cpus | pair.removed, item)
            elif item.born is not None and item.born >= pair.since:
                return item.kind.format(item.cpus | pair.removed, item)
        return None

    def _holds(self, item: Item, pair: Pair) -> bool:
        """Whether ``item`` holds ``pair``'s mask, as far as online CPUs go: since Linux 6.2 a task
        keeps the offline CPUs of its mask (so its child inherits them too), and a new IRQ gets the
        default mask less the offline CPUs."""
        return bool(item.cpus & self.online) and item.cpus & self.online == pair.mask & self.online

    def unseen(self) -> list[tuple[Key, Record]]:
        """The previous records whose item no listing gave."""
        return sorted(((k, r) for k, r in self.previous.records.items() if k not in self.seen),
                      key=lambda kr: kr[0].text)

    def keep(self, key: Key, rec: Record) -> None:
        """A record whose item cannot be read now: kept as it is."""
        self.seen.add(key)
        self.records[key] = rec
        self.kept.append(rec.label or key)

    def gone(self, key: Key) -> None:
        """A record whose item no longer exists: dropped."""
        self.seen.add(key)

    # -- after the writes ----------------------------------------------------------------------
    def written(self, move: Move, readback: str | None) -> None:
        item = move.item
        if move.narrowed:
            self.records[item.key] = Record(item.key, move.original, readback or move.want, None, item.label)
        else:
            self.records.pop(item.key, None)  # restored

    def refused(self, move: Move, exc: OSError) -> bool:
        """A write failed: the record stays while the item is not at its original value. True if kept."""
        item = move.item
        if any(self._holds(item, p) for p in self.previous.pairs + self.pairs):
            self.stuck = True  # it still holds an imposed set: so may what starts from it (a child, an IRQ)
        kept = refused(Record(item.key, move.original, move.want, None, item.label), item.raw, item.same)
        if kept is None or (item.kind.exits and exc.errno == errno.ESRCH):
            self.records.pop(item.key, None)  # still at its original value, or exited
            return False
        self.records[item.key] = kept
        self.kept.append(item.label)
        return True

    def journal(self) -> Isolation:
        """What to commit before the writes: every record, with the values found (``was``)."""
        records = dict(self.records)
        named = {key.text for key in records}  # a task's id is its name: a new task's record wins
        for key, rec in self.previous.records.items():
            if key not in self.seen and key.text not in named:
                records[key] = rec  # not looked up yet
        return Isolation(self.cpus, self.irqs, self._merged(self.previous.pairs + self.pairs, warn=False), records)

    def final(self, settled: bool) -> Isolation | None:
        """The isolation record after the pass (None: nothing isolated, nothing left to restore).
        ``settled``: every task found was moved, none could still hold an older mask."""
        older = [] if settled and not self.stuck else list(self.previous.pairs)
        if not self.cpus:
            pairs = self._merged(older + self.pairs) if self.records or older else []
            return Isolation(frozenset(), self.irqs, pairs, dict(self.records)) if self.records or pairs else None
        return Isolation(self.cpus, self.irqs, self._merged(older + self.pairs), dict(self.records))

    def _merged(self, pairs: list[Pair], warn: bool = True) -> list[Pair]:
        """One pair per (kind, mask, removed), the earliest; the newest ``MAX_PAIRS`` of them."""
        seen: dict[tuple[str, frozenset[int], frozenset[int]], Pair] = {}
        for pair in pairs:
            k = (pair.kind, pair.mask, pair.removed)
            if k not in seen or pair.since < seen[k].since:
                seen[k] = pair
        out = sorted(seen.values(), key=lambda p: p.since)
        if len(out) > MAX_PAIRS and warn:
            lost = out[:-MAX_PAIRS]
            log.warning("forgot %d older CPU set(s) the isolation imposed (%s): a task still confined to one "
                        "of them stays so", len(lost), ", ".join(cpuset.format(p.mask) for p in lost[:3]))
        return out[-MAX_PAIRS:]
