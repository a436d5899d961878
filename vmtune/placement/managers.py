"""Domains that a manager writes anew: OpenStack Nova, oVirt, KubeVirt, OpenNebula.

Each of them keeps its own record of the VM and regenerates the libvirt XML from it (at a hard
reboot, a migration, a resize, a start), so a tuning written into the XML is lost there. Each
marks the domains it writes in ``<metadata>``, in a namespace of its own. The rewrite still tunes
such a domain (the user may know it will not be regenerated soon), with a warning that names the
manager and its own knobs for the same tuning.
"""

from __future__ import annotations

from typing import NamedTuple

from ..xml.model import Domain


class Manager(NamedTuple):
    name: str
    namespace: str  # the start of the namespace of its <metadata> element
    element: str  # how the warning names its mark
    knobs: str  # where the same tuning is set in it


MANAGERS = (
    Manager("OpenStack Nova", "http://openstack.org/xmlns/libvirt/nova/", "<nova:instance>",
            "the flavor's extra specs (hw:cpu_policy=dedicated, hw:emulator_threads_policy=share, "
            "hw:mem_page_size=large, hw:numa_nodes; hw:cpu_realtime=yes with hw:cpu_realtime_mask=^0) and the "
            "image's properties (hw_disk_bus=virtio, hw_vif_model=virtio, hw_vif_multiqueue_enabled=true)"),
    Manager("oVirt", "http://ovirt.org/vm/", "<ovirt-vm:vm>",
            "the VM's settings (optimized for High Performance: CPU pinning, NUMA pinning, the hugepages custom "
            "property)"),
    Manager("KubeVirt", "http://kubevirt.io", "<kubevirt>",
            "the VirtualMachineInstance's spec.domain (cpu.dedicatedCpuPlacement, cpu.isolateEmulatorThread, "
            "cpu.realtime, cpu.numa.guestMappingPassthrough, memory.hugepages, ioThreadsPolicy)"),
    Manager("OpenNebula", "http://opennebula.org/xmlns/libvirt/", "<one:vm>",
            "the VM template (CPU_MODEL, TOPOLOGY with PIN_POLICY, HUGEPAGE_SIZE, VIRTIO_QUEUES)"),
)


_NAMESPACES = tuple(known.namespace for known in MANAGERS)  # for one test of a child's namespace against all


def manager(dom: Domain) -> Manager | None:
    """The manager that marked ``dom`` in its ``<metadata>``, if any."""
    metadata = dom.find("metadata")
    if metadata is None:
        return None
    for child in metadata:
        tag = child.tag if isinstance(child.tag, str) else ""
        space = tag[1:].partition("}")[0] if tag.startswith("{") else ""
        if not space.startswith(_NAMESPACES):  # most children: no manager's (vmtune's own, libosinfo's)
            continue
        for known in MANAGERS:
            if space.startswith(known.namespace):
                return known
    return None


def warning(dom: Domain) -> str | None:
    """The warning for a domain whose manager will write it anew, undoing the tuning."""
    found = manager(dom)
    if found is None:
        return None
    return (f"managed by {found.name} ({found.element} in <metadata>), which writes this domain's XML anew and "
            f"undoes the tuning; set it in {found.knobs}")
