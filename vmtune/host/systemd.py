"""``systemctl``, run from PATH: for the isolation of a systemd host's slices and for the reaper's timer."""

from __future__ import annotations

SYSTEMCTL_TIMEOUT_S = 10


def systemctl(*args: str) -> str:
    """Run ``systemctl ARGS`` (from PATH); its stdout. OSError when it fails."""
    import subprocess  # here: only the isolation of a systemd host and the reaper's install run systemctl

    try:
        done = subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(f"systemctl {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        raise OSError(f"systemctl {' '.join(args)}: {(done.stderr or '').strip() or done.returncode}")
    return done.stdout
