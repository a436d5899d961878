"""<features>: KVM hints (dedicated, haltpoll), PMU, Hyper-V enlightenments for Windows."""

from ..edits import Set

HYPERV = (
    ("relaxed", {}), ("vapic", {}), ("spinlocks", {"retries": "8191"}), ("vpindex", {}),
    ("synic", {}), ("stimer", {}), ("frequencies", {}), ("tlbflush", {}), ("ipi", {}),
)
# Under TCG QEMU refuses vpindex ("kernel doesn't allow setting HyperV VP_INDEX"), and synic,
# stimer, tlbflush and ipi depend on it; these boot there.
HYPERV_TCG = ("relaxed", "vapic", "spinlocks", "frequencies")


def run(ctx, dom):
    p = ctx.profile
    edits = []
    if ctx.kvm and p.cpu_kvm_hint_dedicated and ctx.placement.mode == "dedicated":
        edits.append(Set(dom.node, "features/kvm/hint-dedicated/@state", "on",
                         "tell the guest its vCPUs own their CPUs (no pv spinlocks, idle polling allowed)"))
    if ctx.kvm and p.cpu_kvm_poll_control:
        edits.append(Set(dom.node, "features/kvm/poll-control/@state", "on",
                         "guest haltpoll: poll briefly before halting, the in-guest answer to wake-up latency"))
    if p.cpu_pmu == "off":
        edits.append(Set(dom.node, "features/pmu/@state", "off", "no virtual PMU: fewer exits, no NMI interference"))
    hyperv = dom.find("features/hyperv")
    if dom.is_windows and p.guest_hyperv and (hyperv is None or hyperv.get("mode") != "passthrough"):
        for name, extra in HYPERV:
            if not ctx.kvm and name not in HYPERV_TCG:
                continue
            if hyperv is not None and hyperv.find(name) is not None:
                continue  # an explicit setting, on or off, is the admin's
            why = f"Hyper-V enlightenment '{name}': Windows uses the paravirtual path"
            edits.append(Set(dom.node, f"features/hyperv/{name}/@state", "on", why))
            for attr, value in extra.items():
                edits.append(Set(dom.node, f"features/hyperv/{name}/@{attr}", value, why))
    return edits
