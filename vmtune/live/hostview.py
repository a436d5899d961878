"""The host of a libvirt URI: one rule for every command (issue 27, "one host per URI").

``of(conn, uri, sysfs=..., proc=..., nodedev=...)`` decides it, for ``map``, ``plan``, ``apply``
and ``doctor --connect`` alike:

- ``uri`` is this machine's system QEMU daemon (``local_system``: ``qemu:///system``, or
  ``qemu+unix:///system`` on a socket of this machine): the host is this machine's sysfs (the
  ``sysfs`` tree, ``VMTUNE_SYSFS`` for the CLI): its topology, L3 domains, core kinds, vendor,
  ``isolcpus``, free hugepages and pools, and where each device hangs, as ``rewrite`` and
  ``topology`` read it; with a connection, the guest arches its KVM runs come from libvirt's
  capabilities, as before.
- any other URI (another machine, a session daemon, the test driver): the host libvirt describes,
  ``host(conn)``: ``getCapabilities()``, the free hugepages of each node (``getFreePages``) and its
  node devices (``listAllDevices``). Nothing of this machine is read for it.

``--nodedev`` files come first in either case. libvirt's capabilities list each node's hugepage
*pool*; ``getFreePages`` says how many of those pages are free now, which is what placement and
the audit want (the pages of running domains are already taken).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .. import cpuset
from ..host import Host
from . import connect


def local_system(uri: str | None) -> bool:
    """Whether ``uri`` is this machine's system QEMU daemon, whose host is this machine's sysfs (any
    other URI's host is the one libvirt describes: one host per URI). None is the default URI."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri or connect.DEFAULT_URI)
    return (parts.scheme in ("qemu", "qemu+unix") and parts.hostname in (None, "", "localhost")
            and parts.path == "/system")


@dataclass(frozen=True)
class Seen:
    """The host of a URI, and where it was read."""

    uri: str
    host: Host | None  # None: this machine's host, but no sysfs tree to read it from (the doctor's trees)
    local: bool  # read from this machine's sysfs (``uri`` is its system daemon)
    sysfs: str | None = None  # the tree, when local
    pools: Mapping[tuple[int, int], int] = field(default_factory=dict, compare=False)  # libvirt's, when not local

    @property
    def page_totals(self) -> Mapping[tuple[int, int], int]:
        """(node, page size KiB) -> pages in the pool (the host's cells have the free ones)."""
        if not self.local:
            return self.pools
        if self.sysfs is None:
            return {}
        from ..hostmap.live import page_totals  # sysfs's nr_hugepages; only the map asks

        return page_totals(self.sysfs)

    @property
    def source(self) -> str:
        return f"sysfs {self.sysfs}" if self.local else f"libvirt {self.uri}"

    def describe(self) -> str:
        """``i686, 2 nodes, CPUs 0-15 (libvirt test:///default)``."""
        if self.host is None:
            return f"unknown (no sysfs tree for {self.uri})"
        n = len(self.host.cells)
        return (f"{self.host.arch}, {n} node{'s' if n != 1 else ''}, CPUs {cpuset.format(frozenset(self.host.cpus))}"
                f" ({self.source})")

    def to_dict(self) -> dict:
        """What the live commands' ``--json`` say of the host they used."""
        out: dict = {"uri": self.uri, "from": "sysfs" if self.local else "libvirt", "sysfs": self.sysfs}
        if self.host is not None:
            out.update(arch=self.host.arch, cpus=cpuset.format(frozenset(self.host.cpus)),
                       isolated=cpuset.format(self.host.isolated),
                       nodes={str(c.id): cpuset.format(frozenset(c.cpus)) for c in self.host.cells})
        return out


def of(conn, uri: str | None, *, sysfs: str | None = "/sys", proc: str | None = None,
       nodedev: Sequence[str] = ()) -> Seen:
    """The host of ``uri`` (see the module): this machine's ``sysfs`` tree for its system daemon
    (``conn`` may then be None: libvirt is not needed to know it; ``sysfs`` None gives no host),
    else the host of ``conn``, libvirt's. The devices of the ``nodedev`` files are found first."""
    uri = uri or connect.DEFAULT_URI
    if local_system(uri):
        if sysfs is None:
            return Seen(uri, None, True)
        found = Host.from_sysfs(sysfs, proc=proc)
        found.devices.check()  # a numa_node naming a node the host lacks is refused, used or not
        if conn is not None:  # the arches its KVM runs natively, as libvirt says
            found = dataclasses.replace(found, guest_arches=Host.from_capabilities(conn.getCapabilities()).guest_arches)
        seen = Seen(uri, found, True, sysfs)
    else:
        if conn is None:
            raise ValueError(f"the host of {uri} is libvirt's: it needs a connection")
        caps = Host.from_capabilities(conn.getCapabilities())
        totals = {(cell.id, size): n for cell in caps.cells for size, n in cell.pages.items()}
        seen = Seen(uri, _described(conn, caps), False, None, totals)
    if conn is not None and seen.host is not None:
        seen = dataclasses.replace(seen, host=with_versions(seen.host, conn))
    if nodedev and seen.host is not None:
        from ..host import nodedev as nodedevs

        host = seen.host.with_devices(nodedevs.load(list(nodedev), frozenset(seen.host.node_ids)))
        seen = dataclasses.replace(seen, host=host)
    return seen


def with_versions(host: Host, conn) -> Host:
    """``host`` with the libvirt and hypervisor versions ``conn`` reports (what a rewrite may write
    depends on them: passes/iothreads.py); left unknown where the connection does not say."""
    def triple(number: int) -> tuple[int, int, int] | None:
        return (number // 1000000, number // 1000 % 1000, number % 1000) if number and number > 0 else None

    try:
        lib = triple(conn.getLibVersion())
        hyp = triple(conn.getVersion())
    except Exception:  # noqa: BLE001 - a connection that does not say: unknown, as offline
        return host
    return dataclasses.replace(host, libvirt_version=lib, qemu_version=hyp)


def free_pages(conn, host: Host) -> dict[int, dict[int, int]]:
    """Node -> {page size KiB: free pages}, for the hugepage sizes the capabilities list."""
    lv = connect.libvirt()
    out: dict[int, dict[int, int]] = {}
    for cell in host.cells:
        sizes = sorted(cell.pages)
        if not sizes:
            continue
        try:
            found = conn.getFreePages(sizes, cell.id, 1)
        except lv.libvirtError:
            continue  # not supported here: keep the pool counts of the capabilities
        counts = (found or {}).get(cell.id, {})
        out[cell.id] = {int(size): int(count) for size, count in counts.items() if int(size) in cell.pages}
    return out


def devices(conn, nodes: frozenset[int]):
    """libvirt's node devices as a devices Table (host/nodedev.py): where each PCI device, NIC and
    disk hangs; none when libvirt will not list them."""
    from ..host import nodedev
    from ..host.devices import NO_DEVICES

    lv = connect.libvirt()
    try:
        found = [nodedev.parse(d.XMLDesc(0), f"node device {d.name()}") for d in conn.listAllDevices(0)]
    except (lv.libvirtError, AttributeError):
        return NO_DEVICES
    return nodedev.table(found, nodes)


def _described(conn, caps: Host) -> Host:
    free = free_pages(conn, caps)
    cells = tuple(dataclasses.replace(c, pages={**c.pages, **free.get(c.id, {})}) for c in caps.cells)
    found = dataclasses.replace(caps, cells=cells)
    return found.with_devices(devices(conn, frozenset(found.node_ids)))


def host(conn) -> Host:
    """The Host libvirt describes for ``conn``: topology from the capabilities, free hugepages, and
    where its devices hang (libvirt's node devices). Nothing of this machine is read: ``of`` says
    which host a URI has."""
    return _described(conn, Host.from_capabilities(conn.getCapabilities()))
