"""What every pass may read: the host, the profile, the placement. Immutable; no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from .placement.claims import Ledger
from .config import Config
from .xml.guestos import GuestOS
from .host import Host
from .placement.intent import NONE, Intent
from .placement.search import Placement
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
    # what the user set on purpose (vmtune/placement/intent.py); NONE where the domain's pins are vmtune's own
    # (the hook's re-pin of a tuned domain)
    intent: Intent = NONE
    config: Config | None = None
    # the guest OS, read once from the domain as the user gave it (vmtune/xml/guestos.py); None: the
    # passes read it from the domain they are given
    guest: GuestOS | None = None
    # how the domain hides KVM (guestos.kvm_hidden), read with ``guest``: a pass asks guestos.hidden
    kvm_hidden: str | None = None

    __hash__ = object.__hash__

    @property
    def kvm(self) -> bool:
        return self.virt_type == "kvm"
