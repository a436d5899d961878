"""The XML each domain had before vmtune's first apply: ``/var/lib/vmtune/originals/UUID.xml``.

``$VMTUNE_ORIGINALS_DIR`` moves the folder (tests, unusual hosts). Files are written atomically,
mode 0600 in a 0700 folder: the XML includes the domain's secrets (graphics passwords), because
``vmtune revert`` defines it back whole. ``save`` never overwrites: the first original is kept
until ``vmtune revert`` has defined it and ``remove`` dropped it.
"""

from __future__ import annotations

import os
import re

from ..atomic import write_atomic
from ..errors import InvalidInput

DEFAULT_DIR = "/var/lib/vmtune/originals"
_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")


def directory() -> str:
    return os.environ.get("VMTUNE_ORIGINALS_DIR") or DEFAULT_DIR


def path(uuid: str) -> str:
    if not _UUID.fullmatch(uuid or ""):
        raise InvalidInput(f"bad domain uuid {uuid!r}")
    return os.path.join(directory(), f"{uuid.lower()}.xml")


def load(uuid: str) -> str | None:
    try:
        with open(path(uuid), encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidInput(f"cannot read {path(uuid)}: {exc.strerror}") from None


def save(uuid: str, xml: str) -> bool:
    """Keep ``xml`` as the original of ``uuid`` unless one is kept already; True when written."""
    target = path(uuid)
    if os.path.exists(target):
        return False
    try:
        os.makedirs(directory(), mode=0o700, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"cannot create {directory()}: {exc.strerror}") from None
    write_atomic(target, xml, mode=0o600)
    return True


def remove(uuid: str) -> None:
    try:
        os.unlink(path(uuid))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise InvalidInput(f"cannot remove {path(uuid)}: {exc.strerror}") from None
