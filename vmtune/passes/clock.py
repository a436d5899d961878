"""Timers: no HPET, kvm-clock on, hypervclock for Windows."""

from ..edits import Set


def run(ctx, dom):
    p = ctx.profile
    wants = []
    if p.guest_hpet == "off":
        wants.append(("hpet", "no", "the emulated HPET is slow to read and trap-heavy"))
    if p.guest_kvmclock == "on" and ctx.kvm:
        wants.append(("kvmclock", "yes", "kvm-clock is the paravirtual clocksource"))
    if dom.is_windows and p.guest_hyperv and ctx.kvm:
        wants.append(("hypervclock", "yes", "Hyper-V reference time for Windows guests"))
    if not wants:
        return []
    edits = []
    if dom.find("clock") is None:
        offset = "localtime" if dom.is_windows else "utc"
        edits.append(Set(dom.node, "clock/@offset", offset, "a clock element is needed for timers"))
    for name, present, why in wants:
        edits.append(Set(dom.node, f"clock/timer[@name='{name}']/@present", present, why))
    return edits
