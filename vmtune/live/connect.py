"""Opening libvirt through libvirt-python, and turning its errors into vmtune's.

``libvirt-python`` is imported on first use, so the rest of vmtune works without it. Every
failure is a ``VmtuneError`` with a one-line message:

- the module is missing, the URI cannot be reached, or the connection drops: ``Unavailable`` (4);
- a domain name libvirt does not know: ``InvalidInput`` (1);
- anything else libvirt refuses: ``VmtuneError`` (1), with libvirt's own message.

An error that libvirt raised keeps libvirt's own message, on one line, as ``reason`` (the doctor
words a failure its own way).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import InvalidInput, Unavailable, VmtuneError

DEFAULT_URI = "qemu:///system"
INSTALL_HINT = "pip install vmtune[libvirt]"


def _quiet(_ctx, _err) -> None:
    """libvirt's default error handler prints every error to stderr; vmtune reports them itself."""


def libvirt():
    """The ``libvirt`` module, or Unavailable saying how to install it."""
    try:
        import libvirt as module
    except ImportError:
        raise Unavailable(f"libvirt-python is not installed: {INSTALL_HINT}") from None
    module.registerErrorHandler(_quiet, None)
    return module


def message(exc: BaseException) -> str:
    """libvirt's message on one line."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _failed(kind: type[VmtuneError], text: str, exc: BaseException) -> VmtuneError:
    """``kind(text)``, with libvirt's message as its ``reason``."""
    error = kind(text)
    error.reason = message(exc)
    return error


def open_connection(uri: str = DEFAULT_URI, read_only: bool = False):
    """A ``virConnect`` to ``uri``; Unavailable when it cannot be reached."""
    lv = libvirt()
    try:
        conn = lv.openReadOnly(uri) if read_only else lv.open(uri)
    except lv.libvirtError as exc:
        raise _failed(Unavailable, f"cannot connect to libvirt at {uri}: {message(exc)}", exc) from None
    if conn is None:  # old bindings returned None instead of raising
        raise Unavailable(f"cannot connect to libvirt at {uri}")
    return conn


@contextmanager
def connection(uri: str = DEFAULT_URI, read_only: bool = False) -> Iterator:
    """``with connection(uri) as conn:`` opens, maps libvirt errors (see ``failures``), closes."""
    conn = open_connection(uri, read_only)
    try:
        with failures(conn, uri):
            yield conn
    finally:
        try:
            conn.close()
        except Exception:  # noqa: BLE001,S110 - a dead connection cannot be closed cleanly
            pass


@contextmanager
def failures(conn, uri: str, what: str = "") -> Iterator[None]:
    """Turn a libvirtError raised inside into the VmtuneError that says what happened."""
    lv = libvirt()
    try:
        yield
    except lv.libvirtError as exc:
        prefix = f"{what}: " if what else ""
        if exc.get_error_code() == lv.VIR_ERR_NO_DOMAIN:
            raise _failed(InvalidInput, f"{prefix}{message(exc)}", exc) from None
        if not _alive(conn):
            raise _failed(Unavailable, f"{prefix}lost the connection to libvirt at {uri}: {message(exc)}", exc) from None
        raise _failed(VmtuneError, f"{prefix}libvirt: {message(exc)}", exc) from None


def _alive(conn) -> bool:
    try:
        return bool(conn.isAlive())
    except Exception:  # noqa: BLE001 - any failure here means it is gone
        return False


def is_local(conn) -> bool:
    """True when the connection talks to the libvirtd of this machine (no host in its URI)."""
    from urllib.parse import urlsplit

    try:
        host = urlsplit(conn.getURI()).hostname
    except Exception:  # noqa: BLE001 - unknown: assume remote, read nothing of this machine
        return False
    return host in (None, "", "localhost")
