"""The tuning passes, in the order the driver runs them.

Each pass is a module with ``run(ctx, dom) -> list[Edit]``: a pure function that reads the
domain as the previous passes left it and returns the edits it wants. Order matters where a
pass reads what an earlier one made: disks move to virtio before iothreads are assigned to
them, iothreads exist before they are pinned, pins exist before the topology is derived.
"""

from . import clock, cpu_mode, disks, features, iothreads, memory, nics, numa, pinning, tag, topology

ORDER = (tag, cpu_mode, disks, iothreads, pinning, numa, topology, memory, nics, clock, features)

__all__ = ["ORDER"]
