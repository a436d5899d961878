"""The commands over a live libvirt: tag, untag, apply, revert, plan (a thin adapter).

``add_parsers(sub)`` adds the subcommands; ``COMMANDS`` maps each name to ``cmd(args, cfg) -> int``.
"""

from __future__ import annotations

import argparse

COMMANDS: dict = {}


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Nothing yet."""
