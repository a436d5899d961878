"""The hook's file: the script libvirt runs for every domain, the ops it acts on, and installing it
as ``HOOKS_DIR/qemu.d/50-vmtune`` (libvirt >= 6.5 runs every executable there).

The installed file is ``hooks/qemu`` with the interpreter that runs vmtune now (``sys.executable``,
so the hook never goes through a slow shim) in its ``#!`` line. An existing ``HOOKS_DIR/qemu`` (a
monolithic hook of someone else's) is never touched. The hook's entry (vmtune/hook/) and the
command line (``vmtune hook install``) both use this module; neither imports the other.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import InvalidInput

MARK = b"https://vmtune.dev/xmlns/1"  # in every domain vmtune tuned (its tag): any other is not vmtune's
LEASE_OPS = (("prepare", "begin"), ("release", "end"), ("reconnect", "begin"))
REPIN_OPS = (("migrate", "begin"), ("restore", "begin"))  # libvirt reads stdout as the new XML
STARTED_OPS = (("started", "begin"),)  # the QEMU runs: its pid is recorded in the lease
# Every op the hook acts on. `vmtune hook install` writes this list into the script, which exits on
# any other op before reading stdin or importing vmtune.
HANDLED_OPS = LEASE_OPS + STARTED_OPS + REPIN_OPS

DEFAULT_HOOKS_DIR = "/etc/libvirt/hooks"
HOOK_NAME = "50-vmtune"
SIGNATURE = "# vmtune libvirt hook"

# Kept in sync with hooks/qemu (tests/test_hook.py checks): the only difference is the #! line.
# The ops list comes from HANDLED_OPS, so it is defined in one place.
SCRIPT = '''#!{python}
{signature}: `vmtune hook install` writes this file, `vmtune hook uninstall` removes it.
"""libvirt qemu hook (qemu NAME OP SUBOP EXTRA, domain XML on stdin): see vmtune/hook/__init__.py."""
import sys

MARK = b"https://vmtune.dev/xmlns/1"
OPS = {ops}
MAX_STDIN = 8 << 20  # bytes, as vmtune.xml.xmlsafe.MAX_BYTES
STDIN_TIMEOUT_S = 10.0


def _stdin():
    """The domain XML on stdin: all of it within STDIN_TIMEOUT_S and MAX_STDIN bytes, else None."""
    import os
    import select
    import time

    fd, chunks, size = sys.stdin.fileno(), [], 0
    deadline = time.monotonic() + float(os.environ.get("VMTUNE_STDIN_TIMEOUT_S") or STDIN_TIMEOUT_S)
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_STDIN:
            return None
        chunks.append(chunk)


def _run():
    if tuple(sys.argv[2:4]) not in OPS:
        return 0  # an op vmtune ignores: exit before reading stdin (libvirt ignores EPIPE) or importing
    try:
        data = _stdin()
    except Exception:  # noqa: BLE001 - unreadable stdin: not a domain vmtune can know
        return 0
    if data is None:
        sys.stderr.write("vmtune-hook: the domain XML did not arrive in time (or is over 8 MiB): "
                         "domain ignored\\n")
        return 0
    if MARK not in data:
        return 0  # untagged: not vmtune's domain; exit before importing anything heavy
    from vmtune.hook import main

    return main(sys.argv[1:], data)


if __name__ == "__main__":
    sys.exit(_run())
'''


def script(python: str | None = None) -> str:
    ops = "(  # vmtune.install.hookfile.HANDLED_OPS\n" + "".join(f"    {op!r},\n" for op in HANDLED_OPS) + ")"
    return SCRIPT.format(python=python or sys.executable, signature=SIGNATURE, ops=ops)


def hook_path(hooks_dir: str | None = None) -> Path:
    return Path(hooks_dir or DEFAULT_HOOKS_DIR) / "qemu.d" / HOOK_NAME


def install(hooks_dir: str | None = None, python: str | None = None) -> Path:
    """Write the hook (atomically, mode 0755), creating directories; return its path."""
    from .. import atomic  # here: the hook imports this module at every call, and tempfile costs

    target = hook_path(hooks_dir)
    if target.is_symlink():  # the Debian package's: a link to /usr/lib/vmtune/libvirt-hook, which dpkg owns
        raise InvalidInput(f"{target} is a link to {os.readlink(target)}: the vmtune package's hook, already "
                           "installed (apt-get remove vmtune takes it away); nothing written")
    if target.exists() and SIGNATURE not in target.read_text(errors="replace"):
        raise InvalidInput(f"{target} exists and is not vmtune's hook; not overwritten")
    try:
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        atomic.replace(str(target), script(python).encode("utf-8"), 0o755)
    except OSError as exc:
        raise InvalidInput(f"cannot install {target}: {exc.strerror or exc}") from None
    return target


def uninstall(hooks_dir: str | None = None) -> Path | None:
    """Remove vmtune's hook; return its path, or None if it was not installed."""
    target = hook_path(hooks_dir)
    if not target.exists():
        return None
    if SIGNATURE not in target.read_text(errors="replace"):
        raise InvalidInput(f"{target} is not vmtune's hook; not removed")
    try:
        target.unlink()
    except OSError as exc:
        raise InvalidInput(f"cannot remove {target}: {exc.strerror or exc}") from None
    return target
