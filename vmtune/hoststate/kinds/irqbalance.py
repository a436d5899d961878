"""The irqbalance kind: the CPUs a running irqbalance bans, set at runtime over its control socket.

irqbalance (1.2 and later, built with its UI socket, as Debian's is) listens on a unix stream
socket: ``RUNFS/irqbalance/irqbalance<PID>.sock``, or, when it could not bind that file (no
``/run/irqbalance``), an abstract address of 108 NUL bytes. It takes one request per connection,
from root only (it checks the sender's credentials, which the kernel attaches):

- ``setup`` answers ``SLEEP 10 [IRQ n LOAD l DIFF d CLASS c ...] BANNED 00000002``: the banned
  CPUs as a hex mask (comma-grouped past 32 CPUs);
- ``settings cpus LIST`` replaces the banned CPUs with the CPU list ``LIST``, from its next cycle;
  ``settings cpus NULL`` gives it back its own ban: ``IRQBALANCE_BANNED_CPUS`` or
  ``IRQBALANCE_BANNED_CPULIST`` from its environment, else the ``isolated`` and ``nohz_full`` CPUs.

While CPUs are isolated the ban is its own plus the isolated CPUs (``isolated``). The item's value
is the ban as a CPU list; its ``full`` is irqbalance's own ban (what ``NULL`` gives back), so that a
restore to it says ``NULL`` and irqbalance follows its own rules again. A ban takes effect at its
next cycle: a write reads back as what was written (``read_back``), and the kind is ``deferred``:
while the hook holds a record, whatever ``setup`` shows (the ban before, or one of the hook's own
not applied yet) is the hook's, and the ban is sent again at every call, so that the last one is
what irqbalance applies. A ban set by hand over the socket while CPUs are isolated is replaced at
the next call. The key is the daemon's pid and start time: a restarted irqbalance is another item,
whose ban is set again.

Each request is sent in one write, and its answer read to the end: irqbalance 1.9.2 takes a
connection closed without a request for root replaying its last one, and may die of SIGPIPE.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

from ... import cpuset
from ...errors import InvalidInput
from ...host import sysfs as host_sysfs
from .base import Item, Key, Kind, Listing, digits, register
from .tasks import GONE, Gone, Started, named, stat_fields

log = logging.getLogger("vmtune.hoststate")

SOCKET_DIR = "irqbalance"  # under the run root
ABSTRACT = b"\0" * 108
TIMEOUT_S = 2.0
MAX_REPLY = 1 << 16
ENV = ("IRQBALANCE_BANNED_CPUS", "IRQBALANCE_BANNED_CPULIST")  # hex mask; CPU list (the first set wins)


class Irqbalance(Started, kind="irqbalance", name="irqbalance:{pid}"):
    """The running irqbalance, known by its pid and start time: a restarted one is another."""

    __slots__ = ("pid", "start")


def request(address: str | bytes, text: str) -> bytes:
    """Send one request to irqbalance's socket at ``address`` and read its answer to the end.
    OSError when there is no such socket or it does not answer in ``TIMEOUT_S``."""
    import socket  # here: only a host with irqbalance running needs it

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT_S)
        sock.connect(address)
        sock.sendall(text.encode("ascii"))
        chunks: list[bytes] = []
        while sum(map(len, chunks)) < MAX_REPLY:
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def banned(reply: bytes) -> frozenset[int] | None:
    """The CPUs of ``setup``'s ``BANNED`` mask; None when the reply has none (no permission: the
    daemon closes without a word)."""
    words = reply.decode("ascii", "replace").split()
    if "BANNED" not in words or words.index("BANNED") + 1 >= len(words):
        return None
    try:
        return cpuset.parse_mask(words[words.index("BANNED") + 1])
    except InvalidInput:
        return None


def address(roots, pid: int) -> str | bytes | None:
    """The daemon's socket: its file when there is one, else the abstract address, which is this
    machine's (so none for a host under another proc root: a test's tree)."""
    path = os.path.join(roots.runfs, SOCKET_DIR, f"irqbalance{pid}.sock")
    if os.path.exists(path):
        return path
    return ABSTRACT if os.path.realpath(roots.proc) == "/proc" else None


def own_ban(roots, pid: int) -> frozenset[int]:
    """What ``settings cpus NULL`` gives back: the ban of the daemon's environment, else the
    kernel's isolated and nohz_full CPUs."""
    environ = (host_sysfs.text(os.path.join(roots.proc, str(pid), "environ")) or "").split("\0")
    found = dict(v.split("=", 1) for v in environ if "=" in v)
    for name, parse in zip(ENV, (cpuset.parse_mask, cpuset.parse)):
        if found.get(name, "").strip():
            try:
                return parse(found[name].strip())
            except InvalidInput:
                return frozenset()
    cpu_dir = os.path.join(roots.sysfs, host_sysfs.CPU_DIR)
    return host_sysfs.cpu_list(host_sysfs.text(os.path.join(cpu_dir, "isolated"))) | \
        host_sysfs.cpu_list(host_sysfs.text(os.path.join(cpu_dir, "nohz_full")))


@register
class IrqbalanceBan(Kind):
    name = "irqbalance"
    section = "isolation"
    deferred = True  # a ban shows in ``setup`` from irqbalance's next cycle on
    extras = {"irqbalance": "isolate_irqbalance"}

    def items(self, listing: Listing) -> Iterable[Item]:
        """The running irqbalance's ban, when it takes one over its socket; else, while CPUs are
        isolated, one warning: it may move IRQs back onto them. With no CPU isolated nothing is
        looked for: a ban the hook set is found again by its record."""
        roots, cpus, on = listing.roots, listing.cpus, "irqbalance" in listing.extras
        if not cpus:
            return []
        item, pid = find(roots) if on else (None, None)
        if item is not None:
            return [item]
        pid = pid if on else (named(roots.proc, "irqbalance") or [None])[0]
        if pid is not None:
            why = "its socket does not answer (a build without it, or not root)" if on else \
                "[hook] isolate_irqbalance is off"
            log.warning("irqbalance is running (pid %d) and %s: it may move IRQs back onto the isolated CPUs %s "
                        "(stop it, or give it IRQBALANCE_BANNED_CPULIST)", pid, why, cpuset.format(cpus))
        return []

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        head, _, n = text.partition(":")
        pid, start = (digits(n, 10), digits(ident, 20)) if head == "irqbalance" else (None, None)
        return None if pid is None or start is None else Irqbalance(pid, start)

    def extra(self, key: Key) -> str | None:
        return "irqbalance"

    def parse(self, raw: str, item: Item) -> frozenset[int]:
        return cpuset.parse(raw)

    def isolated(self, item: Item, before: str, cpus: frozenset[int], online: frozenset[int]) -> str | None:
        orig = self.parse(before, item)
        return self.format(orig | cpus) if cpus and orig | cpus != orig else None

    def read(self, item: Item) -> str | None:
        try:
            cpus = banned(request(item.where if item.rel else ABSTRACT, "setup"))
        except OSError:
            return None
        return None if cpus is None else cpuset.format(cpus)

    def read_back(self, item: Item, value: str) -> str | None:
        return value  # irqbalance applies a ban at its next cycle

    def write(self, item: Item, value: str) -> None:
        wanted = self.parse(value, item)
        ban = "NULL" if wanted == item.full or not wanted else cpuset.format(wanted)
        request(item.where if item.rel else ABSTRACT, f"settings cpus {ban}")

    def lookup(self, key: Irqbalance, roots, online: frozenset[int] = frozenset()) -> Item | Gone | None:
        if started(roots.proc, key.pid) != key.start:
            return GONE
        return _item(roots, key.pid, key.start)


def started(proc: str, pid: int) -> int | None:
    """The start time of process ``pid`` (``/proc/PID/stat`` field 22); None when it is gone."""
    fields = stat_fields(host_sysfs.text(os.path.join(proc, str(pid), "stat")) or "")
    return int(fields[19]) if fields and len(fields) > 19 and fields[19].isdigit() else None


def _item(roots, pid: int, start: int) -> Item | None:
    where = address(roots, pid)
    if where is None:
        return None
    rel = os.path.relpath(where, roots.runfs) if isinstance(where, str) else ""
    item = Item(Irqbalance(pid, start), "", f"irqbalance[{pid}]", roots.runfs, rel, own_ban(roots, pid))
    raw = item.kind.read(item)
    if raw is None:
        return None
    item.raw = raw
    return item


def find(roots) -> tuple[Item | None, int | None]:
    """(the running irqbalance's item, its pid): the item is None when its socket does not answer
    (a build without it, or not root); the pid is None when no irqbalance runs."""
    pids = named(roots.proc, "irqbalance")
    if not pids:
        return None, None
    start = started(roots.proc, pids[0])
    return (None if start is None else _item(roots, pids[0], start)), pids[0]
