"""NICs: virtio-net with vhost and one queue per vCPU (at most max_queues)."""

from ..xml import guestos
from ..xml.edits import Warn
from ..xml.model import Interface


def run(ctx, dom):
    p = ctx.profile
    if not p.devices_virtio:
        return []
    edits = []
    guest = guestos.of(ctx, dom)
    queues = min(dom.vcpus, p.devices_max_queues)
    for nic in dom.interfaces:
        if nic.type not in Interface.TUNED_TYPES:
            continue
        model = nic.model  # (read once: the edits below apply after the pass)
        if guest.virtio is False and not ctx.force_virtio:
            if not (model or "").startswith(Interface.MODEL_VIRTIO):
                edits.append(Warn(f"{guest.name} guest: NIC {nic.mac or ''} keeps model {model or 'default'} "
                                  "(the guest may lack virtio drivers); use --force-virtio"))
                continue
        if not (model or "").startswith(Interface.MODEL_VIRTIO):
            why = f"{model or 'the default model'} is emulated; virtio-net is paravirtual"
            edits.append(Interface.model.edit(nic, Interface.MODEL_VIRTIO, why))
        if p.devices_vhost:
            why = "vhost-net moves packet processing into the host kernel"
            if not ctx.kvm:
                why += " (libvirt uses it only for type='kvm'; under TCG packets stay in QEMU)"
            edits.append(Interface.driver_name.edit(nic, Interface.DRIVER_NAME_VHOST, why))
            if nic.queues is None and queues > 1:  # the user's own count stays
                why = f"multiqueue: one queue per vCPU (up to {p.devices_max_queues}) spreads packets over vCPUs"
                edits.append(Interface.queues.edit(nic, queues, why))
    return edits
