"""Writing a file all or nothing: a temporary file in the same folder, fsync, rename."""

from __future__ import annotations

import os
import tempfile

from .errors import InvalidInput


def write_atomic(path: str, text: str, mode_from: str | None = None, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: all or nothing.

    The file gets the permissions of ``mode_from`` when that exists, else ``mode``, else 0644.
    """
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".vmtune-", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        source = mode_from if mode_from and os.path.exists(mode_from) else None
        os.chmod(tmp, os.stat(source).st_mode & 0o7777 if source else (0o644 if mode is None else mode))
        os.replace(tmp, path)
    except OSError as exc:
        os.unlink(tmp)
        raise InvalidInput(f"cannot write {path}: {exc.strerror}") from None
    except BaseException:
        os.unlink(tmp)
        raise
