"""Argument types that are numbers within bounds: anything else is a usage error (exit 2, one line)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def bounded(kind: type, low: float, high: float, unit: str) -> Callable[[str], float]:
    """An argparse ``type``: ``kind(text)`` from ``low`` to ``high`` (both in), finite."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit}") from None
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text}: from {low:g} to {high:g} {unit}")
        return value

    return parse
