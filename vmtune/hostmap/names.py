"""Domain names shortened for the map's CPU labels, one way for every view.

A name that fits stays as it is. A longer one keeps its start and ends in ``~``: ``webserver-01``
at 6 is ``webse~``. Names that would then read the same get a number before the ``~``
(``webs1~``, ``webs2~``), in the order given. Characters that are not printable ASCII become
``?``, so that every label is one terminal column per character. The legend gives the full names.
"""

from __future__ import annotations

from collections.abc import Sequence


def _plain(name: str) -> str:
    return "".join(c if " " < c < "\x7f" else "?" for c in name) or "?"


def short(names: Sequence[str], width: int) -> dict[str, str]:
    """Each distinct name of ``names`` -> its label, at most ``width`` (at least 3) characters,
    distinct for distinct names."""
    width = max(width, 3)
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in dict.fromkeys(names):
        plain = _plain(name)
        label = plain if len(plain) <= width else plain[: width - 1] + "~"
        number = 0
        while label in taken:
            number += 1
            digits = str(number)
            label = plain[: max(width - 1 - len(digits), 0)] + digits + "~"
        taken.add(label)
        out[name] = label
    return out
