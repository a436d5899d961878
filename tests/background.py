"""What scripts/test starts in the background at the suite's start (the common host's guest boot, the
Debian package's build): a folder named by an environment variable, where the work leaves
``done.json`` last. ``wait_done`` waits for it."""

from __future__ import annotations

from pathlib import Path

from fixtures.wait import wait_until


def wait_done(folder: str, wait_s: float, what: str) -> Path:
    """``folder`` once its ``done.json`` exists (TimeoutError past ``wait_s`` seconds)."""
    done = Path(folder) / "done.json"
    wait_until(done.exists, wait_s, f"the background {what} left nothing in {folder}", interval=0.5)
    return Path(folder)
