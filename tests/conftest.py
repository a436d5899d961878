"""Shared test settings: one hypothesis profile, the corpus beside the checkout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("VMTUNE_CORPUS", ROOT.parent / "shared" / "corpus"))
EXAMPLES = ROOT / "examples"
# tests/guest.py shares the guest-image plumbing of bench/ (bench/debimage.py), whatever the cwd
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

settings.register_profile(
    "vmtune", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", max_examples=600, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "vmtune"))

# The real-libvirtd fixture, for every test module that asks for it by name.
from libvirt_env import libvirtd  # noqa: E402,F401
