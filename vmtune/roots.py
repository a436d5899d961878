"""Where the host is: every tree and folder vmtune reads or writes, named once.

``Roots()`` is this machine. The edges (the hook's entry, the CLI) read the environment once,
with ``Roots.from_env(os.environ)``, and pass the result down; no library module reads a
``VMTUNE_*`` variable. The variables, each with its default:

============================  ==============================================================
``VMTUNE_SYSFS``              ``/sys``
``VMTUNE_PROCFS``             ``proc`` beside the sysfs root (``/proc`` for ``/sys``)
``VMTUNE_CGROUPFS``           ``fs/cgroup`` under the sysfs root
``VMTUNE_RUNFS``              ``run`` beside the sysfs root (``/run`` for ``/sys``)
``VMTUNE_LIBVIRT_RUNDIR``     libvirt's run dir: ``RUNFS/libvirt/qemu`` (a session daemon's,
                              ``$XDG_RUNTIME_DIR/libvirt/qemu/run``, for a user who is not root)
``VMTUNE_STATE_DIR``          the hook's state: ``/run/vmtune``
``VMTUNE_CONFIG``             the config file: ``/etc/vmtune/vmtune.toml``
``VMTUNE_PROFILES``           the user's profiles: ``/etc/vmtune/profiles``
``VMTUNE_ORIGINALS_DIR``      the XML domains had before ``vmtune apply``: ``/var/lib/vmtune/originals``
============================  ==============================================================

The doctor also reads captured trees (``Roots.given``): a root that is None there was not given,
and the checks that need it say SKIP. A filesystem ``root`` other than ``/`` is such a tree: its
state and libvirt folders are the ones inside it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .errors import InvalidInput

STATE_DIR = "/run/vmtune"
CONFIG_FILE = "/etc/vmtune/vmtune.toml"
PROFILES_DIR = "/etc/vmtune/profiles"
ORIGINALS_DIR = "/var/lib/vmtune/originals"


def _beside(sysfs: str, name: str) -> str:
    """``name`` beside the sysfs root: ``/proc`` for ``/sys``."""
    return os.path.join(os.path.dirname(sysfs.rstrip("/")) or "/", name)


@dataclass(frozen=True)
class Roots:
    sysfs: str | None = "/sys"
    proc: str | None = "/proc"
    root: str | None = "/"  # /dev, /run and /etc of the doctor's checks (None: not given)
    cgroupfs: str | None = None  # None: fs/cgroup under the sysfs root
    runfs: str | None = None  # None: run under ``root``, else beside the sysfs root
    libvirt: str | None = None  # None: RUNFS/libvirt/qemu
    state: str | None = None  # None: run/vmtune under ``root`` (/run/vmtune)
    config: str | None = None  # an explicit config file; None: the default, which may be missing
    profiles: str | None = None  # an explicit profiles folder; None: the config's, else PROFILES_DIR
    originals: str = ORIGINALS_DIR

    def __post_init__(self) -> None:
        derived = {"cgroupfs": os.path.join(self.sysfs, "fs", "cgroup") if self.sysfs else None}
        derived["runfs"] = (os.path.join(self.root, "run") if self.root else
                            _beside(self.sysfs, "run") if self.sysfs else None)
        for name, value in derived.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        if self.libvirt is None and self.runfs:
            object.__setattr__(self, "libvirt", os.path.join(self.runfs, "libvirt", "qemu"))
        if self.state is None:
            object.__setattr__(self, "state", os.path.join(self.root, STATE_DIR.lstrip("/")) if self.root
                               else STATE_DIR)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], sysfs: str | None = None) -> Roots:
        """The roots the ``VMTUNE_*`` variables of ``environ`` name (see the module); ``sysfs``, when
        given, wins over ``VMTUNE_SYSFS``."""
        env = {k: v for k, v in environ.items() if v}
        sysfs = sysfs or env.get("VMTUNE_SYSFS") or "/sys"
        runfs = env.get("VMTUNE_RUNFS") or _beside(sysfs, "run")
        session = os.geteuid() != 0 and env.get("XDG_RUNTIME_DIR")
        libvirt = env.get("VMTUNE_LIBVIRT_RUNDIR") or (
            os.path.join(env["XDG_RUNTIME_DIR"], "libvirt", "qemu", "run") if session
            else os.path.join(runfs, "libvirt", "qemu"))
        return cls(sysfs=sysfs, proc=env.get("VMTUNE_PROCFS") or _beside(sysfs, "proc"), root="/",
                   cgroupfs=env.get("VMTUNE_CGROUPFS") or os.path.join(sysfs, "fs", "cgroup"), runfs=runfs,
                   libvirt=libvirt, state=env.get("VMTUNE_STATE_DIR") or STATE_DIR,
                   config=env.get("VMTUNE_CONFIG"), profiles=env.get("VMTUNE_PROFILES"),
                   originals=env.get("VMTUNE_ORIGINALS_DIR") or ORIGINALS_DIR)

    @classmethod
    def given(cls, sysfs: str | None = None, proc: str | None = None, root: str | None = None,
              here: Roots | None = None) -> Roots:
        """The doctor's trees: this machine when nothing is given; else a captured tree of exactly
        the roots given. With ``root`` ``/``, the state and libvirt folders are this machine's,
        ``here`` (``Roots.from_env``; default ``Roots()``)."""
        here = here or cls()
        if sysfs is None and proc is None and root is None:
            return replace(here, sysfs="/sys", proc="/proc", root="/")
        if root != "/":
            return cls(sysfs, proc, root)
        return replace(here, sysfs=sysfs, proc=proc, root="/")

    @property
    def systemd(self) -> bool:
        """Whether systemd runs the host (``RUNFS/systemd/system`` exists)."""
        return bool(self.runfs) and os.path.isdir(os.path.join(self.runfs, "systemd", "system"))

    @property
    def live(self) -> bool:
        """True when the sysfs root is this machine's: only then are its CPUs measured."""
        return self.sysfs is not None and os.path.realpath(self.sysfs) == "/sys"

    def check(self) -> None:
        """Raise InvalidInput (one line) for a given root that is not the tree it claims to be."""
        wants = (("--sysfs", self.sysfs, "devices/system/cpu"), ("--proc", self.proc, "cpuinfo"),
                 ("--root", self.root, None))
        for flag, path, inside in wants:
            if path is None:
                continue
            if not os.path.isdir(path):
                raise InvalidInput(f"{flag} {path}: no such directory")
            if inside and not os.path.exists(os.path.join(path, inside)):
                raise InvalidInput(f"{flag} {path} does not look like a {flag[2:]} tree (no {inside})")
