"""What scripts/test starts in the background at the suite's start (the common host's guest boot, the
Debian package's build): a folder named by an environment variable, where the work leaves
``done.json`` last. ``wait_done`` waits for it."""

from __future__ import annotations

import time
from pathlib import Path


def wait_done(folder: str, wait_s: float, what: str) -> Path:
    """``folder`` once its ``done.json`` exists (an assertion past ``wait_s`` seconds)."""
    done = Path(folder) / "done.json"
    deadline = time.monotonic() + wait_s
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert done.exists(), f"the background {what} left nothing in {folder} within {wait_s} s"
    return Path(folder)
