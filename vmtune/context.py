"""What every pass may read: the host, the profile, the placement. Immutable; no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from .claims import Ledger
from .host import Host
from .placement import Placement
from .profiles import Profile


@dataclass(frozen=True)
class PassContext:
    host: Host
    profile: Profile
    placement: Placement
    ledger: Ledger
    reserved: frozenset[int]
    virt_type: str  # "kvm" or "qemu"
    force_virtio: bool = False

    __hash__ = object.__hash__

    @property
    def kvm(self) -> bool:
        return self.virt_type == "kvm"
