"""Writing a file all or nothing: a temporary file in the same folder, fsync, rename (then the folder).

``replace`` is the one implementation (OSError on failure; the hook's state and the installed
hook use it); ``write_atomic`` is the same for the command line, with a one-line InvalidInput.
"""

from __future__ import annotations

import os
import stat
import tempfile

from .errors import InvalidInput


def replace(path: str, data: bytes, mode: int = 0o644, prefix: str = ".vmtune-", sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` (mode ``mode``) through ``PREFIX*.tmp`` beside it; OSError if not.

    A kill at any point leaves either the old file or the new one, and perhaps the temporary file.
    """
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if sync_dir:
        try:
            dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass


def write_atomic(path: str, text: str, mode_from: str | None = None, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: all or nothing.

    A symlink is written through: the file it points to is replaced, the link stays. A target that
    exists and is not a regular file (a FIFO, a device, a socket, a folder) is refused, since a
    rename would replace it: nothing is written. The file gets the permissions of ``mode_from`` when
    that exists, else ``mode``, else 0644.
    """
    target = os.path.realpath(path)
    try:
        kind = os.stat(target).st_mode
    except OSError:
        kind = None  # a new file (or a folder that is not there: the write says so)
    if kind is not None and not stat.S_ISREG(kind):
        what = "a folder" if stat.S_ISDIR(kind) else "not a regular file"
        raise InvalidInput(f"cannot write {path}: {what} (vmtune writes a file by replacing it whole)")
    source = mode_from if mode_from and os.path.exists(mode_from) else None
    try:
        perms = os.stat(source).st_mode & 0o7777 if source else (0o644 if mode is None else mode)
        replace(target, text.encode("utf-8"), perms, sync_dir=False)
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror or exc}") from None
