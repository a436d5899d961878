"""The tuning passes, in the order the driver runs them.

Each pass is a module with ``run(ctx, dom) -> list[Edit]``: a pure function that reads the
domain as the previous passes left it and returns the edits it wants. Order matters where a
pass reads what an earlier one made: disks move to virtio before iothreads are assigned to
them, iothreads exist before they are pinned, pins exist before the topology is derived.
"""

from . import clock, cpu_mode, disks, features, iothreads, memory, nics, numa, pinning, tag, topology

ORDER = (tag, cpu_mode, disks, iothreads, pinning, numa, topology, memory, nics, clock, features)
# The passes that say where the domain runs (pins, memory nodes, hugepage nodesets): the hook's
# migrate/restore re-pin runs only these.
PLACEMENT = (pinning, numa, memory)

__all__ = ["ORDER", "PLACEMENT"]
