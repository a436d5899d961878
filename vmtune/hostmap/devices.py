"""The map's passthrough devices: each PCI device and mdev a domain passes through, where it hangs
on the host, and the domain that holds it; then each passthrough-capable PCI device that no domain
holds, free (``Devices.assignable``: bound to vfio-pci, or given with ``--nodedev``).

Where a device hangs is ``locality.locate``'s answer (the host's devices: sysfs, ``--nodedev``,
libvirt's node devices), as the placement and ``vmtune plan`` read it. A device with a node is
shown under that node; one the host knows on no node, or does not know, in the host's own list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..placement import locality
from ..host import Host
from ..host.devices import PCI


@dataclass(frozen=True)
class MapDevice:
    """One passthrough device of one domain."""

    kind: str  # host.devices PCI or MDEV
    key: str  # its PCI address, or the mdev's UUID
    what: str  # "hostdev 0000:3b:00.0", "interface hostdev ...", "disk nvme ...", "mdev UUID"; "pci ADDR" free
    domain: int | None  # index into HostMap.domains; None: free (no domain holds it)
    known: bool  # the host knows it (False: it may be another host's)
    node: int | None  # the NUMA node it hangs off; None: none, or not known
    via: str | None = None  # an mdev's parent PCI device, when the host knows it
    driver: str | None = None  # the host driver a PCI device is bound to now ("vfio-pci"), when known

    @property
    def free(self) -> bool:
        return self.domain is None

    @property
    def how(self) -> str:
        """How the domain uses it, without its key: ``hostdev``, ``interface hostdev``, ``disk nvme``,
        ``mdev (on 0000:3b:00.0)``."""
        how = " ".join(w for w in self.what.split() if w != self.key) or self.kind
        return f"{how} (on {self.via})" if self.via else how

    def to_dict(self, names: Sequence[str]) -> dict:
        return {"kind": self.kind, "key": self.key, "what": self.what,
                "domain": None if self.free else names[self.domain], "index": self.domain, "known": self.known,
                "node": self.node, "via": self.via, "driver": self.driver}


def collect_devices(host: Host, parsed: Sequence) -> tuple[MapDevice, ...]:
    """Every passthrough device of the domains ``parsed`` (``audit.Report.parsed``), in domain
    order, each in its document order; then the host's passthrough-capable PCI devices that none
    of them holds (nor carves an mdev from), free, by address. Raises InvalidInput where a device
    source names a node the host lacks, as the placement does."""
    drivers = {dev.key: dev.driver for dev in host.devices.assignable()}
    out, held = [], set()
    for index, dom in enumerate(parsed):
        for use, where in locality.locate(host, dom).located:
            out.append(MapDevice(use.kind, use.key, use.what, index, where.known,
                                 where.node if where.known else None, where.via,
                                 drivers.get(use.key) if use.kind == PCI else None))
            held |= {use.key, where.via}
    for dev in host.devices.assignable():
        if dev.key not in held:
            where = dev.location
            out.append(MapDevice(PCI, dev.key, f"pci {dev.key}", None, where.known,
                                 where.node if where.known else None, None, dev.driver))
    return tuple(out)
