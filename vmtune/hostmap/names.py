"""Domain names shortened for the map's CPU labels, one way for every view; and text widths.

A name that fits stays as it is. A longer one keeps its start and ends in ``~``: ``webserver-01``
at 6 is ``webse~``. A label that another domain already has, or that reads like a role's word
(``host``, ``free``, ...), gets a number before the ``~`` (``webs1~``, ``host1~``), in the order
given. Characters that are not printable ASCII become ``?``, so that every label is one terminal
column per character. The legend gives the full names.

``columns`` is how many terminal columns a text takes (East Asian wide characters take two).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

ROLE_WORDS = frozenset({"host", "free", "shared", "sibling", "isolated", "off", "offline", "dedicated", "reserved"})


def _plain(name: str) -> str:
    return "".join(c if " " < c < "\x7f" else "?" for c in name) or "?"


def short(names: Sequence[str], width: int) -> list[str]:
    """The label of each of ``names`` (one per entry: two domains of one name get two labels), at
    most ``width`` (at least 3) characters, all distinct and none a role's word."""
    width = max(width, 3)
    out: list[str] = []
    taken: set[str] = set(ROLE_WORDS)
    for name in names:
        plain = _plain(name)
        label = plain if len(plain) <= width else plain[: width - 1] + "~"
        number = 0
        while label in taken:
            number += 1
            digits = str(number)
            label = plain[: max(width - 1 - len(digits), 0)] + digits + "~"
        taken.add(label)
        out.append(label)
    return out


def columns(text: str) -> int:
    """The terminal columns ``text`` takes: two for a wide or full-width character, none for a
    combining one, one for the others."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
               for c in text)
