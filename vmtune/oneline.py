"""One message, one line: for the logs of the hook and the host-state engine, and the CLI's output.

A domain's name or a file's content may hold a newline; ``escape`` makes sure it cannot forge a
second log line. ``setup_logging`` sends the ``vmtune.hook`` and ``vmtune.hoststate`` loggers to
stderr (and syslog), escaped; ``said_once`` keeps one call from writing a line twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

LOGGERS = ("vmtune.hook", "vmtune.hoststate")


def escape(text: str) -> str:
    """``text`` with every control character escaped (a newline in a domain's ``<name>`` becomes
    ``\\n``), so that one message is one line."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class _Escaped(logging.Formatter):
    """Control characters are escaped (``escape``): one record, one line."""

    def format(self, record: logging.LogRecord) -> str:
        return escape(super().format(record))


class _Stderr(logging.Handler):
    """Writes to whatever sys.stderr is at the time (pytest swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001,S110 - logging must never break the hook
            pass


def setup_logging(syslog: bool = True) -> None:
    """The hook's and the engine's lines on stderr as ``vmtune-hook: ...``, and in syslog (facility
    daemon) when ``/dev/log`` exists and ``syslog`` is true. Once per process."""
    for name in LOGGERS:
        log = logging.getLogger(name)
        if getattr(log, "_vmtune_ready", False):
            continue
        log.setLevel(logging.INFO)
        log.propagate = False
        err = _Stderr()
        err.setFormatter(_Escaped("vmtune-hook: %(message)s"))
        log.addHandler(err)
        if syslog and os.path.exists("/dev/log"):
            from logging.handlers import SysLogHandler
            try:
                handler = SysLogHandler(address="/dev/log", facility=SysLogHandler.LOG_DAEMON)
                handler.setFormatter(_Escaped("vmtune-hook[%(process)d]: %(message)s"))
                log.addHandler(handler)
            except OSError:
                pass
        log._vmtune_ready = True  # type: ignore[attr-defined]


@contextlib.contextmanager
def said_once() -> Iterator[None]:
    """Within the block, a line the hook's and the engine's loggers wrote already (the same level and
    text) is not written again: a step that runs twice in one hook call, reap or verify (the power
    the leases want is read before and after a lease's records move) says what it found once."""
    first: dict[tuple[int, str], logging.LogRecord] = {}

    def once(record: logging.LogRecord) -> bool:  # each handler sees the same record: let it through all
        return first.setdefault((record.levelno, record.getMessage()), record) is record

    handlers = [h for name in LOGGERS for h in logging.getLogger(name).handlers]
    if logging.lastResort is not None:  # what a command without setup_logging (verify) writes warnings with
        handlers.append(logging.lastResort)
    for handler in handlers:
        handler.addFilter(once)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(once)
