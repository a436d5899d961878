"""<cpu mode>: the host's CPU as it is (host-passthrough), or TCG's widest model (maximum)."""

from ._xml import firsts
from ..xml.edits import Remove, Warn
from ..xml.model import Domain
from ..profiles import CpuMode

# modes a domain migrates with between hosts whose CPUs differ: libvirt expands host-model to a
# named model at start, and a named model (custom) is the same on every host that has it
MIGRATABLE = ("host-model", "custom")
MIGRATION = ("cpu mode {mode} becomes host-passthrough: live migration then needs hosts with identical "
             "CPUs (and microcode); a profile with cpu_mode = \"keep\" ([cpu] mode) keeps {mode}")


def run(ctx, dom):
    if ctx.profile.cpu_mode == CpuMode.KEEP:
        return []
    if ctx.kvm:
        mode = Domain.CPU_MODE_HOST_PASSTHROUGH
        why = "give the guest every feature of the host CPU (no model emulation)"
    else:
        mode = Domain.CPU_MODE_MAXIMUM
        why = "TCG cannot pass the host CPU through; 'maximum' is its widest model"
    edits = Domain.cpu_mode.edits(dom, mode, why)
    cpu = dom.cpu
    if cpu is not None:
        named = firsts(cpu, ("model", "vendor"))
        was = dom.cpu_mode or ("custom" if "model" in named else None)
        if ctx.kvm and was in MIGRATABLE:
            edits.append(Warn(MIGRATION.format(mode=was)))
        edits += Domain.cpu_match.edits(dom, None, f"'match' applies to custom models only, not {mode}")
        for child in ("model", "vendor"):
            el = named.get(child)
            if el is not None:
                edits.append(Remove(el, f"a CPU <{child}> has no meaning with mode {mode}"))
    return edits
