"""The partition kinds: a cgroup v2 group's ``cpuset.cpus.exclusive`` and ``cpuset.cpus.partition``.

With ``[hook] isolate = "partition"`` (cgroup v2, Linux 6.7 or later), a started domain's vCPU
groups become remote isolated partitions: the kernel takes their CPUs out of scheduler load
balancing (and, since 6.8, out of unbound workqueues, vmstat and memcg drain). The kernel wants the
partition's CPUs in ``cpuset.cpus.exclusive`` of every group from the root's child down to the vCPU
group, then ``isolated`` in the vCPU group's ``cpuset.cpus.partition``. libvirt lays a domain out on
cgroup v2 as ``machine.slice/machine-qemu\\x2dN\\x2dNAME.scope/libvirt/`` (without systemd,
``machine/qemu-N-NAME.libvirt-qemu/``), the process in the last, each vCPU thread in a threaded
``vcpuN`` below it; a threaded group may be a partition root. Where the vCPU groups share a CPU with
each other or with their emulator (vmtune pins a TCG domain's emulator beside its vCPUs), the kernel
takes none of them as a partition, and the ``libvirt/`` group that holds them all is the partition
(seen to hold on 6.12 in the trixie guest: ``isolated``, its CPUs in ``cpuset.cpus.isolated``).

Both kinds are isolation kinds of the host-state engine: journaled, read back, restored newest
first, a value changed by hand left alone. The claims (``PartitionClaim``: for each partitioned domain,
its QEMU's pid and the CPUs it may partition) decide the values: an exclusive set is its
original plus the CPUs of the partitions below it (shared groups such as ``machine.slice`` hold the
union of every domain's), a vCPU group's partition is ``isolated``. The listing gives the groups in
the order the kernel accepts the writes: the exclusive sets from the top down, then the partitions;
and the recorded ones no longer wanted in the reverse order: the partitions, then the exclusive
sets from the bottom up.

The state document names them ``exclusive:PATH`` and ``partition:PATH``, PATH under the cgroup root
(escaped as a group's name is).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import ClassVar, NamedTuple

from ... import cpuset
from ...host import sysfs
from .base import KINDS, Item, Key, Kind, Listing, inside, key_of, name_of, printable, register, write_list
from .tasks import GONE, Gone

ISOLATED = "isolated"
MAX_DEPTH = 16


class PartitionClaim(NamedTuple):
    """A domain that asked for partitions: its QEMU's pid and the CPUs they may hold."""

    pid: int
    cpus: frozenset[int]


class Path(Key):
    """A group by its path under the cgroup root."""

    __slots__ = ("path",)
    path: str
    prefix: ClassVar[str] = ""

    @property
    def text(self) -> str:
        return key_of(self.prefix, self.path)


class Exclusive(Path, kind="exclusive"):
    __slots__ = ()
    prefix = "exclusive"


class Partition(Path, kind="partition"):
    __slots__ = ()
    prefix = "partition"


def supported(cgroupfs: str) -> str | None:
    """None when this kernel and layout make remote partitions; else why not (one phrase)."""
    if not os.path.exists(os.path.join(cgroupfs, "cgroup.controllers")):
        return "no cgroup v2 here (cgroup v1 cpusets have no partitions)"
    if not os.path.exists(os.path.join(cgroupfs, "cpuset.cpus.isolated")):
        return "this kernel has no remote cpuset partitions (cpuset.cpus.exclusive, Linux 6.7)"
    return None


def _plain_path(cgroupfs: str, path: str) -> bool:
    """Whether ``path`` is a relative group path that resolves inside the cgroup root."""
    parts = path.split("/")
    if not path or len(parts) > MAX_DEPTH or any(p in ("", ".", "..") or "\x00" in p for p in parts):
        return False
    return inside(cgroupfs, os.path.join(cgroupfs, path))


def vcpu_groups(proc: str, cgroupfs: str, pid: int) -> list[str]:
    """The vCPU groups (``…/vcpuN``) of the QEMU ``pid``, by their path under the cgroup root: the
    siblings of its own (emulator) group, or the children of it."""
    text = sysfs.text(os.path.join(proc, str(pid), "cgroup")) or ""
    own = next((line[3:].strip("/") for line in text.splitlines() if line.startswith("0::")), None)
    if not own:
        return []
    for folder in (own, os.path.dirname(own)):
        try:
            names = os.listdir(os.path.join(cgroupfs, folder))
        except OSError:
            continue
        found = sorted((n for n in names if n.startswith("vcpu") and n[4:].isdigit()), key=lambda n: int(n[4:]))
        if found:
            return [f"{folder}/{n}" for n in found]
    return []


def wanted(roots, claims: Iterable[PartitionClaim]) -> dict[str, frozenset[int]]:
    """The partitions the claims ask for: group path -> its CPUs, each inside its domain's. Each
    vCPU group, as a partition of its own; but where the vCPU groups share a CPU with each other
    or with a sibling (the emulator beside its vCPUs, as vmtune pins a TCG domain), the kernel
    takes no sibling as a partition ("not exclusive"): then the group that holds them all (libvirt's
    ``libvirt/``) is the one partition, when every child of it stays inside the domain's CPUs."""
    out: dict[str, frozenset[int]] = {}
    for claim in claims:
        groups = vcpu_groups(roots.proc, roots.cgroupfs, claim.pid)
        mine = {path: cpus for path in groups if (cpus := _cpus(roots.cgroupfs, path)) and cpus <= claim.cpus}
        whole = _holder(roots.cgroupfs, groups, claim.cpus) if mine else None
        if whole is not None:
            out[whole[0]] = whole[1]
        else:
            out.update(mine)
    return out


def _cpus(cgroupfs: str, path: str) -> frozenset[int]:
    """A group's ``cpuset.cpus`` (none when unset or not a CPU list)."""
    raw = sysfs.value(os.path.join(cgroupfs, path, "cpuset.cpus"))
    try:
        return cpuset.parse(raw) if raw else frozenset()
    except Exception:  # noqa: BLE001 - not a CPU list: no partition there
        return frozenset()


def _holder(cgroupfs: str, groups: list[str], cpus: frozenset[int]) -> tuple[str, frozenset[int]] | None:
    """(the group holding the vCPU ``groups``, the CPUs of its children) when the children share a
    CPU and every one is pinned inside ``cpus``; else None (each vCPU group its own partition)."""
    folder = os.path.dirname(groups[0])
    try:
        names = sorted(n for n in os.listdir(os.path.join(cgroupfs, folder))
                       if os.path.isfile(os.path.join(cgroupfs, folder, n, "cpuset.cpus")))
    except OSError:
        return None
    kids = [_cpus(cgroupfs, f"{folder}/{n}") for n in names]
    if sum(len(k) for k in kids) == len(frozenset().union(*kids)):
        return None  # no CPU shared: each vCPU group can be a partition of its own
    if not folder or not all(k and k <= cpus for k in kids):
        return None
    return folder, frozenset().union(*kids)


def _cpuset_on(cgroupfs: str, path: str) -> bool:
    """Whether the group's parent gives it the cpuset controller."""
    parent = os.path.join(cgroupfs, os.path.dirname(path))
    return "cpuset" in (sysfs.value(os.path.join(parent, "cgroup.subtree_control")) or "").split()


def _ancestors(path: str) -> list[str]:
    """The groups from the root's child down to ``path``, ``path`` included."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


class GroupFile(Kind):
    """A file of a cgroup v2 group, the group named by its path. Making or undoing a partition
    resets the affinity of every task in the root cgroup (the kernel's ``update_tasks_cpumask`` of
    the top cpuset; seen on 6.12): ``resets_affinity``."""

    section = "isolation"
    resets_affinity = True
    leaf: ClassVar[str]
    key: ClassVar[type[Path]]

    def parse_key(self, text: str, ident: str = "") -> Key | None:
        path = name_of(text) if text.startswith(self.name + ":") else None
        return self.key(path) if path else None

    def write(self, item: Item, value: str) -> None:
        write_list(item.root, item.rel, value)

    def lookup(self, key: Path, roots, online: frozenset[int] = frozenset()) -> Item | Gone | None:
        if not _plain_path(roots.cgroupfs, key.path):
            return GONE
        folder = os.path.join(roots.cgroupfs, key.path)
        if not os.path.isdir(folder):
            return GONE
        raw = sysfs.value(os.path.join(folder, self.leaf))
        if raw is None and not _cpuset_on(roots.cgroupfs, key.path):
            raw = ""  # the parent turned the cpuset controller off (systemd does, once no unit needs it): unset
        if raw is None:
            return None
        return Item(key, raw, f"{self.leaf} of {printable(key.path)}", roots.cgroupfs, f"{key.path}/{self.leaf}")


@register
class ExclusiveCpus(GroupFile):
    """``cpuset.cpus.exclusive``: while partitions are wanted below the group, its original CPUs
    plus theirs (``Item.full`` carries them); else its original."""

    name = "exclusive"
    leaf = "cpuset.cpus.exclusive"
    key = Exclusive

    def items(self, listing: Listing) -> Iterable[Item]:
        """Both partition kinds' items, in the one order the kernel takes their writes (``items``)."""
        if not listing.claims and not any(isinstance(k, (Exclusive, Partition)) for k in listing.recorded):
            return ()
        return items(listing.roots, listing.claims, listing.recorded)

    def parse(self, raw: str, item: Item) -> frozenset[int]:
        return cpuset.parse(raw) if raw.strip() else frozenset()

    def isolated(self, item: Item, before: str, cpus: frozenset[int], online: frozenset[int]) -> str | None:
        claim = item.full
        if not claim:
            return None
        want = self.parse(before, item) | claim
        return cpuset.format(want) if want != self.parse(before, item) else None


@register
class PartitionState(GroupFile):
    """``cpuset.cpus.partition``: ``isolated`` while the vCPU group is a wanted partition (``Item.full``
    holds its CPUs); else its original (``member``)."""

    name = "partition"
    leaf = "cpuset.cpus.partition"
    key = Partition
    cpus = False  # listed by the exclusive kind, in order with it

    def check(self, text: str, limit: int, key: Key | None = None) -> None:
        return None  # any text the kernel shows ("member", "isolated invalid (...)")

    def isolated(self, item: Item, before: str, cpus: frozenset[int], online: frozenset[int]) -> str | None:
        return ISOLATED if item.full and before.strip() != ISOLATED else None


def items(roots, claims: Iterable[PartitionClaim], recorded: Iterable[Key]) -> Iterator[Item]:
    """The partition items in the order their writes must go (see the module): the wanted ones,
    each carrying the CPUs it gets in ``Item.full``, then the recorded ones no longer wanted."""
    want = wanted(roots, claims)
    exclusive: dict[str, frozenset[int]] = {}
    for path, cpus in want.items():
        for group in _ancestors(path):
            exclusive[group] = exclusive.get(group, frozenset()) | cpus
    keys: list[tuple[Key, frozenset[int]]] = [(Exclusive(g), c) for g, c in sorted(exclusive.items(), key=_depth)]
    keys += [(Partition(p), c) for p, c in sorted(want.items())]
    wanted_keys = {k for k, _ in keys}
    old = [k for k in recorded if isinstance(k, (Exclusive, Partition)) and k not in wanted_keys]
    keys += [(k, frozenset()) for k in sorted((k for k in old if isinstance(k, Partition)), key=lambda k: k.path)]
    keys += [(k, frozenset()) for k in sorted((k for k in old if isinstance(k, Exclusive)),
                                               key=lambda k: (-k.path.count("/"), k.path))]
    for key, claim in keys:
        found = KINDS[key.kind].lookup(key, roots)
        if isinstance(found, Item):
            found.full = claim
            yield found


def _depth(entry: tuple[str, frozenset[int]]) -> tuple[int, str]:
    return entry[0].count("/"), entry[0]


def isolated(roots) -> frozenset[int]:
    """The CPUs the kernel holds in isolated partitions: the root's ``cpuset.cpus.isolated`` (none
    when it is missing or unreadable)."""
    raw = sysfs.value(os.path.join(roots.cgroupfs, "cpuset.cpus.isolated")) or ""
    try:
        return cpuset.parse(raw) if raw else frozenset()
    except Exception:  # noqa: BLE001 - unreadable: none held
        return frozenset()


def refused(roots, pid: int, cpus: frozenset[int]) -> str | None:
    """Why the partitions the QEMU ``pid`` claims (with ``cpus``) are not held by the kernel as
    isolated; None when every one is: its ``cpuset.cpus.partition`` says ``isolated`` and the root's
    ``cpuset.cpus.isolated`` lists its CPUs."""
    want = wanted(roots, [PartitionClaim(pid, cpus)])
    if not want:
        return f"no vCPU group of its QEMU (pid {pid}) under {roots.cgroupfs} is pinned inside CPUs {cpuset.format(cpus)}"
    for path in sorted(want):
        says = sysfs.value(os.path.join(roots.cgroupfs, path, "cpuset.cpus.partition")) or ""
        if says != ISOLATED:
            return f"the kernel says {printable(path)} is {says or 'unreadable'!r}"
    missing = frozenset().union(*want.values()) - isolated(roots)
    return f"the root's cpuset.cpus.isolated lacks CPUs {cpuset.format(missing)}" if missing else None
