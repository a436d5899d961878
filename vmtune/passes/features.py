"""<features>: KVM hints (dedicated, haltpoll), PMU, Hyper-V enlightenments for Windows.

A KVM hint reaches only a guest that reads KVM's CPUID leaves: none for a Windows guest (it reads
Hyper-V's), and none where the domain hides KVM (QEMU then exposes no KVM leaf). poll-control is
written only beside hint-dedicated: Linux's cpuidle-haltpoll, which uses it, loads only with that
hint (KVM_HINTS_REALTIME).
"""

from ..xml import guestos, xmltext
from ..xml.model import Domain

SPINLOCK_RETRIES = 8191  # what virt-install writes; libvirt takes 4095 and more
# each enlightenment, and the other fields it is written with
HYPERV = (
    ("relaxed", {}), ("vapic", {}), ("spinlocks", {Domain.hyperv_spinlock_retries: SPINLOCK_RETRIES}),
    ("vpindex", {}), ("synic", {}), ("stimer", {}), ("frequencies", {}), ("tlbflush", {}), ("ipi", {}),
)
# Under TCG QEMU refuses vpindex ("kernel doesn't allow setting HyperV VP_INDEX"), and synic,
# stimer, tlbflush and ipi depend on it; these boot there.
HYPERV_TCG = ("relaxed", "vapic", "spinlocks", "frequencies")


def run(ctx, dom):
    p = ctx.profile
    guest = guestos.of(ctx, dom)
    edits = []
    hints = ctx.kvm and not guest.windows and (p.cpu_kvm_hint_dedicated or p.cpu_kvm_poll_control) \
        and guestos.hidden(ctx, dom) is None  # (read only where a hint is wanted: each needs its flag too)
    dedicated = dom.kvm_hint_dedicated is True
    if hints and p.cpu_kvm_hint_dedicated and ctx.placement.dedicated:
        edits.append(Domain.kvm_hint_dedicated.edit(
            dom, True, "tell the guest its vCPUs own their CPUs (no pv spinlocks, idle polling allowed)"))
        dedicated = True
    if hints and p.cpu_kvm_poll_control and dedicated:
        edits.append(Domain.kvm_poll_control.edit(
            dom, True, "guest haltpoll: poll briefly before halting, the in-guest answer to wake-up latency "
                       "(with hint-dedicated, which it needs)"))
    if p.cpu_pmu == "off":
        edits.append(Domain.pmu.edit(dom, False, "no virtual PMU: fewer exits, no NMI interference"))
    hyperv = dom.hyperv
    if guest.windows and p.guest_hyperv and dom.hyperv_mode != Domain.HYPERV_PASSTHROUGH:
        for name, extra in HYPERV:
            if not ctx.kvm and name not in HYPERV_TCG:
                continue
            if hyperv is not None and xmltext.find(hyperv, name) is not None:
                continue  # an explicit setting, on or off, is the admin's
            why = f"Hyper-V enlightenment '{name}': Windows uses the paravirtual path"
            edits.append(Domain.hyperv_state.at(name).edit(dom, True, why))
            edits += [prop.edit(dom, value, why) for prop, value in extra.items()]
    return edits
