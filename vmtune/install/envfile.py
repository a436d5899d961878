"""``HOOKS_DIR/vmtune.env``: the ``VMTUNE_*`` settings of the hook, and of the reaper beside it.

libvirtd runs hooks with a scrubbed environment (libvirt 9.0 passes only PATH, HOME, LC_ALL=C and a
few more), so ``VMTUNE_*`` variables set on the daemon never reach the hook. ``vmtune.env``
(``VMTUNE_NAME=value`` lines, ``#`` comments; other names ignored) in libvirt's hooks directory
supplies them: to the hook when it runs as ``HOOKS_DIR/qemu.d/NAME``, and to ``vmtune hook reap
--hooks-dir HOOKS_DIR`` (the reaper's timer), so that both find the same state. A variable already
in the environment wins. Standard library only: the hook and the reaper read it before anything
heavy is imported.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import MutableMapping

ENV_FILE = "vmtune.env"


def env_file(script: str | None = None) -> str | None:
    """``HOOKS_DIR/vmtune.env`` when ``script`` (default ``sys.argv[0]``) is ``HOOKS_DIR/qemu.d/NAME``."""
    script = script if script is not None else (sys.argv[0] if sys.argv else "")
    folder = os.path.dirname(os.path.abspath(script)) if script else ""
    if os.path.basename(folder) != "qemu.d":
        return None
    return os.path.join(os.path.dirname(folder), ENV_FILE)


ENV_FILE_MAX = 64 * 1024


def _env_lines(path: str) -> list[str]:
    """The lines of a regular file of at most ``ENV_FILE_MAX`` bytes (opened without blocking: a
    FIFO there must not hold the hook); none for anything else. Never raises."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return []
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > ENV_FILE_MAX:
            return []
        return os.read(fd, ENV_FILE_MAX + 1).decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    finally:
        os.close(fd)


def load_env_file(path: str | None, environ: MutableMapping[str, str]) -> dict[str, str]:
    """Set the ``VMTUNE_*`` variables from ``path`` that ``environ`` (the process's environment, which
    only the edges pass) lacks; return those set.
    A file that cannot be read (not a regular file, too large, not UTF-8 in places) sets what it
    can, or nothing: it never stops a hook call."""
    if not path:
        return {}
    lines = _env_lines(path)
    added = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, val = line.partition("=")
        key, val = key.strip(), val.strip()
        if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"":
            val = val[1:-1]
        if key.startswith("VMTUNE_") and key not in environ and "\x00" not in key + val:
            environ[key] = added[key] = val
    return added


def hooks_dir_file(hooks_dir: str) -> str:
    """``vmtune.env`` in the hooks directory ``hooks_dir``."""
    return os.path.join(hooks_dir, ENV_FILE)
