"""Opening libvirt through libvirt-python, and turning its errors into vmtune's.

``libvirt-python`` is imported on first use, so the rest of vmtune works without it. Every
failure is a ``VmtuneError`` with a one-line message:

- the module is missing (the message says how to get it for the way vmtune was installed:
  ``install_hint``), the URI cannot be reached, or the connection drops: ``Unavailable`` (4);
- a domain name libvirt does not know: ``InvalidInput`` (1);
- anything else libvirt refuses: ``VmtuneError`` (1), with libvirt's own message.

An error that libvirt raised keeps libvirt's own message, on one line, as ``reason`` (the doctor
words a failure its own way).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import InvalidInput, Unavailable, VmtuneError

DEFAULT_URI = "qemu:///system"
DEBIAN_DIST = "/usr/lib/python3/dist-packages"  # where Debian's python3 packages (vmtune's .deb) live
PIP_HINT = ("pip install 'vmtune[libvirt]' (libvirt-python builds against libvirt's headers: "
            "libvirt-dev, pkg-config, gcc and python3-dev)")


def install_hint(package: str | None = None, prefix: str | None = None, base_prefix: str | None = None) -> str:
    """How to get libvirt's binding for the way vmtune is installed. ``package``: the folder of
    the ``vmtune`` package (default: this one); ``prefix``, ``base_prefix``: the interpreter's
    (``sys.prefix``, ``sys.base_prefix``; they differ in a venv).

    - the Debian package (vmtune in Debian's dist-packages), or Debian's python3 outside a venv:
      ``apt-get install python3-libvirt``;
    - the checkout (a venv beside ``scripts/bootstrap``, or vmtune run from the source tree):
      ``scripts/bootstrap --libvirt``, which ``scripts/vmtune`` runs for the live commands;
    - anything else (pip, a wheel): ``pip install 'vmtune[libvirt]'``, which builds libvirt-python.
    """
    package = os.path.abspath(package or os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    prefix = sys.prefix if prefix is None else prefix
    base_prefix = sys.base_prefix if base_prefix is None else base_prefix
    holder = os.path.dirname(package)
    debian_python = prefix == base_prefix == "/usr" and os.path.isdir(DEBIAN_DIST)  # sees Debian's packages
    if holder == DEBIAN_DIST or debian_python:
        return "apt-get install python3-libvirt"
    tops = ([os.path.dirname(os.path.abspath(prefix))] if prefix != base_prefix else []) + [holder]
    for top in tops:
        bootstrap = os.path.join(top, "scripts", "bootstrap")
        if os.path.isfile(bootstrap):
            return f"{bootstrap} --libvirt (scripts/vmtune runs it for the live commands)"
    return PIP_HINT


def _quiet(_ctx, _err) -> None:
    """libvirt's default error handler prints every error to stderr; vmtune reports them itself."""


def libvirt():
    """The ``libvirt`` module, or Unavailable saying how to install it."""
    try:
        import libvirt as module
    except ImportError:
        raise Unavailable(f"libvirt-python is not installed: {install_hint()}") from None
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

