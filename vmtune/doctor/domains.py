"""The host's domains, and the same overlap checks as ``vmtune plan`` (vmtune.placement.audit).

The domains come from libvirt when ``--connect URI`` is given (read-only connection; every defined
domain with its state), else from libvirt's runtime status files ``/run/libvirt/qemu/*.xml``: one
``<domstatus>`` per running domain, wrapping its live ``<domain>`` (root-only files).

They are judged against the host of their URI, as ``vmtune plan`` judges them (one host per URI,
vmtune/live/hostview.py ``of``): the sysfs tree for this machine's system daemon (and for the status
files, which are its); the host libvirt describes for any other ``--connect URI``.

``load`` fills ``ctx.domains`` before the checks run (memory and state use them too); ``report``
runs the audit once. Hugepage shortfalls are reported by memory.py, per node and with the running
domains, so the audit's ``hugepages`` problems are not repeated here.
"""

from __future__ import annotations

import os

from lxml import etree

from ..xml import xmlsafe
from ..errors import Unavailable, VmtuneError
from ..live import connect, hostview
from ..live.domains import state_text, word_text
from ..xml.model import Domain
from ..placement.audit import holds_now
from .findings import Context, Finding, maker

new = maker("domains")
STATUS_DIR = "run/libvirt/qemu"
FAIL_KINDS = ("cpu-overlap", "core-overlap")
FIXES = {"cpu-overlap": "vmtune apply --all (one plan for the whole host)",
         "core-overlap": "vmtune apply --all (one plan for the whole host)",
         "float": "vmtune apply {0}", "not-applied": "vmtune apply {0}",
         "unknown-profile": "vmtune tag {0} --profile latency (or add the profile)",
         "device-remote": "vmtune apply {0} (it moves beside its device at its next start)"}


def identity(xml: str) -> tuple[str | None, str | None]:
    """(uuid, name) of a domain XML; (None, None) when it cannot be read."""
    try:
        root = xmlsafe.parse(xml, "domain XML")
    except VmtuneError:
        return None, None
    dom = Domain(root)  # reads a value as libvirt does, a comment inside it left out
    return dom.uuid, dom.name


def from_libvirt(uri: str, ctx: Context | None = None) -> tuple[list[tuple[str, str]] | None, str]:
    """Every domain of ``uri`` (a read-only connection) with its state; None and why when it cannot.
    With ``ctx``, also the host of ``uri`` (``ctx.host``), read while connected."""
    try:
        connect.libvirt()
    except Unavailable:
        return None, f"libvirt-python is not installed ({connect.install_hint()})"
    try:
        with connect.connection(uri, read_only=True) as conn:
            out = [(d.XMLDesc(0), state_text(d.state()[0], "no state")) for d in conn.listAllDomains(0)]
            if ctx is not None:
                ctx.host = host_of(ctx, conn, uri)
    except VmtuneError as exc:
        return None, f"cannot read the domains of {uri}: {getattr(exc, 'reason', exc)}"
    return out, f"libvirt {uri}"


def host_of(ctx: Context, conn, uri: str | None):
    """The host of ``uri`` (``hostview.of``; None: this machine's system daemon), on the doctor's
    trees; the error's text when it cannot be read."""
    try:
        return hostview.of(conn, uri, sysfs=ctx.roots.sysfs, proc=ctx.roots.proc)
    except VmtuneError as exc:
        return str(exc)


def from_status_files(ctx: Context) -> tuple[list[tuple[str, str]] | None, str]:
    folder = ctx.path("root", STATUS_DIR)
    if not os.path.isdir(folder):
        return [], f"no {folder}: no running domain"
    out = []
    for rel in ctx.glob("root", f"{STATUS_DIR}/*.xml"):
        try:
            with open(ctx.path("root", rel), "rb") as fh:
                data = fh.read()
        except PermissionError:
            return None, f"{folder}/*.xml are root's: run as root, or give --connect URI"
        except OSError:
            continue
        try:
            root = xmlsafe.parse(data, rel)
        except VmtuneError:
            continue
        dom = root.find("domain") if root.tag == "domstatus" else root if root.tag == "domain" else None
        if dom is None:
            continue
        word = root.get("state", "running")
        out.append((etree.tostring(dom, encoding="unicode"), word_text(word)))
    return out, f"{folder}/*.xml"


def load(ctx: Context, connect: str | None = None) -> None:
    """Set ``ctx.domains`` and ``ctx.domains_source`` (None and the reason when unknown)."""
    ctx.connect = connect
    if connect:
        ctx.domains, ctx.domains_source = from_libvirt(connect, ctx)
    elif ctx.has("root"):
        ctx.domains, ctx.domains_source = from_status_files(ctx)
    else:
        ctx.domains, ctx.domains_source = None, "no --root tree given (/run/libvirt/qemu) and no --connect"


def report(ctx: Context):
    """The audit of ``ctx.domains`` on the host of their URI (``ctx.host``; cached on ctx); None
    when there is nothing to audit (no domains, or no sysfs tree for this machine's host), the error
    text when it cannot run."""
    if ctx.audit is None and ctx.domains is not None:
        if ctx.host is None:  # the status files or the given domains: this machine's system daemon's
            ctx.host = host_of(ctx, None, None)
        if isinstance(ctx.host, str):
            ctx.audit = ctx.host
        elif ctx.host.host is not None:
            from ..placement.audit import audit

            try:
                ctx.audit = audit(ctx.host.host, ctx.domains, config=ctx.cfg)
            except VmtuneError as exc:
                ctx.audit = str(exc)
    return ctx.audit


def check(ctx: Context) -> list[Finding]:
    source = ctx.domains_source
    if ctx.domains is None:
        if ctx.connect:
            return [new("WARN", f"--connect {ctx.connect}", source, "the domains, to audit them")]
        return [new("SKIP", ctx.path("root", STATUS_DIR), source)]
    if not ctx.domains:
        return [new("INFO", source, "no domains")]
    audit = report(ctx)
    if audit is None:
        return [new("SKIP", source, f"{len(ctx.domains)} domain(s); no sysfs tree to audit them against")]
    if isinstance(audit, str):
        return [new("WARN", source, f"cannot audit the domains: {audit}")]
    rows = [f"{row.name} ({row.profile or 'untagged'}, {row.state})" for row in audit.rows]
    out = [new("INFO", source, f"{len(rows)} domain(s): {', '.join(rows)}; host {ctx.host.describe()}")]
    running = {row.name for row in audit.rows if holds_now(row.state)}
    # hugepages: memory.py's; a device away from its domain matters while the domain runs
    shown = [p for p in audit.problems if p.kind != "hugepages"
             and (p.kind != "device-remote" or set(p.domains) <= running)]
    for problem in shown:
        level = "FAIL" if problem.kind in FAIL_KINDS else "WARN"
        fix = FIXES.get(problem.kind, "vmtune plan").format(*(problem.domains or ("NAME",)))
        out.append(new(level, f"{source} ({problem.kind})", problem.message, "no overlap" if level == "FAIL" else "",
                       fix))
    if not shown:
        out.append(new("OK", source, "no overlapping or floating domains"))
    return out
