"""Timers: no HPET, kvm-clock on (not for Windows, nor where KVM is hidden), hypervclock for Windows."""

from ..xml import guestos
from ..xml.model import Domain


def run(ctx, dom):
    p = ctx.profile
    guest = guestos.of(ctx, dom)
    wants = []
    if p.guest_hpet == "off":
        wants.append((Domain.TIMER_HPET, False, "the emulated HPET is slow to read and trap-heavy"))
    if p.guest_kvmclock == "on" and ctx.kvm and not guest.windows and guestos.hidden(ctx, dom) is None:
        wants.append((Domain.TIMER_KVMCLOCK, True, "kvm-clock is the paravirtual clocksource"))
    if guest.windows and p.guest_hyperv and ctx.kvm:
        wants.append((Domain.TIMER_HYPERVCLOCK, True, "Hyper-V reference time for Windows guests"))
    if not wants:
        return []
    edits = []
    if dom.clock is None:
        offset = Domain.CLOCK_LOCALTIME if guest.windows else Domain.CLOCK_UTC
        edits.append(Domain.clock_offset.edit(dom, offset, "a clock element is needed for timers"))
    for name, present, why in wants:
        edits.append(Domain.timer_present.at(name).edit(dom, present, why))
    return edits
