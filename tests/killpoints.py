"""A hook call killed at its N-th kill point, like SIGKILL: no cleanup, no ``finally``.

``killed_at(n, argv, xml, points)`` runs ``vmtune.hook.main(argv, xml)`` in a forked child in which
every call of the functions named in ``points`` (``(owner, attribute)`` pairs) counts as a point; at
point ``n`` (0 is the first) the child dies with ``os._exit(KILLED)`` before the call. It returns
the child's exit code: ``KILLED``, or the hook's own when it finished before point ``n``.
"""

from __future__ import annotations

import multiprocessing
import os

from vmtune import hook

KILLED = 9


def _child(n: int, argv: list[str], xml: str, points) -> None:
    seen = [0]

    def wrap(fn):
        def inner(*args, **kwargs):
            if seen[0] == n:
                os._exit(KILLED)
            seen[0] += 1
            return fn(*args, **kwargs)
        return inner

    for owner, name in points:
        setattr(owner, name, wrap(getattr(owner, name)))
    os._exit(hook.main(argv, xml.encode()))


def killed_at(n: int, argv: list[str], xml: str, points) -> int:
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(n, argv, xml, list(points)))
    proc.start()
    proc.join(60)
    return proc.exitcode
