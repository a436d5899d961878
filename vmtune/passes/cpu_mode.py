"""<cpu mode>: the host's CPU as it is (host-passthrough), or TCG's widest model (maximum)."""

from ..edits import Remove
from ..model import Domain


def run(ctx, dom):
    if ctx.profile.cpu_mode != "host":
        return []
    if ctx.kvm:
        mode = Domain.CPU_MODE_HOST_PASSTHROUGH
        why = "give the guest every feature of the host CPU (no model emulation)"
    else:
        mode = Domain.CPU_MODE_MAXIMUM
        why = "TCG cannot pass the host CPU through; 'maximum' is its widest model"
    edits = [Domain.cpu_mode.edit(dom, mode, why)]
    cpu = dom.find("cpu")
    if cpu is not None:
        edits.append(Domain.cpu_match.edit(dom, None, f"'match' applies to custom models only, not {mode}"))
        for child in ("model", "vendor"):
            el = cpu.find(child)
            if el is not None:
                edits.append(Remove(el, f"a CPU <{child}> has no meaning with mode {mode}"))
    return edits
