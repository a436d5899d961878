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

from .errors import InvalidInput

STATE_DIR = "/run/vmtune"
ORIGINALS_DIR = "/var/lib/vmtune/originals"
NAMES = ("VMTUNE_SYSFS", "VMTUNE_PROCFS", "VMTUNE_CGROUPFS", "VMTUNE_RUNFS", "VMTUNE_LIBVIRT_RUNDIR",
         "VMTUNE_STATE_DIR", "VMTUNE_CONFIG", "VMTUNE_PROFILES", "VMTUNE_ORIGINALS_DIR", "XDG_RUNTIME_DIR")


def _beside(sysfs: str, name: str) -> str:
    """``name`` beside the sysfs root: ``/proc`` for ``/sys``."""
    return os.path.join(os.path.dirname(sysfs.rstrip("/")) or "/", name)


class Roots:
    """The trees and folders (see the module). A folder left None is derived from those given:
    ``cgroupfs`` is ``fs/cgroup`` under the sysfs root; ``runfs`` is ``run`` under ``root``, else
    beside the sysfs root; ``libvirt`` is ``RUNFS/libvirt/qemu``; ``state`` is ``run/vmtune``
    under ``root``. ``config`` and ``profiles`` stay None when not named: the defaults then.
    (A plain class: the hook imports it at every call, and a dataclass of ten fields costs a
    millisecond to define.)"""

    FIELDS = ("sysfs", "proc", "root", "cgroupfs", "runfs", "libvirt", "state", "config", "profiles",
              "originals")
    __slots__ = FIELDS

    def __init__(self, sysfs: str | None = "/sys", proc: str | None = "/proc", root: str | None = "/",
                 cgroupfs: str | None = None, runfs: str | None = None, libvirt: str | None = None,
                 state: str | None = None, config: str | None = None, profiles: str | None = None,
                 originals: str = ORIGINALS_DIR):
        self.sysfs, self.proc, self.root = sysfs, proc, root
        self.cgroupfs = cgroupfs if cgroupfs is not None or not sysfs else os.path.join(sysfs, "fs", "cgroup")
        if runfs is None and (root or sysfs):
            runfs = os.path.join(root, "run") if root else _beside(sysfs, "run")  # type: ignore[arg-type]
        self.runfs = runfs
        self.libvirt = libvirt if libvirt is not None or not runfs else os.path.join(runfs, "libvirt", "qemu")
        self.state = state if state is not None else (os.path.join(root, STATE_DIR.lstrip("/")) if root
                                                      else STATE_DIR)
        self.config, self.profiles, self.originals = config, profiles, originals

    def replace(self, **changes) -> Roots:
        """These roots with ``changes`` (the others as they are, none derived again)."""
        return Roots(**{**{name: getattr(self, name) for name in self.FIELDS}, **changes})

    def __eq__(self, other) -> bool:
        return isinstance(other, Roots) and all(getattr(self, n) == getattr(other, n) for n in self.FIELDS)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "Roots(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.FIELDS) + ")"

    @classmethod
    def from_env(cls, variables: Mapping[str, str], sysfs: str | None = None) -> Roots:
        """The roots the ``VMTUNE_*`` ``variables`` name (the environment, which only the edges pass;
        see the module); ``sysfs``, when given, wins over ``VMTUNE_SYSFS``."""
        env = {name: variables[name] for name in NAMES if variables.get(name)}
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
            return here.replace(sysfs="/sys", proc="/proc", root="/")
        if root != "/":
            return cls(sysfs, proc, root)
        return here.replace(sysfs=sysfs, proc=proc, root="/")

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
