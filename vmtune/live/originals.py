"""The XML each domain had before vmtune's first apply: ``/var/lib/vmtune/originals/UUID.xml``.

``Roots.originals`` (``$VMTUNE_ORIGINALS_DIR``) moves the folder (tests, unusual hosts). Files are written atomically,
mode 0600 in a 0700 folder: the XML includes the domain's secrets (graphics passwords), because
``vmtune revert`` defines it back whole. ``save`` never overwrites: the first original is kept
until ``vmtune revert`` has defined it and ``remove`` dropped it.
"""

from __future__ import annotations

import os
import re

from ..atomic import write_atomic
from ..errors import InvalidInput
from ..roots import ORIGINALS_DIR
_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")


class Originals:
    """The originals kept in ``folder``."""

    def __init__(self, folder: str = ORIGINALS_DIR):
        self.folder = folder

    def path(self, uuid: str) -> str:
        if not _UUID.fullmatch(uuid or ""):
            raise InvalidInput(f"bad domain uuid {uuid!r}")
        return os.path.join(self.folder, f"{uuid.lower()}.xml")

    def load(self, uuid: str) -> str | None:
        try:
            with open(self.path(uuid), encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InvalidInput(f"cannot read {self.path(uuid)}: {exc.strerror}") from None

    def save(self, uuid: str, xml: str) -> bool:
        """Keep ``xml`` as the original of ``uuid`` unless one is kept already; True when written."""
        target = self.path(uuid)
        if os.path.exists(target):
            return False
        try:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise InvalidInput(f"cannot create {self.folder}: {exc.strerror}") from None
        write_atomic(target, xml, mode=0o600)
        return True

    def remove(self, uuid: str) -> None:
        try:
            os.unlink(self.path(uuid))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise InvalidInput(f"cannot remove {self.path(uuid)}: {exc.strerror}") from None
